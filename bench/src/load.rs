//! Closed-loop throughput scenarios.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Options of a throughput run.
#[derive(Debug, clap::Args)]
pub(crate) struct LoadArgs {
    /// Concurrent workers.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Spread requests over this many owners (`X-User-ID: owner-N`); 0 sends none.
    #[arg(long, default_value_t = 0)]
    owners: usize,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Health,
    /// `GET /api/v1/pool/status`: the cheapest authenticated route, so the authentication
    /// middleware is most of the work.
    PoolStatus,
    SpawnDestroy,
}

/// The `X-User-ID` of request number `n`, when owners are spread.
fn owner(owners: usize, n: usize) -> Option<String> {
    (owners > 0).then(|| format!("owner-{}", n % owners))
}

fn as_owner(request: reqwest::RequestBuilder, owner: Option<&str>) -> reqwest::RequestBuilder {
    match owner {
        Some(owner) => request.header("x-user-id", owner),
        None => request,
    }
}

async fn one(
    client: &reqwest::Client,
    base: &str,
    kind: Kind,
    owner: Option<&str>,
) -> anyhow::Result<()> {
    match kind {
        Kind::Health | Kind::PoolStatus => {
            let path = match kind {
                Kind::Health => "health",
                _ => "pool/status",
            };
            let response = as_owner(client.get(format!("{base}/api/v1/{path}")), owner)
                .send()
                .await?;
            if !response.status().is_success() {
                bail!("{path}: {}", response.status());
            }
            response.bytes().await?;
        }
        Kind::SpawnDestroy => {
            let id = spawn_mock(client, base, owner).await?;
            destroy(client, base, &id, owner).await?;
        }
    }
    Ok(())
}

/// Spawns a mock sandbox (as `owner` when given); its ID.
pub(crate) async fn spawn_mock(
    client: &reqwest::Client,
    base: &str,
    owner: Option<&str>,
) -> anyhow::Result<String> {
    let response = as_owner(client.post(format!("{base}/api/v1/sandboxes")), owner)
        .header("content-type", "application/json")
        .body(r#"{"provider":"mock"}"#)
        .send()
        .await?;
    if response.status() != 201 {
        bail!("spawn: {}", response.status());
    }
    let body: serde_json::Value = response.json().await?;
    Ok(body["id"]
        .as_str()
        .context("spawn response without id")?
        .to_owned())
}

/// Destroys a sandbox.
pub(crate) async fn destroy(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    owner: Option<&str>,
) -> anyhow::Result<()> {
    let response = as_owner(
        client.delete(format!("{base}/api/v1/sandboxes/{id}")),
        owner,
    )
    .send()
    .await?;
    if !response.status().is_success() {
        bail!("destroy: {}", response.status());
    }
    response.bytes().await?;
    Ok(())
}

/// What a closed-loop run measured.
pub(crate) struct Measured {
    /// Latency of each completed unit, in microseconds, sorted.
    pub latencies: Vec<u64>,
    /// Units that failed.
    pub errors: u64,
    /// Seconds the run took.
    pub elapsed: f64,
}

impl Measured {
    /// Completed units per second.
    pub fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed
    }
}

/// `concurrency` workers sending `kind` back to back for `seconds`, worker `n` to
/// `bases[n % bases.len()]`.
pub(crate) async fn measure(
    client: &reqwest::Client,
    bases: &[String],
    kind: Kind,
    concurrency: usize,
    owners: usize,
    seconds: u64,
) -> anyhow::Result<Measured> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let client = client.clone();
            let base = bases[worker % bases.len()].clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut errors = 0u64;
                let mut n = worker;
                while Instant::now() < deadline {
                    let begun = Instant::now();
                    let owner = owner(owners, n);
                    n += concurrency;
                    match one(&client, &base, kind, owner.as_deref()).await {
                        Ok(()) => latencies
                            .push(u64::try_from(begun.elapsed().as_micros()).unwrap_or(u64::MAX)),
                        Err(_) => errors += 1,
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (samples, failed) = worker.await?;
        latencies.extend(samples);
        errors += failed;
    }
    latencies.sort_unstable();
    Ok(Measured {
        latencies,
        errors,
        elapsed: started.elapsed().as_secs_f64(),
    })
}

pub(crate) async fn run(base: &str, kind: Kind, args: &LoadArgs) -> anyhow::Result<()> {
    let client = crate::client_builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    one(&client, base, kind, owner(args.owners, 0).as_deref())
        .await
        .context("warm-up request failed; is svc running?")?;
    let bases = [base.to_owned()];
    let measured = measure(
        &client,
        &bases,
        kind,
        args.concurrency,
        args.owners,
        args.seconds,
    )
    .await?;
    let unit = match kind {
        Kind::Health | Kind::PoolStatus => "requests",
        Kind::SpawnDestroy => "spawn+destroy pairs",
    };
    let (latencies, errors) = (&measured.latencies, measured.errors);
    println!(
        "{kind:?}: {} {unit} in {:.1}s = {:.0}/s, errors {errors}, latency ms p50 {:.2} p99 {:.2} max {:.2} (concurrency {})",
        latencies.len(),
        measured.elapsed,
        measured.rate(),
        crate::percentile_ms(latencies, 50.0),
        crate::percentile_ms(latencies, 99.0),
        crate::percentile_ms(latencies, 100.0),
        args.concurrency
    );
    if errors > 0 {
        bail!("{errors} requests failed");
    }
    Ok(())
}
