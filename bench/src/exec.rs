//! Exec and file benchmarks, each next to the same work done directly on the host.

use std::time::Instant;

use anyhow::{bail, Context};
use base64::Engine;
use futures::StreamExt;
use serde_json::{json, Value};

/// Options of the latency run.
#[derive(Debug, clap::Args)]
pub(crate) struct LatencyArgs {
    /// Round trips per form.
    #[arg(long, default_value_t = 500)]
    iterations: usize,
}

/// Options of the streaming run.
#[derive(Debug, clap::Args)]
pub(crate) struct ThroughputArgs {
    /// Bytes of input to `base64` (the output is 4/3 of it, plus newlines).
    #[arg(long, default_value_t = 1 << 30)]
    bytes: u64,
    /// The server's process ID, to sample its resident memory while streaming.
    #[arg(long)]
    server_pid: Option<u32>,
}

/// Options of the file run.
#[derive(Debug, clap::Args)]
pub(crate) struct FilesArgs {
    /// File size in MiB.
    #[arg(long, default_value_t = 32)]
    mib: usize,
    /// Writes and reads each.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

async fn spawn_sandbox(client: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let response = client
        .post(format!("{base}/api/v1/sandboxes"))
        .json(&json!({"provider": "mock", "ttl": "1h"}))
        .send()
        .await
        .context("spawning a sandbox; is svc running?")?;
    if response.status() != 201 {
        bail!("spawn: {}", response.status());
    }
    let body: Value = response.json().await?;
    Ok(body["id"].as_str().context("no id")?.to_owned())
}

async fn destroy_sandbox(client: &reqwest::Client, base: &str, id: &str) {
    let _ = client
        .delete(format!("{base}/api/v1/sandboxes/{id}"))
        .send()
        .await;
}

fn micros(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn report(name: &str, samples: &mut [u64]) -> f64 {
    samples.sort_unstable();
    let p50 = crate::percentile_ms(samples, 50.0);
    println!(
        "{name}: n={} p50 {p50:.3} ms p99 {:.3} ms",
        samples.len(),
        crate::percentile_ms(samples, 99.0)
    );
    p50
}

pub(crate) async fn latency(base: &str, args: &LatencyArgs) -> anyhow::Result<()> {
    let client = crate::client_builder().build()?;
    let id = spawn_sandbox(&client, base).await?;
    let url = format!("{base}/api/v1/sandboxes/{id}/exec");
    let mut buffered = Vec::with_capacity(args.iterations);
    let mut streamed = Vec::with_capacity(args.iterations);
    let mut host = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let started = Instant::now();
        let response = client
            .post(&url)
            .json(&json!({"command": "true"}))
            .send()
            .await?;
        let body: Value = response.json().await?;
        if body["exit_code"] != 0 {
            bail!("exec failed: {body}");
        }
        buffered.push(micros(started));

        let started = Instant::now();
        let response = client
            .post(&url)
            .json(&json!({"command": "true", "stream": true}))
            .send()
            .await?;
        let text = response.text().await?;
        if !text.contains("\"exit\"") {
            bail!("stream ended without exit line: {text}");
        }
        streamed.push(micros(started));

        // The host baseline: the same program started the same way, without svc.
        let started = Instant::now();
        let status = tokio::process::Command::new("/bin/sh")
            .args(["-c", "true"])
            .status()
            .await?;
        if !status.success() {
            bail!("host baseline failed");
        }
        host.push(micros(started));
    }
    destroy_sandbox(&client, base, &id).await;
    let host_p50 = report("host: sh -c true", &mut host);
    let buffered_p50 = report("svc buffered exec", &mut buffered);
    let streamed_p50 = report("svc streamed exec", &mut streamed);
    println!(
        "API overhead at p50: buffered {:.3} ms, streamed {:.3} ms (ratio to host {:.2}x, {:.2}x)",
        buffered_p50 - host_p50,
        streamed_p50 - host_p50,
        buffered_p50 / host_p50,
        streamed_p50 / host_p50
    );
    Ok(())
}

/// The resident set of process `pid`, in KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

pub(crate) async fn throughput(base: &str, args: &ThroughputArgs) -> anyhow::Result<()> {
    let command = format!("head -c {} /dev/zero | base64", args.bytes);

    let started = Instant::now();
    let mut child = tokio::process::Command::new("/bin/sh")
        .args(["-c", &command])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().context("stdout")?;
    let mut host_bytes = 0u64;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::io::AsyncReadExt::read(&mut stdout, &mut buffer).await?;
        if n == 0 {
            break;
        }
        host_bytes += n as u64;
    }
    child.wait().await?;
    let host_secs = started.elapsed().as_secs_f64();
    let host_rate = host_bytes as f64 / host_secs / 1e6;
    println!("host: {host_bytes} bytes in {host_secs:.2}s = {host_rate:.0} MB/s");

