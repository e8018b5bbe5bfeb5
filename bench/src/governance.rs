//! Governance scenarios: saving many owner quotas (set-up for a realistic run), and the
//! latency from a destroy to the answer of a spawn waiting in the spawn queue.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;

/// Options of `quotas`.
#[derive(Debug, clap::Args)]
pub(crate) struct QuotaArgs {
    /// Owners `owner-0` .. `owner-N-1` to give a quota.
    #[arg(long, default_value_t = 1000)]
    owners: usize,
}

/// Saves a quota for every owner (generous limits: the run measures the cost, not denials).
pub(crate) async fn save_quotas(base: &str, args: &QuotaArgs) -> anyhow::Result<()> {
    let client = crate::client_builder().build()?;
    let started = Instant::now();
    let body = r#"{"max_sandboxes": 1000, "max_ttl": "2h", "max_exec_timeout": "10m"}"#;
    let saves = futures::stream::iter(0..args.owners)
        .map(|n| {
            let client = client.clone();
            async move {
                let response = client
                    .put(format!("{base}/api/v1/quotas/owner-{n}"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await?;
                if !response.status().is_success() {
                    bail!("quota owner-{n}: {}", response.status());
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for save in saves {
        save?;
    }
    println!(
        "quotas: {} saved in {:.1}s",
        args.owners,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Options of `queue-wakeup`.
#[derive(Debug, clap::Args)]
pub(crate) struct WakeupArgs {
    /// Measured destroy → dequeued-spawn round trips.
    #[arg(long, default_value_t = 200)]
    iterations: usize,
}

/// Needs a server with `defaults.max_sandboxes: 1` and `defaults.spawn_overflow: queue`. Each
/// round: one sandbox holds the capacity, a second spawn queues (seen through its
/// `spawn.queued` event), the holder is destroyed, and the time from sending the destroy to
/// the queued spawn's 201 is measured.
pub(crate) async fn queue_wakeup(base: &str, args: &WakeupArgs) -> anyhow::Result<()> {
    let client = crate::client_builder().build()?;
    let events = client
        .get(format!("{base}/api/v1/events?types=spawn.queued"))
        .send()
        .await?;
    if !events.status().is_success() {
        bail!("events: {}", events.status());
    }
    let mut events = events.bytes_stream();
    let mut holder = crate::load::spawn_mock(&client, base, None)
        .await
        .context("the first spawn failed; is svc running with max_sandboxes 1?")?;
    let mut wakeups = Vec::with_capacity(args.iterations);
    let mut destroys = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let waiter = {
            let (client, base) = (client.clone(), base.to_owned());
            tokio::spawn(async move {
                let id = crate::load::spawn_mock(&client, &base, None).await;
                (id, Instant::now())
            })
        };
        // The spawn is queued once its event arrives.
        let mut seen = String::new();
        while !seen.contains("spawn.queued") {
            let chunk = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .context("no spawn.queued event: is spawn_overflow queue?")?
                .context("the event stream ended")??;
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        let sent = Instant::now();
        crate::load::destroy(&client, base, &holder, None).await?;
        let destroyed = sent.elapsed();
        let (id, answered) = waiter.await?;
        holder = id?;
        wakeups.push(u64::try_from((answered - sent).as_micros()).unwrap_or(u64::MAX));
        destroys.push(u64::try_from(destroyed.as_micros()).unwrap_or(u64::MAX));
    }
    crate::load::destroy(&client, base, &holder, None).await?;
    wakeups.sort_unstable();
    destroys.sort_unstable();
    println!(
        "queue-wakeup: {} rounds; destroy sent -> queued spawn answered ms p50 {:.2} p90 {:.2} p99 {:.2}; the destroy alone ms p50 {:.2}",
        wakeups.len(),
        crate::percentile_ms(&wakeups, 50.0),
        crate::percentile_ms(&wakeups, 90.0),
        crate::percentile_ms(&wakeups, 99.0),
        crate::percentile_ms(&destroys, 50.0),
    );
    Ok(())
}
