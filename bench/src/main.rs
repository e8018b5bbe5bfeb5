//! `svc-bench`: a small closed-loop load generator for svc benchmarks (see `bench/README.md`).
//! Each of `--concurrency` workers sends requests back to back until `--duration` passes;
//! the tool prints throughput and latency percentiles.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Scenario {
    /// `GET /api/v1/health`.
    Health,
    /// `POST /api/v1/sandboxes` then `DELETE /api/v1/sandboxes/{id}` on the mock provider.
    SpawnDestroy,
}

/// Closed-loop load against a running svc.
#[derive(Debug, Parser)]
struct Args {
    /// What to measure.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Server base URL.
    #[arg(long, default_value = "http://127.0.0.1:7423")]
    url: String,
    /// Concurrent workers.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

struct WorkerResult {
    latencies_us: Vec<u64>,
    errors: u64,
}

async fn one(client: &reqwest::Client, base: &str, scenario: Scenario) -> anyhow::Result<()> {
    match scenario {
        Scenario::Health => {
            let response = client.get(format!("{base}/api/v1/health")).send().await?;
            if !response.status().is_success() {
                bail!("health: {}", response.status());
            }
            response.bytes().await?;
        }
        Scenario::SpawnDestroy => {
            let response = client
                .post(format!("{base}/api/v1/sandboxes"))
                .header("content-type", "application/json")
                .body(r#"{"provider":"mock"}"#)
                .send()
                .await?;
            if response.status() != 201 {
                bail!("spawn: {}", response.status());
            }
            let body: serde_json::Value = response.json().await?;
            let id = body["id"].as_str().context("spawn response without id")?;
            let response = client
                .delete(format!("{base}/api/v1/sandboxes/{id}"))
                .send()
                .await?;
            if !response.status().is_success() {
                bail!("destroy: {}", response.status());
            }
            response.bytes().await?;
        }
    }
    Ok(())
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)] as f64 / 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    one(&client, &args.url, args.scenario)
        .await
        .context("warm-up request failed; is svc running?")?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let client = client.clone();
            let base = args.url.clone();
            let scenario = args.scenario;
            tokio::spawn(async move {
                let mut result = WorkerResult {
                    latencies_us: Vec::new(),
                    errors: 0,
                };
                while Instant::now() < deadline {
                    let begun = Instant::now();
                    match one(&client, &base, scenario).await {
                        Ok(()) => result
                            .latencies_us
                            .push(u64::try_from(begun.elapsed().as_micros()).unwrap_or(u64::MAX)),
                        Err(_) => result.errors += 1,
                    }
                }
                result
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let result = worker.await?;
        latencies.extend(result.latencies_us);
        errors += result.errors;
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let unit = match args.scenario {
        Scenario::Health => "requests",
        Scenario::SpawnDestroy => "spawn+destroy pairs",
    };
    println!(
        "{:?}: {} {unit} in {elapsed:.1}s = {:.0}/s, errors {errors}, latency ms p50 {:.2} p99 {:.2} max {:.2} (concurrency {})",
        args.scenario,
        latencies.len(),
        latencies.len() as f64 / elapsed,
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        percentile(&latencies, 100.0),
        args.concurrency
    );
    if errors > 0 {
        bail!("{errors} requests failed");
    }
    Ok(())
}
