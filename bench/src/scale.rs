//! The scale scenario (issue 21): one server (or several replicas) holding many live mock
//! sandboxes, many SSE subscribers and many concurrent NDJSON exec streams, and what each costs:
//! list, page and get latency, spawn+destroy throughput next to the empty server's, memory per
//! sandbox and per subscriber, event fan-out latency (with a stalled subscriber too), and
//! stream fairness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::exec::rss_kib;
use crate::load::{measure, spawn_mock, Kind};
use crate::percentile_ms;

/// Options of `scale`.
#[derive(Debug, clap::Args)]
pub(crate) struct ScaleArgs {
    /// The replicas' base URLs, comma-separated (default: `--url`); sandboxes, subscribers and
    /// load are spread over them.
    #[arg(long, value_delimiter = ',')]
    replicas: Vec<String>,
    /// The servers' PIDs, comma-separated, for their resident memory (summed).
    #[arg(long, value_delimiter = ',')]
    pids: Vec<u32>,
    /// Live mock sandboxes to hold.
    #[arg(long, default_value_t = 10_000)]
    sandboxes: usize,
    /// SSE subscribers to hold.
    #[arg(long, default_value_t = 10_000)]
    subscribers: usize,
    /// Concurrent NDJSON exec streams.
    #[arg(long, default_value_t = 1_000)]
    streams: usize,
    /// Bytes of zeros each stream's command base64-encodes.
    #[arg(long, default_value_t = 196_608)]
    stream_bytes: u64,
    /// Concurrent requests while filling and for spawn+destroy.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds of each spawn+destroy run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Requests per latency measurement.
    #[arg(long, default_value_t = 1_000)]
    iterations: usize,
    /// Events per fan-out measurement.
    #[arg(long, default_value_t = 20)]
    events: usize,
    /// Spawn+destroy pairs/s of the same set-up with nothing in it (a run with
    /// `--sandboxes 0` on a fresh server), to compare with.
    #[arg(long)]
    empty_rate: Option<f64>,
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The summed RSS of the servers, in KiB (0 without PIDs).
fn rss(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|pid| rss_kib(*pid)).sum()
}

pub(crate) async fn run(url: &str, args: &ScaleArgs) -> anyhow::Result<()> {
    let bases: Vec<String> = if args.replicas.is_empty() {
        vec![url.to_owned()]
    } else {
        args.replicas.clone()
    };
    let client = crate::client_builder()
        .pool_max_idle_per_host(args.concurrency.max(args.streams))
        .build()?;
    println!(
        "scale: {} replica(s), {} sandboxes, {} subscribers, {} streams",
        bases.len(),
        args.sandboxes,
        args.subscribers,
        args.streams
    );

    // Memory first, on the fresh server: what the live sandboxes hold, not what churn left.
    let rss_before_fill = rss(&args.pids);
    if args.sandboxes == 0 {
        // The empty run's warm-up, as filling is the full run's: a fresh server's first seconds
        // (connections opening, caches filling) are not what is compared.
        measure(&client, &bases, Kind::SpawnDestroy, args.concurrency, 0, 2).await?;
    }
    let filled = Instant::now();
    let sandboxes = fill(&client, &bases, args.sandboxes, args.concurrency).await?;
    let fill_secs = filled.elapsed().as_secs_f64();
    let rss_full = rss(&args.pids);
    println!(
        "filled: {} sandboxes in {fill_secs:.1} s ({:.0}/s); RSS {:.1} MiB from {:.1} MiB, {:.2} KiB per sandbox",
        sandboxes.len(),
        sandboxes.len() as f64 / fill_secs,
        mib(rss_full),
        mib(rss_before_fill),
        rss_full.saturating_sub(rss_before_fill) as f64 / sandboxes.len().max(1) as f64
    );

    if !sandboxes.is_empty() {
        lists(&client, &bases[0], args, &sandboxes).await?;
    }

    let full = measure(
        &client,
        &bases,
        Kind::SpawnDestroy,
        args.concurrency,
        0,
        args.seconds,
    )
    .await?;
    let compared = args
        .empty_rate
        .map(|empty| {
            format!(
                " = {:.0}% of the empty server's {empty:.0}",
                100.0 * full.rate() / empty
            )
        })
        .unwrap_or_default();
    println!(
        "with {} live: spawn+destroy {:.0} pairs/s (p99 {:.2} ms){compared}",
        sandboxes.len(),
        full.rate(),
        percentile_ms(&full.latencies, 99.0),
    );
    if full.errors > 0 {
        bail!("{} spawn+destroy pairs failed", full.errors);
    }

    streams(&client, &bases, args, &sandboxes).await?;
    fan_out(&client, &bases, args).await?;
    println!("final RSS {:.1} MiB", mib(rss(&args.pids)));
    Ok(())
}

