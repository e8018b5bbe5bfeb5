//! Template builds (decisions §17) next to the same build straight through the Engine API,
//! side by side in one run: each round builds one small context both ways (in alternating
//! order, each with a fresh nonce so neither hits the build cache), svc's from the request to
//! the log's result line, the engine's from the request to the end of its progress stream.

use std::time::Instant;

use anyhow::{bail, Context};
use bollard::query_parameters::{BuildImageOptions, RemoveImageOptions};
use bollard::Docker;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::docker::median;

/// Options of the build run.
#[derive(Debug, clap::Args)]
pub(crate) struct BuildArgs {
    /// Builds per side.
    #[arg(long, default_value_t = 8)]
    rounds: usize,
    /// Base image (local; nothing is pulled).
    #[arg(long, default_value = "svc-test-busybox:latest")]
    image: String,
}

/// The context of round `nonce`: a Dockerfile with a few steps and a file to copy.
fn context(image: &str, nonce: &str) -> anyhow::Result<Vec<u8>> {
    let dockerfile = format!(
        "FROM {image}\nENV BENCH_NONCE={nonce}\nWORKDIR /app\nCOPY data.txt /app/data.txt\n\
         RUN for i in $(seq 1 2000); do echo line $i; done > /app/lines.txt && wc -l /app/lines.txt\n"
    );
    let data = "x".repeat(64 << 10);
    let mut tar = tar::Builder::new(Vec::new());
    for (name, content) in [
        ("Dockerfile", dockerfile.as_bytes()),
        ("data.txt", data.as_bytes()),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        tar.append_data(&mut header, name, content)?;
    }
    Ok(tar.into_inner()?)
}

fn nonce() -> String {
    svc_core::BuildId::generate().as_str()[3..].to_owned()
}

/// One build straight through the engine; milliseconds.
async fn direct(docker: &Docker, tag: &str, tar: Vec<u8>) -> anyhow::Result<f64> {
    let started = Instant::now();
    let options = BuildImageOptions {
        dockerfile: "Dockerfile".to_owned(),
        t: Some(tag.to_owned()),
        rm: true,
        forcerm: true,
        ..Default::default()
    };
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(tar.into())));
    while let Some(message) = stream.next().await {
        message.context("the engine's build")?;
    }
    Ok(started.elapsed().as_secs_f64() * 1000.0)
}

/// One build through svc: request to result line; milliseconds and the image.
async fn through_svc(
    client: &reqwest::Client,
    url: &str,
    template: &str,
    tar: Vec<u8>,
) -> anyhow::Result<(f64, String)> {
    let started = Instant::now();
    let accepted: Value = client
        .post(format!("{url}/api/v1/templates/{template}/build"))
        .header("content-type", "application/x-tar")
        .body(tar)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let build = accepted["build_id"].as_str().context("no build_id")?;
    let mut log = client
        .get(format!(
            "{url}/api/v1/templates/{template}/builds/{build}/logs"
        ))
        .send()
        .await?
        .error_for_status()?
        .bytes_stream();
    let mut pending = Vec::new();
    while let Some(chunk) = log.next().await {
        pending.extend_from_slice(&chunk?);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line: Value = serde_json::from_slice(&line)?;
            if line["type"] == "result" {
                let elapsed = started.elapsed().as_secs_f64() * 1000.0;
                if line["status"] != "succeeded" {
                    bail!("the build through svc failed: {line}");
                }
                let image = line["image"].as_str().unwrap_or_default().to_owned();
                return Ok((elapsed, image));
            }
        }
    }
    bail!("the build log ended without a result")
}

pub(crate) async fn run(url: &str, args: &BuildArgs) -> anyhow::Result<()> {
    let docker = Docker::connect_with_defaults()?.negotiate_version().await?;
    let client = crate::client_builder().build()?;
    let template = format!("bench-build-{}", nonce());
    client
        .post(format!("{url}/api/v1/templates"))
        .json(&json!({"name": template, "provider": "docker", "image": args.image}))
        .send()
        .await?
        .error_for_status()?;
    let (mut svc_ms, mut direct_ms) = (Vec::new(), Vec::new());
    let mut direct_tags = Vec::new();
    for round in 0..args.rounds {
        let (svc_tar, direct_tar) = (
            context(&args.image, &nonce())?,
            context(&args.image, &nonce())?,
        );
        let tag = format!("svc-bench-direct:{}", nonce());
        // Alternate which side goes first, so neither always builds on a warmer engine.
        if round % 2 == 0 {
            direct_ms.push(direct(&docker, &tag, direct_tar).await?);
            svc_ms.push(through_svc(&client, url, &template, svc_tar).await?.0);
        } else {
            svc_ms.push(through_svc(&client, url, &template, svc_tar).await?.0);
            direct_ms.push(direct(&docker, &tag, direct_tar).await?);
        }
        direct_tags.push(tag);
    }
    // svc's own images go with the template (collected once unused); the direct ones here.
    client
        .delete(format!("{url}/api/v1/templates/{template}"))
        .send()
        .await?
        .error_for_status()?;
    for tag in direct_tags {
        let _ = docker
            .remove_image(
                &tag,
                Some(RemoveImageOptions {
                    force: true,
                    ..Default::default()
                }),
                None,
            )
            .await;
    }
    let svc = median(&mut svc_ms);
    let engine = median(&mut direct_ms);
    println!(
        "template build ({} rounds): svc median {svc:.0} ms, engine API median {engine:.0} ms, ratio {:.3} (target <= 1.10)",
        args.rounds,
        svc / engine
    );
    println!("  svc samples ms: {svc_ms:.0?}");
    println!("  engine samples ms: {direct_ms:.0?}");
    Ok(())
}
