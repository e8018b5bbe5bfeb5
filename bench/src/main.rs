//! `svc-bench`: load and latency tools for svc benchmarks (see `bench/README.md`).
//!
//! Throughput scenarios (`health`, `spawn-destroy`) run `--concurrency` workers back to back
//! for `--seconds`. Latency and throughput scenarios for exec and files run the same work
//! through the API and directly on the host (`--baseline`), so the two can be compared in one
//! run on one machine.

// A client of the service, outside it: the times it reads are the host's, as any client's.
#![allow(clippy::disallowed_methods)]

mod build;
mod docker;
mod exec;
mod governance;
mod identity;
mod leases;
mod load;
mod microvm;
mod observe;
mod pool;
mod preview;
mod replicas;
mod scale;

use clap::{Parser, Subcommand};

/// svc benchmarks.
#[derive(Debug, Parser)]
struct Args {
    /// Server base URL.
    #[arg(long, global = true, default_value = "http://127.0.0.1:7423")]
    url: String,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// `GET /api/v1/health` throughput.
    Health(load::LoadArgs),
    /// `GET /api/v1/pool/status` throughput: an authenticated route that does almost nothing.
    PoolStatus(load::LoadArgs),
    /// Spawn then destroy on the mock provider, throughput in pairs per second.
    SpawnDestroy(load::LoadArgs),
    /// Round-trip latency of `true`: buffered exec, streamed exec, and the host baseline.
    ExecLatency(exec::LatencyArgs),
    /// MB/s of a command's output through NDJSON streaming, and the host baseline.
    StreamThroughput(exec::ThroughputArgs),
    /// MB/s of file writes and reads through the API, and the host baseline.
    Files(exec::FilesArgs),
    /// The docker provider next to the raw Engine API: spawn-to-first-exec, exec, destroy.
    Docker(docker::DockerArgs),
    /// Template builds through svc next to the same builds through the Engine API.
    TemplateBuild(build::BuildArgs),
    /// Saves a quota for each of N owners (set-up of a governance run).
    Quotas(governance::QuotaArgs),
    /// Destroy → queued spawn answered, on a server with max_sandboxes 1 in queue mode.
    QueueWakeup(governance::WakeupArgs),
    /// Lease acquire and renew operations per second on SQLite (no server needed).
    Leases(leases::LeaseArgs),
    /// Writes a P-256 public key (PEM) and prints an ES256 token signed with it (set-up of the
    /// identity benchmark).
    MintToken(identity::MintArgs),
    /// Polls `GET /api/v1/metrics/scrape` every `--interval-ms` for `--seconds`.
    ScrapePoll(observe::PollArgs),
    /// Spawns `--sandboxes` mock sandboxes, then times `--iterations` scrapes.
    ScrapeLatency(observe::LatencyArgs),
    /// Spawn on one replica, `sandbox.created` received on another: the relay's latency.
    EventLatency(replicas::EventLatencyArgs),
    /// Providers side by side: spawn (boot), exec round trip, file throughput.
    Microvm(microvm::MicrovmArgs),
    /// Per user: spawn, exec and small-file round trips, destroy (pool mode next to plain).
    Pool(pool::PoolArgs),
    /// A page inside a sandbox, directly and through the preview proxy: latency, throughput.
    Preview(preview::PreviewArgs),
    /// Many live sandboxes, SSE subscribers and exec streams on one server (or replicas).
    Scale(scale::ScaleArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.scenario {
        Scenario::Health(load) => load::run(&args.url, load::Kind::Health, &load).await,
        Scenario::PoolStatus(load) => load::run(&args.url, load::Kind::PoolStatus, &load).await,
        Scenario::SpawnDestroy(load) => load::run(&args.url, load::Kind::SpawnDestroy, &load).await,
        Scenario::ExecLatency(latency) => exec::latency(&args.url, &latency).await,
        Scenario::StreamThroughput(throughput) => exec::throughput(&args.url, &throughput).await,
        Scenario::Files(files) => exec::files(&args.url, &files).await,
        Scenario::Docker(docker) => docker::run(&args.url, &docker).await,
        Scenario::TemplateBuild(build) => build::run(&args.url, &build).await,
        Scenario::Quotas(quotas) => governance::save_quotas(&args.url, &quotas).await,
        Scenario::QueueWakeup(wakeup) => governance::queue_wakeup(&args.url, &wakeup).await,
        Scenario::Leases(leases) => leases::run(&leases).await,
        Scenario::MintToken(mint) => identity::mint(&mint),
        Scenario::ScrapePoll(poll) => observe::poll(&args.url, &poll).await,
        Scenario::ScrapeLatency(latency) => observe::latency(&args.url, &latency).await,
        Scenario::EventLatency(latency) => replicas::event_latency(&latency).await,
        Scenario::Microvm(microvm) => microvm::run(&args.url, &microvm).await,
        Scenario::Pool(pool) => pool::run(&args.url, &pool).await,
        Scenario::Preview(preview) => preview::run(&preview).await,
        Scenario::Scale(scale) => scale::run(&args.url, &scale).await,
    }
}

/// An HTTP client for the server; with `SVC_API_KEY` set (as for svc's own clients), every
/// request carries it in `X-API-Key`, and with `SVC_BEARER_TOKEN` an `Authorization: Bearer`
/// header, so scenarios run against a server with auth on.
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    let mut headers = reqwest::header::HeaderMap::new();
    for (variable, header, prefix) in [
        ("SVC_API_KEY", "x-api-key", ""),
        ("SVC_BEARER_TOKEN", "authorization", "Bearer "),
    ] {
        if let Ok(value) = std::env::var(variable) {
            if let Ok(value) = reqwest::header::HeaderValue::from_str(&format!("{prefix}{value}")) {
                headers.insert(header, value);
            }
        }
    }
    reqwest::Client::builder().default_headers(headers)
}

/// Percentile of sorted microsecond samples, in milliseconds.
pub(crate) fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)] as f64 / 1000.0
}