/// Spawns `count` mock sandboxes spread over the replicas; (replica, ID) of each.
async fn fill(
    client: &reqwest::Client,
    bases: &[String],
    count: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<(usize, String)>> {
    let workers = concurrency.max(1);
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let client = client.clone();
            let bases = bases.to_vec();
            tokio::spawn(async move {
                let mut made = Vec::new();
                for n in (worker..count).step_by(workers) {
                    let replica = n % bases.len();
                    made.push((replica, spawn_mock(&client, &bases[replica], None).await?));
                }
                anyhow::Ok(made)
            })
        })
        .collect();
    let mut sandboxes = Vec::with_capacity(count);
    for task in tasks {
        sandboxes.extend(task.await??);
    }
    Ok(sandboxes)
}

/// `GET /sandboxes?limit=100` and `GET /sandboxes/{id}` latency, and paging through all.
async fn lists(
    client: &reqwest::Client,
    base: &str,
    args: &ScaleArgs,
    sandboxes: &[(usize, String)],
) -> anyhow::Result<()> {
    let mut first = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let started = Instant::now();
        let response = client
            .get(format!("{base}/api/v1/sandboxes?limit=100"))
            .send()
            .await?;
        let more = response.headers().contains_key("x-next-cursor");
        let page: Vec<Value> = response.json().await?;
        first.push(micros(started));
        if page.len() != 100.min(sandboxes.len()) || (sandboxes.len() > 100 && !more) {
            bail!("first page: {} sandboxes, next cursor {more}", page.len());
        }
    }
    first.sort_unstable();

    let mut whole = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let mut cursor: Option<String> = None;
        let mut seen = 0;
        loop {
            let mut request = client.get(format!("{base}/api/v1/sandboxes?limit=1000"));
            if let Some(cursor) = &cursor {
                request = request.query(&[("cursor", cursor)]);
            }
            let response = request.send().await?;
            cursor = response
                .headers()
                .get("x-next-cursor")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let page: Vec<Value> = response.json().await?;
            seen += page.len();
            if cursor.is_none() {
                break;
            }
        }
        whole.push(micros(started));
        if seen != sandboxes.len() {
            bail!("paging saw {seen} of {} sandboxes", sandboxes.len());
        }
    }
    whole.sort_unstable();

    let mut gets = Vec::with_capacity(args.iterations);
    for n in 0..args.iterations {
        // A stride through the list, so the reads are spread over the table.
        let (_, id) = &sandboxes[(n * 7919) % sandboxes.len()];
        let started = Instant::now();
        let response = client
            .get(format!("{base}/api/v1/sandboxes/{id}"))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("get {id}: {}", response.status());
        }
        response.bytes().await?;
        gets.push(micros(started));
    }
    gets.sort_unstable();
    println!(
        "first page (limit 100): p50 {:.2} ms, p99 {:.2} ms; all {} by 1000: median {:.1} ms; get: p50 {:.2} ms, p99 {:.2} ms",
        percentile_ms(&first, 50.0),
        percentile_ms(&first, 99.0),
        sandboxes.len(),
        percentile_ms(&whole, 50.0),
        percentile_ms(&gets, 50.0),
        percentile_ms(&gets, 99.0)
    );
    Ok(())
}

