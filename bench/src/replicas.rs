//! Cross-replica event latency: subscribes to `sandbox.created` on one replica, spawns on
//! another, and measures from the event's own timestamp (set when the publishing replica made
//! it, on the same host clock) to its arrival at the subscriber.

use std::time::Duration;

use anyhow::{bail, Context};
use futures::StreamExt;

/// Options of `event-latency`.
#[derive(Debug, clap::Args)]
pub(crate) struct EventLatencyArgs {
    /// The replica to spawn on.
    #[arg(long)]
    publish: String,
    /// The replica to subscribe to.
    #[arg(long)]
    subscribe: String,
    /// Spawns (one at a time; each destroyed after its event arrived).
    #[arg(long, default_value_t = 200)]
    iterations: usize,
}

pub(crate) async fn event_latency(args: &EventLatencyArgs) -> anyhow::Result<()> {
    let client = crate::client_builder().build()?;
    let response = client
        .get(format!(
            "{}/api/v1/events?types=sandbox.created",
            args.subscribe
        ))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("subscribe: {}", response.status());
    }
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut samples = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let id = crate::load::spawn_mock(&client, &args.publish, None).await?;
        let published = loop {
            if let Some(end) = buffer.find("\n\n") {
                let message: String = buffer.drain(..end + 2).collect();
                let Some(data) = message.lines().find_map(|l| l.strip_prefix("data: ")) else {
                    continue;
                };
                let event: serde_json::Value = serde_json::from_str(data)?;
                if event["sandbox_id"] == id.as_str() {
                    let stamp = event["timestamp"].as_str().context("event timestamp")?;
                    break chrono::DateTime::parse_from_rfc3339(stamp)?;
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .context("no event within 10 s")?
                .context("the event stream ended")??;
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        };
        let arrived = chrono::Utc::now();
        let micros = (arrived - published.with_timezone(&chrono::Utc))
            .num_microseconds()
            .unwrap_or(0)
            .max(0);
        samples.push(u64::try_from(micros).unwrap_or(0));
        crate::load::destroy(&client, &args.publish, &id, None).await?;
    }
    samples.sort_unstable();
    println!(
        "event-latency: n={} p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        samples.len(),
        crate::percentile_ms(&samples, 50.0),
        crate::percentile_ms(&samples, 99.0),
        crate::percentile_ms(&samples, 100.0)
    );
    Ok(())
}
