//! The microVM issue's benchmark, side by side in one run on the same image content: for each
//! provider named, spawn (for `qemu`, boot to agent ready), exec round trip of `true`, and file
//! write and read throughput, through svc's API.

use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::docker::{median, svc_exec};

/// Options of the microVM run.
#[derive(Debug, clap::Args)]
pub(crate) struct MicrovmArgs {
    /// Providers to compare, each with its image: `qemu=IMAGE`.
    #[arg(long = "provider", required = true)]
    providers: Vec<String>,
    /// Sandboxes per provider.
    #[arg(long, default_value_t = 5)]
    sandboxes: usize,
    /// Exec round trips per sandbox.
    #[arg(long, default_value_t = 20)]
    execs: usize,
    /// File size for the throughput rows, in MiB.
    #[arg(long, default_value_t = 16)]
    file_mib: usize,
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

pub(crate) async fn run(base: &str, args: &MicrovmArgs) -> anyhow::Result<()> {
    use base64::Engine as _;
    let client = crate::client_builder().build()?;
    let size = args.file_mib * 1024 * 1024;
    let content: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let body = serde_json::to_vec(&json!({
        "path": "/root/bench.bin",
        "content": base64::engine::general_purpose::STANDARD.encode(&content),
        "encoding": "base64",
    }))?;
    for entry in &args.providers {
        let (provider, image) = entry
            .split_once('=')
            .context("--provider takes NAME=IMAGE")?;
        let (mut spawns, mut execs, mut writes, mut reads) = (vec![], vec![], vec![], vec![]);
        for _ in 0..args.sandboxes {
            let started = Instant::now();
            let response = client
                .post(format!("{base}/api/v1/sandboxes"))
                .json(&json!({"provider": provider, "image": image}))
                .send()
                .await?;
            if !response.status().is_success() {
                bail!(
                    "spawn on {provider}: {} {}",
                    response.status(),
                    response.text().await?
                );
            }
            spawns.push(ms(started));
            let sandbox: Value = response.json().await?;
            let id = sandbox["id"].as_str().context("sandbox id")?.to_owned();
            for _ in 0..args.execs {
                let started = Instant::now();
                svc_exec(&client, base, &id).await?;
                execs.push(ms(started));
            }
            let files = format!("{base}/api/v1/sandboxes/{id}/files");
            let started = Instant::now();
            let written = client
                .post(&files)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await?;
            if !written.status().is_success() {
                bail!(
                    "write on {provider}: {} {}",
                    written.status(),
                    written.text().await?
                );
            }
            writes.push(ms(started));
            let started = Instant::now();
            let read = client
                .get(format!("{files}?path=/root/bench.bin"))
                .send()
                .await?
                .bytes()
                .await?;
            reads.push(ms(started));
            if read.len() != size {
                bail!("read back {} of {size} bytes on {provider}", read.len());
            }
            client
                .delete(format!("{base}/api/v1/sandboxes/{id}"))
                .send()
                .await?;
        }
        let mib = args.file_mib as f64;
        println!(
            "{provider}: spawn p50 {:.0} ms (max {:.0}), exec true p50 {:.2} ms, file write {:.1} MiB/s, read {:.1} MiB/s ({} sandboxes, {} execs each, {} MiB)",
            median(&mut spawns),
            spawns.iter().copied().fold(0.0, f64::max),
            median(&mut execs),
            mib / (median(&mut writes) / 1000.0),
            mib / (median(&mut reads) / 1000.0),
            args.sandboxes,
            args.execs,
            args.file_mib
        );
    }
    Ok(())
}
