//! Previews (issue 19): the same page fetched directly (a server inside a sandbox, at the
//! container's address) and through svc's preview proxy, alternately, so both see the same
//! machine: sequential latency (p50, p99) and closed-loop throughput.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Options of a preview run.
#[derive(Debug, clap::Args)]
pub(crate) struct PreviewArgs {
    /// The page at the sandbox's own address.
    #[arg(long)]
    direct: String,
    /// The same page through the proxy.
    #[arg(long)]
    proxied: String,
    /// Sequential requests per latency sample.
    #[arg(long, default_value_t = 500)]
    requests: usize,
    /// Concurrent workers of the throughput sample.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds of each throughput sample.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Rounds, each measuring both paths.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Also serve the page here (127.0.0.1, HTTP/1.1 keep-alive) for the run: with a mock
    /// sandbox, whose ports are this host's, the proxy's reuse of upstream connections shows.
    #[arg(long)]
    serve: Option<u16>,
}

/// A small page on `port` of the loopback, connections kept alive.
async fn serve(port: u16) -> anyhow::Result<()> {
    let app = axum::Router::new().fallback(|| async { "<h1>preview</h1>" });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("serving the page on port {port}"))?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}

async fn fetch(client: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let response = client.get(url).send().await?;
    if !response.status().is_success() {
        bail!("{url}: {}", response.status());
    }
    response.bytes().await?;
    Ok(())
}

/// Sequential latencies, sorted, in microseconds.
async fn latencies(client: &reqwest::Client, url: &str, count: usize) -> anyhow::Result<Vec<u64>> {
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let begun = Instant::now();
        fetch(client, url).await?;
        samples.push(u64::try_from(begun.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    samples.sort_unstable();
    Ok(samples)
}

/// Requests per second with `concurrency` workers for `seconds`; errors count against it.
async fn throughput(
    client: &reqwest::Client,
    url: &str,
    concurrency: usize,
    seconds: u64,
) -> (f64, u64) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move {
                let (mut done, mut errors) = (0u64, 0u64);
                while Instant::now() < deadline {
                    match fetch(&client, &url).await {
                        Ok(()) => done += 1,
                        Err(_) => errors += 1,
                    }
                }
                (done, errors)
            })
        })
        .collect();
    let (mut done, mut errors) = (0u64, 0u64);
    for worker in workers {
        let (d, e) = worker.await.unwrap_or((0, 1));
        done += d;
        errors += e;
    }
    (done as f64 / started.elapsed().as_secs_f64(), errors)
}

pub(crate) async fn run(args: &PreviewArgs) -> anyhow::Result<()> {
    if let Some(port) = args.serve {
        serve(port).await?;
    }
    let client = crate::client_builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    fetch(&client, &args.direct)
        .await
        .context("direct warm-up")?;
    fetch(&client, &args.proxied)
        .await
        .context("proxied warm-up")?;
    let mut rows = Vec::new();
    for round in 1..=args.rounds {
        let direct = latencies(&client, &args.direct, args.requests).await?;
        let proxied = latencies(&client, &args.proxied, args.requests).await?;
        let (direct_rps, direct_errors) =
            throughput(&client, &args.direct, args.concurrency, args.seconds).await;
        let (proxied_rps, proxied_errors) =
            throughput(&client, &args.proxied, args.concurrency, args.seconds).await;
        let (d50, p50) = (
            crate::percentile_ms(&direct, 50.0),
            crate::percentile_ms(&proxied, 50.0),
        );
        println!(
            "round {round}: p50 direct {d50:.3} ms, proxied {p50:.3} ms (+{:.3} ms); p99 direct {:.3} ms, proxied {:.3} ms; \
             throughput direct {direct_rps:.0} req/s, proxied {proxied_rps:.0} req/s ({:.0}%); errors {direct_errors}/{proxied_errors}",
            p50 - d50,
            crate::percentile_ms(&direct, 99.0),
            crate::percentile_ms(&proxied, 99.0),
            100.0 * proxied_rps / direct_rps.max(1.0),
        );
        rows.push((p50 - d50, 100.0 * proxied_rps / direct_rps.max(1.0)));
    }
    let mut added: Vec<f64> = rows.iter().map(|r| r.0).collect();
    let mut kept: Vec<f64> = rows.iter().map(|r| r.1).collect();
    added.sort_by(f64::total_cmp);
    kept.sort_by(f64::total_cmp);
    println!(
        "median of {} rounds: the proxy adds {:.3} ms p50 (target under 1 ms) and keeps {:.0}% of direct throughput (target at least 70%)",
        rows.len(),
        added[added.len() / 2],
        kept[kept.len() / 2],
    );
    Ok(())
}