/// `args.streams` NDJSON exec streams at once, each on its own sandbox (on the replica that
/// holds it): all must end whole; the slowest against the median.
async fn streams(
    client: &reqwest::Client,
    bases: &[String],
    args: &ScaleArgs,
    sandboxes: &[(usize, String)],
) -> anyhow::Result<()> {
    if args.streams == 0 || sandboxes.is_empty() {
        return Ok(());
    }
    let command = format!("head -c {} /dev/zero | base64", args.stream_bytes);
    // base64 of n bytes, with a newline after every 76 characters.
    let encoded = args.stream_bytes.div_ceil(3) * 4;
    let expected = encoded + encoded.div_ceil(76);
    let rss_before = rss(&args.pids);
    let start = Arc::new(tokio::sync::Barrier::new(args.streams + 1));
    let started = Instant::now();
    let tasks: Vec<_> = sandboxes
        .iter()
        .cycle()
        .take(args.streams)
        .map(|(replica, id)| {
            let client = client.clone();
            let url = format!("{}/api/v1/sandboxes/{id}/exec", bases[*replica]);
            let body = json!({"command": command, "stream": true, "timeout": "10m"});
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                let begun = Instant::now();
                let response = client.post(url).json(&body).send().await?;
                if !response.status().is_success() {
                    bail!("stream: {}", response.status());
                }
                let mut body = response.bytes_stream();
                let mut carry = Vec::new();
                let mut bytes = 0u64;
                let mut exit = None;
                while let Some(chunk) = body.next().await {
                    carry.extend_from_slice(&chunk?);
                    while let Some(end) = carry.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = carry.drain(..=end).collect();
                        let value: Value = serde_json::from_slice(&line)?;
                        if value["stream"] == "exit" {
                            exit = value["exit_code"].as_i64();
                        } else if let Some(data) = value["data"].as_str() {
                            bytes += data.len() as u64;
                        }
                    }
                }
                anyhow::Ok((micros(begun), bytes, exit))
            })
        })
        .collect();
    start.wait().await;
    let mut rss_max = rss_before;
    let mut durations = Vec::new();
    let mut total = 0u64;
    let pending = futures::future::join_all(tasks);
    tokio::pin!(pending);
    let results = loop {
        tokio::select! {
            results = &mut pending => break results,
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                rss_max = rss_max.max(rss(&args.pids));
            }
        }
    };
    let wall = started.elapsed().as_secs_f64();
    for result in results {
        let (took, bytes, exit) = result.context("stream task")??;
        if exit != Some(0) || bytes != expected {
            bail!("a stream ended with exit {exit:?} after {bytes} of {expected} bytes");
        }
        durations.push(took);
        total += bytes;
    }
    durations.sort_unstable();
    let median = percentile_ms(&durations, 50.0);
    let slowest = percentile_ms(&durations, 100.0);
    println!(
        "streams: {} x {expected} bytes, all whole, in {wall:.1} s = {:.0} MB/s aggregate; per stream median {median:.0} ms, fastest {:.0} ms, slowest {slowest:.0} ms = {:.2}x the median; RSS {:.1} MiB at most ({:+.1} MiB)",
        durations.len(),
        total as f64 / wall / 1e6,
        percentile_ms(&durations, 0.0),
        slowest / median,
        mib(rss_max),
        mib(rss_max) - mib(rss_before)
    );
    Ok(())
}

/// One SSE subscriber on a raw connection: reports the instant it reads each `quota.saved`
/// event, in order. With `stall`, it reads the response head and then nothing (a small receive
/// window, so the server soon cannot write to it).
async fn subscriber(
    base: &str,
    stall: bool,
    ready: mpsc::Sender<anyhow::Result<()>>,
    seen: mpsc::UnboundedSender<(usize, Instant)>,
) -> anyhow::Result<tokio::net::TcpStream> {
    let (stream, text) = match subscribe(base, stall).await {
        Ok(opened) => opened,
        Err(err) => {
            let _ = ready
                .send(Err(anyhow::anyhow!("a subscriber: {err:#}")))
                .await;
            return Err(err);
        }
    };
    let _ = ready.send(Ok(())).await;
    if stall {
        return Ok(stream);
    }
    read_events(stream, text, seen).await
}