    let client = crate::client_builder().build()?;
    let id = spawn_sandbox(&client, base).await?;
    let rss_before = args.server_pid.and_then(rss_kib);
    let started = Instant::now();
    let response = client
        .post(format!("{base}/api/v1/sandboxes/{id}/exec"))
        .json(&json!({"command": command, "stream": true, "timeout": "10m"}))
        .send()
        .await?;
    let mut stream = response.bytes_stream();
    let mut carry = Vec::new();
    let mut data_bytes = 0u64;
    let mut wire_bytes = 0u64;
    let mut rss_max = rss_before.unwrap_or(0);
    let mut exit = None;
    let mut chunks = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        wire_bytes += chunk.len() as u64;
        carry.extend_from_slice(&chunk);
        while let Some(end) = carry.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = carry.drain(..=end).collect();
            let value: Value = serde_json::from_slice(&line)?;
            if value["stream"] == "exit" {
                exit = Some(value["exit_code"].clone());
            } else if let Some(data) = value["data"].as_str() {
                data_bytes += data.len() as u64;
            }
        }
        chunks += 1;
        if chunks.is_multiple_of(256) {
            if let Some(rss) = args.server_pid.and_then(rss_kib) {
                rss_max = rss_max.max(rss);
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    destroy_sandbox(&client, base, &id).await;
    let rate = data_bytes as f64 / secs / 1e6;
    println!(
        "svc NDJSON: {data_bytes} output bytes ({wire_bytes} on the wire) in {secs:.2}s = {rate:.0} MB/s, exit {exit:?}; ratio to host {:.2}",
        rate / host_rate
    );
    if data_bytes != host_bytes {
        bail!("svc delivered {data_bytes} bytes, the host {host_bytes}");
    }
    if let Some(before) = rss_before {
        println!(
            "server RSS: {} MiB before, {} MiB at most while streaming",
            before / 1024,
            rss_max / 1024
        );
    }
    Ok(())
}

pub(crate) async fn files(base: &str, args: &FilesArgs) -> anyhow::Result<()> {
    let size = args.mib << 20;
    let content: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let encoded = base64::engine::general_purpose::STANDARD.encode(&content);
    let body = serde_json::to_vec(
        &json!({"path": "/bench.bin", "content": encoded, "encoding": "base64"}),
    )?;
    let client = crate::client_builder().build()?;
    let id = spawn_sandbox(&client, base).await?;
    let files = format!("{base}/api/v1/sandboxes/{id}/files");
    let dir = std::env::temp_dir().join(format!("svc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let host_path = dir.join("bench.bin");
    let (mut write, mut read, mut host_write, mut host_read) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let started = Instant::now();
        let response = client
            .post(&files)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("write: {}", response.status());
        }
        write.push(started.elapsed().as_secs_f64());

        let started = Instant::now();
        let bytes = client
            .get(format!("{files}?path=/bench.bin"))
            .send()
            .await?
            .bytes()
            .await?;
        if bytes.len() != size {
            bail!("read {} bytes, wrote {size}", bytes.len());
        }
        read.push(started.elapsed().as_secs_f64());

        let started = Instant::now();
        tokio::fs::write(&host_path, &content).await?;
        host_write.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let back = tokio::fs::read(&host_path).await?;
        if back.len() != size {
            bail!("host read mismatch");
        }
        host_read.push(started.elapsed().as_secs_f64());
    }
    destroy_sandbox(&client, base, &id).await;
    let _ = std::fs::remove_dir_all(&dir);
    let median = |samples: &mut Vec<f64>| {
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    };
    let mb = size as f64 / 1e6;
    let (w, r, hw, hr) = (
        median(&mut write),
        median(&mut read),
        median(&mut host_write),
        median(&mut host_read),
    );
    println!(
        "file of {} MiB, median of {} rounds:",
        args.mib, args.rounds
    );
    println!(
        "  write: svc {:.0} MB/s, host {:.0} MB/s, ratio {:.2}",
        mb / w,
        mb / hw,
        hw / w
    );
    println!(
        "  read:  svc {:.0} MB/s, host {:.0} MB/s, ratio {:.2}",
        mb / r,
        mb / hr,
        hr / r
    );
    Ok(())
}
