//! Lease operations on the embedded SQLite store, below HTTP: acquire (each a fresh resource)
//! and renew (of held leases), closed loop, in a throw-away database file.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use svc_core::worker::LeaseAcquire;
use svc_store::sqlite::SqliteStore;
use svc_store::Store;

/// Options of `leases`.
#[derive(Debug, clap::Args)]
pub(crate) struct LeaseArgs {
    /// Concurrent tasks (each its own holder).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Directory for the database (default: the system temp dir).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy)]
enum Phase {
    Acquire,
    Renew,
}

pub(crate) async fn run(args: &LeaseArgs) -> anyhow::Result<()> {
    let dir = match &args.dir {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::tempdir()?,
    };
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("leases.db")).await?);
    for phase in [Phase::Acquire, Phase::Renew] {
        measure(&store, phase, args).await?;
    }
    store.close().await;
    Ok(())
}

async fn measure(store: &Arc<dyn Store>, phase: Phase, args: &LeaseArgs) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|task| {
            let store = Arc::clone(store);
            tokio::spawn(async move {
                let holder = format!("w{task}");
                let ttl = Duration::from_secs(3600);
                let mut latencies = Vec::new();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let resource = match phase {
                        Phase::Acquire => format!("r-{task}-{n}"),
                        // Renew cycles over the first thousand this holder acquired.
                        Phase::Renew => format!("r-{task}-{}", n % 1000),
                    };
                    n += 1;
                    let begun = Instant::now();
                    let now = chrono::Utc::now();
                    let ok = match phase {
                        Phase::Acquire => matches!(
                            store.acquire_lease(&resource, &holder, ttl, now).await?,
                            LeaseAcquire::Acquired(_)
                        ),
                        Phase::Renew => store
                            .renew_lease(&resource, &holder, ttl, now)
                            .await?
                            .is_some(),
                    };
                    if !ok {
                        bail!("lease {resource} refused to its holder");
                    }
                    latencies.push(u64::try_from(begun.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let name = match phase {
        Phase::Acquire => "acquire",
        Phase::Renew => "renew",
    };
    println!(
        "leases {name}: {} ops in {elapsed:.1}s = {:.0}/s, latency ms p50 {:.3} p99 {:.3} (concurrency {})",
        latencies.len(),
        latencies.len() as f64 / elapsed,
        crate::percentile_ms(&latencies, 50.0),
        crate::percentile_ms(&latencies, 99.0),
        args.concurrency
    );
    Ok(())
}