/// Opens `GET /events` (retrying a refused or reset connection a few times: thousands of
/// connects at once can overflow the listen backlog); the stream and what was read of it.
async fn subscribe(base: &str, stall: bool) -> anyhow::Result<(tokio::net::TcpStream, String)> {
    let mut attempt = 0;
    loop {
        match open_events(base, stall).await {
            Ok(opened) => return Ok(opened),
            Err(_) if attempt < 5 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

async fn open_events(base: &str, stall: bool) -> anyhow::Result<(tokio::net::TcpStream, String)> {
    let authority = base.trim_start_matches("http://");
    let addr: std::net::SocketAddr = authority.parse().context("replica address")?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    if stall {
        socket.set_recv_buffer_size(4096)?;
    }
    let mut stream = socket.connect(addr).await?;
    let types = if stall { "" } else { "?types=quota.saved" };
    stream
        .write_all(
            format!("GET /api/v1/events{types} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut buffer = vec![0u8; 4096];
    let mut text = String::new();
    while !text.contains("\r\n\r\n") {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            bail!("the events stream closed before its head");
        }
        text.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    if !text.starts_with("HTTP/1.1 200") {
        bail!("events: {}", text.lines().next().unwrap_or_default());
    }
    Ok((stream, text))
}

/// Reports each `quota.saved` event read from an open events stream.
async fn read_events(
    mut stream: tokio::net::TcpStream,
    text: String,
    seen: mpsc::UnboundedSender<(usize, Instant)>,
) -> anyhow::Result<tokio::net::TcpStream> {
    let mut buffer = vec![0u8; 4096];
    let mut count = 0;
    let mut pending = text
        .split_once("\r\n\r\n")
        .map(|(_, rest)| rest.to_owned())
        .unwrap_or_default();
    loop {
        while let Some(end) = pending.find("\n\n") {
            if pending[..end].contains("quota.saved") {
                let _ = seen.send((count, Instant::now()));
                count += 1;
            }
            pending.drain(..end + 2);
        }
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Ok(stream);
        }
        pending.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
}

/// `args.subscribers` SSE subscribers spread over the replicas: memory per subscriber, then
/// how long `args.events` events take to reach every one, without and with a stalled one.
async fn fan_out(
    client: &reqwest::Client,
    bases: &[String],
    args: &ScaleArgs,
) -> anyhow::Result<()> {
    if args.subscribers == 0 {
        return Ok(());
    }
    let rss_before = rss(&args.pids);
    let (ready_tx, mut ready) = mpsc::channel(args.subscribers);
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let connected = Instant::now();
    let mut tasks = Vec::with_capacity(args.subscribers);
    for n in 0..args.subscribers {
        let base = bases[n % bases.len()].clone();
        let (ready_tx, seen_tx) = (ready_tx.clone(), seen_tx.clone());
        tasks.push(tokio::spawn(async move {
            subscriber(&base, false, ready_tx, seen_tx).await
        }));
        // Connect in waves, so the listen backlog never overflows.
        if n % 256 == 255 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    for _ in 0..args.subscribers {
        tokio::time::timeout(Duration::from_secs(60), ready.recv())
            .await
            .context("subscribers connecting")?
            .context("subscribers gone")??;
    }
    let connect_secs = connected.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_held = rss(&args.pids);
    println!(
        "subscribers: {} connected in {connect_secs:.1} s; RSS {:.1} MiB ({:+.1} MiB, {:.1} KiB each)",
        args.subscribers,
        mib(rss_held),
        mib(rss_held) - mib(rss_before),
        rss_held.saturating_sub(rss_before) as f64 / args.subscribers as f64
    );

    let mut next_event = 0;
    let alone = deliver(client, bases, args, &mut seen, &mut next_event).await?;
    report_delivery("fan-out", args.subscribers, &alone);

    let stalled = subscriber(&bases[0], true, ready_tx.clone(), seen_tx.clone()).await?;
    let beside = deliver(client, bases, args, &mut seen, &mut next_event).await?;
    report_delivery(
        "fan-out beside a stalled subscriber",
        args.subscribers,
        &beside,
    );
    drop(stalled);
    for task in tasks {
        task.abort();
    }
    println!("RSS after the events: {:.1} MiB", mib(rss(&args.pids)));
    Ok(())
}

/// Publishes `args.events` events (a quota saved on the first replica), one at a time, and
/// waits for each to reach every subscriber: every delivery's latency (µs) and each event's
/// time to reach all.
async fn deliver(
    client: &reqwest::Client,
    bases: &[String],
    args: &ScaleArgs,
    seen: &mut mpsc::UnboundedReceiver<(usize, Instant)>,
    next_event: &mut usize,
) -> anyhow::Result<(Vec<u64>, Vec<u64>)> {
    let mut deliveries = Vec::with_capacity(args.events * args.subscribers);
    let mut to_all = Vec::with_capacity(args.events);
    for _ in 0..args.events {
        let event = *next_event;
        *next_event += 1;
        let published = Instant::now();
        let response = client
            .put(format!("{}/api/v1/quotas/scale-{event}", bases[0]))
            .json(&json!({"max_sandboxes": 1}))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("quota save: {}", response.status());
        }
        let mut reached = 0;
        let mut last = 0;
        while reached < args.subscribers {
            let (index, at) = tokio::time::timeout(Duration::from_secs(30), seen.recv())
                .await
                .context("an event did not reach every subscriber in 30 s")?
                .context("subscribers gone")?;
            if index != event {
                bail!("a subscriber saw event {index} while {event} was expected");
            }
            let latency = u64::try_from(at.duration_since(published).as_micros()).unwrap_or(0);
            deliveries.push(latency);
            last = last.max(latency);
            reached += 1;
        }
        to_all.push(last);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    deliveries.sort_unstable();
    to_all.sort_unstable();
    Ok((deliveries, to_all))
}

fn report_delivery(what: &str, subscribers: usize, (deliveries, to_all): &(Vec<u64>, Vec<u64>)) {
    println!(
        "{what}: {} events to {subscribers} subscribers; delivery p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; to all: median {:.1} ms",
        to_all.len(),
        percentile_ms(deliveries, 50.0),
        percentile_ms(deliveries, 99.0),
        percentile_ms(deliveries, 100.0),
        percentile_ms(to_all, 50.0)
    );
}
