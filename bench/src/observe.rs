//! The observability benchmark's tools: a scraper polling `GET /metrics/scrape` at a fixed
//! interval (run beside a load to see what scraping costs it), and the latency of one scrape on a
//! server holding many sandboxes.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Options of `scrape-poll`.
#[derive(Debug, clap::Args)]
pub(crate) struct PollArgs {
    /// Milliseconds between scrapes.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Seconds to poll.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
}

/// Options of `scrape-latency`.
#[derive(Debug, clap::Args)]
pub(crate) struct LatencyArgs {
    /// Mock sandboxes to spawn first (kept running).
    #[arg(long, default_value_t = 10_000)]
    sandboxes: usize,
    /// Scrapes to time.
    #[arg(long, default_value_t = 50)]
    iterations: usize,
    /// Concurrent spawns while filling the server.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

async fn scrape_once(client: &reqwest::Client, url: &str) -> anyhow::Result<usize> {
    let response = client.get(url).send().await?;
    if !response.status().is_success() {
        bail!("scrape: {}", response.status());
    }
    Ok(response.bytes().await?.len())
}

/// Scrapes every `interval_ms` for `seconds`; prints how many scrapes ran and their p50.
pub(crate) async fn poll(base: &str, args: &PollArgs) -> anyhow::Result<()> {
    let client = crate::client_builder().build()?;
    let url = format!("{base}/api/v1/metrics/scrape");
    let mut tick = tokio::time::interval(Duration::from_millis(args.interval_ms));
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut took = Vec::new();
    while Instant::now() < deadline {
        tick.tick().await;
        let started = Instant::now();
        scrape_once(&client, &url).await?;
        took.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    took.sort_unstable();
    println!(
        "scrape-poll: {} scrapes every {} ms, p50 {:.2} ms, max {:.2} ms",
        took.len(),
        args.interval_ms,
        crate::percentile_ms(&took, 50.0),
        crate::percentile_ms(&took, 100.0)
    );
    Ok(())
}

/// Fills the server with `sandboxes` mock sandboxes, then times `iterations` scrapes.
pub(crate) async fn latency(base: &str, args: &LatencyArgs) -> anyhow::Result<()> {
    let client = crate::client_builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let filled = Instant::now();
    let per_worker = args.sandboxes.div_ceil(args.concurrency.max(1));
    let workers: Vec<_> = (0..args.concurrency.max(1))
        .map(|worker| {
            let client = client.clone();
            let base = base.to_owned();
            let count = per_worker.min(args.sandboxes.saturating_sub(worker * per_worker));
            tokio::spawn(async move {
                for _ in 0..count {
                    crate::load::spawn_mock(&client, &base, None).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.await.context("spawner")??;
    }
    println!(
        "scrape-latency: spawned {} sandboxes in {:.1}s",
        args.sandboxes,
        filled.elapsed().as_secs_f64()
    );
    let url = format!("{base}/api/v1/metrics/scrape");
    let mut took = Vec::with_capacity(args.iterations);
    let mut size = 0;
    for _ in 0..args.iterations {
        let started = Instant::now();
        size = scrape_once(&client, &url).await?;
        took.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    took.sort_unstable();
    println!(
        "scrape-latency: {} scrapes of {} bytes with {} sandboxes: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        took.len(),
        size,
        args.sandboxes,
        crate::percentile_ms(&took, 50.0),
        crate::percentile_ms(&took, 99.0),
        crate::percentile_ms(&took, 100.0)
    );
    Ok(())
}
