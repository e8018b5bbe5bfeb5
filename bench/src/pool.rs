//! Pool mode's costs next to plain sandboxes of the same provider and image (issue 15): per
//! user, the spawn (a seat and a workspace in a running pool VM, or a container of its own),
//! exec round trips of `true`, and round trips of a small file write and read, whose pool
//! path adds the symlink check inside the VM. Every request names its user.

use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::docker::median;

/// Options of the pool run.
#[derive(Debug, clap::Args)]
pub(crate) struct PoolArgs {
    /// Image to spawn (the server's `pool.image` when it runs in pool mode).
    #[arg(long)]
    image: String,
    /// Users, each with one sandbox.
    #[arg(long, default_value_t = 4)]
    users: usize,
    /// Exec and file round trips per user.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Label of this run's rows (`plain`, `pool`).
    #[arg(long)]
    label: String,
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

async fn ok(response: reqwest::Response, what: &str) -> anyhow::Result<reqwest::Response> {
    if !response.status().is_success() {
        bail!("{what}: {} {}", response.status(), response.text().await?);
    }
    Ok(response)
}

pub(crate) async fn run(base: &str, args: &PoolArgs) -> anyhow::Result<()> {
    let (mut spawns, mut execs, mut writes, mut reads, mut destroys) =
        (vec![], vec![], vec![], vec![], vec![]);
    let content = "x".repeat(4096);
    for user in 0..args.users {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-user-id", format!("bench-{user}").parse()?);
        let client = crate::client_builder().default_headers(headers).build()?;
        let started = Instant::now();
        let response = client
            .post(format!("{base}/api/v1/sandboxes"))
            .json(&json!({"image": args.image}))
            .send()
            .await?;
        let sandbox: Value = ok(response, "spawn").await?.json().await?;
        spawns.push(ms(started));
        let id = sandbox["id"].as_str().context("sandbox id")?.to_owned();
        let path = format!("/workspace/bench-{user}/bench.txt");
        let files = format!("{base}/api/v1/sandboxes/{id}/files");
        for _ in 0..args.rounds {
            let started = Instant::now();
            let body: Value = client
                .post(format!("{base}/api/v1/sandboxes/{id}/exec"))
                .json(&json!({"command": "true"}))
                .send()
                .await?
                .json()
                .await?;
            if body["exit_code"] != 0 {
                bail!("exec failed: {body}");
            }
            execs.push(ms(started));
            let started = Instant::now();
            let response = client
                .post(&files)
                .json(&json!({"path": path, "content": content}))
                .send()
                .await?;
            ok(response, "write").await?;
            writes.push(ms(started));
            let started = Instant::now();
            let response = client.get(&files).query(&[("path", &path)]).send().await?;
            let read = ok(response, "read").await?.bytes().await?;
            if read.len() != content.len() {
                bail!("read {} bytes, wrote {}", read.len(), content.len());
            }
            reads.push(ms(started));
        }
        let started = Instant::now();
        let response = client
            .delete(format!("{base}/api/v1/sandboxes/{id}"))
            .send()
            .await?;
        ok(response, "destroy").await?;
        destroys.push(ms(started));
    }
    let label = &args.label;
    for (name, samples) in [
        ("spawn", &mut spawns),
        ("exec", &mut execs),
        ("write 4 KiB", &mut writes),
        ("read 4 KiB", &mut reads),
        ("destroy", &mut destroys),
    ] {
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "{label} {name}: median {:.2} ms, min {min:.2} ms ({} samples)",
            median(samples),
            samples.len()
        );
    }
    Ok(())
}
