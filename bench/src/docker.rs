//! The docker provider next to the raw Engine API, side by side in one run against the same
//! engine and image: spawn-to-first-exec, exec round trip, destroy. With `--engine-url`, two
//! servers are measured in the same rounds: `--url` on the agent path and `--engine-url` on the
//! engine path (decisions §14, Docker fast path).

use std::time::Instant;

use anyhow::{bail, Context};
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use bollard::Docker;
use futures::StreamExt;
use serde_json::{json, Value};

/// Options of the docker run.
#[derive(Debug, clap::Args)]
pub(crate) struct DockerArgs {
    /// Sandboxes (and raw containers) to create.
    #[arg(long, default_value_t = 15)]
    sandboxes: usize,
    /// Exec round trips per sandbox.
    #[arg(long, default_value_t = 10)]
    execs: usize,
    /// Image (local; nothing is pulled).
    #[arg(long, default_value = "svc-test-busybox:latest")]
    image: String,
    /// A second server, on the engine exec path, measured side by side with `--url` (which is
    /// then the agent path's).
    #[arg(long)]
    engine_url: Option<String>,
}

/// The keep-alive command svc's docker provider uses, so both sides start the same container.
const KEEPALIVE: &str = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done";

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

async fn raw_exec(docker: &Docker, container: &str) -> anyhow::Result<()> {
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions::<String> {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(vec!["/bin/sh".into(), "-c".into(), "true".into()]),
                ..Default::default()
            },
        )
        .await?;
    if let StartExecResults::Attached { mut output, .. } = docker
        .start_exec(&exec.id, Some(StartExecOptions::default()))
        .await?
    {
        while output.next().await.is_some() {}
    }
    let inspect = docker.inspect_exec(&exec.id).await?;
    if inspect.exit_code != Some(0) {
        bail!("raw exec failed: {inspect:?}");
    }
    Ok(())
}

async fn raw_spawn(docker: &Docker, image: &str, name: &str) -> anyhow::Result<()> {
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        entrypoint: Some(vec!["/bin/sh".into(), "-c".into(), KEEPALIVE.into()]),
        cmd: Some(Vec::new()),
        host_config: Some(HostConfig {
            memory: Some(512 * 1024 * 1024),
            nano_cpus: Some(1_000_000_000),
            pids_limit: Some(256),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            network_mode: Some("bridge".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = CreateContainerOptions {
        name: Some(name.to_owned()),
        ..Default::default()
    };
    docker.create_container(Some(options), body).await?;
    docker.start_container(name, None).await?;
    Ok(())
}

pub(crate) async fn svc_exec(client: &reqwest::Client, base: &str, id: &str) -> anyhow::Result<()> {
    let body: Value = client
        .post(format!("{base}/api/v1/sandboxes/{id}/exec"))
        .json(&json!({"command": "true"}))
        .send()
        .await?
        .json()
        .await?;
    if body["exit_code"] != 0 {
        bail!("svc exec failed: {body}");
    }
    Ok(())
}

pub(crate) fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn row(name: &str, svc: &mut [f64], raw: &mut [f64]) {
    let (s, r) = (median(svc), median(raw));
    let limit = (r * 0.10).max(5.0);
    println!(
        "{name}: svc median {s:.2} ms, raw {r:.2} ms, svc/raw {:.3}, added {:.2} ms (target: at most {limit:.2} ms) {}",
        s / r,
        s - r,
        if s - r <= limit { "OK" } else { "OVER" }
    );
}

/// The `q` quantile (0..1) of `samples`.
fn quantile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[index]
}

/// One server under test and its samples.
struct Side {
    name: &'static str,
    base: String,
    first: Vec<f64>,
    exec: Vec<f64>,
    destroy: Vec<f64>,
}

async fn svc_spawn(client: &reqwest::Client, base: &str, image: &str) -> anyhow::Result<String> {
    let response = client
        .post(format!("{base}/api/v1/sandboxes"))
        .json(&json!({"provider": "docker", "image": image}))
        .send()
        .await
        .context("is svc running with the docker provider?")?;
    if response.status() != 201 {
        bail!("spawn: {} {}", response.status(), response.text().await?);
    }
    let sandbox: Value = response.json().await?;
    Ok(sandbox["id"].as_str().context("no id")?.to_owned())
}

async fn svc_destroy(client: &reqwest::Client, base: &str, id: &str) -> anyhow::Result<()> {
    let response = client
        .delete(format!("{base}/api/v1/sandboxes/{id}"))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("destroy: {}", response.status());
    }
    Ok(())
}

pub(crate) async fn run(base: &str, args: &DockerArgs) -> anyhow::Result<()> {
    let docker = Docker::connect_with_defaults()?.negotiate_version().await?;
    let client = crate::client_builder().build()?;
    let side = |name, base: &str| Side {
        name,
        base: base.to_owned(),
        first: Vec::new(),
        exec: Vec::new(),
        destroy: Vec::new(),
    };
    let mut sides = match &args.engine_url {
        Some(engine) => vec![
            side("svc agent path", base),
            side("svc engine path", engine),
        ],
        None => vec![side("svc", base)],
    };
    let (mut raw_first, mut raw_exec_ms, mut raw_destroy) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.sandboxes {
        // Each server: spawn through the API, then the first exec.
        let mut ids = Vec::new();
        for side in &mut sides {
            let started = Instant::now();
            let id = svc_spawn(&client, &side.base, &args.image).await?;
            svc_exec(&client, &side.base, &id).await?;
            side.first.push(ms(started));
            ids.push(id);
        }

        // raw: the same container through the engine API directly.
        let name = format!("svc-bench-raw-{}-{round}", std::process::id());
        let started = Instant::now();
        raw_spawn(&docker, &args.image, &name).await?;
        raw_exec(&docker, &name).await?;
        raw_first.push(ms(started));

        for _ in 0..args.execs {
            for (side, id) in sides.iter_mut().zip(&ids) {
                let started = Instant::now();
                svc_exec(&client, &side.base, id).await?;
                side.exec.push(ms(started));
            }
            let started = Instant::now();
            raw_exec(&docker, &name).await?;
            raw_exec_ms.push(ms(started));
        }

        for (side, id) in sides.iter_mut().zip(&ids) {
            let started = Instant::now();
            svc_destroy(&client, &side.base, id).await?;
            side.destroy.push(ms(started));
        }
        let started = Instant::now();
        docker
            .remove_container(
                &name,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await?;
        raw_destroy.push(ms(started));
    }
    println!(
        "docker: {} sandboxes, {} exec round trips each, image {}",
        args.sandboxes, args.execs, args.image
    );
    for side in &mut sides {
        println!("{}:", side.name);
        row("  spawn to first exec", &mut side.first, &mut raw_first);
        row("  exec round trip", &mut side.exec, &mut raw_exec_ms);
        row("  destroy", &mut side.destroy, &mut raw_destroy);
        println!(
            "  exec round trip p90 {:.2} ms (raw p90 {:.2} ms)",
            quantile(&mut side.exec, 0.9),
            quantile(&mut raw_exec_ms, 0.9)
        );
    }
    if let [agent, engine] = sides.as_mut_slice() {
        let verdict = |ok: bool| if ok { "MET" } else { "MISSED" };
        let (agent_exec, raw) = (median(&mut agent.exec), median(&mut raw_exec_ms));
        println!(
            "target: agent exec p50 {agent_exec:.2} ms <= 5 ms: {}",
            verdict(agent_exec <= 5.0)
        );
        println!(
            "target: raw engine exec / agent exec = {:.1}x >= 8x: {}",
            raw / agent_exec,
            verdict(raw / agent_exec >= 8.0)
        );
        let (agent_first, engine_first) = (median(&mut agent.first), median(&mut engine.first));
        println!(
            "target: spawn to first exec, agent {agent_first:.1} ms <= engine {engine_first:.1} ms: {}",
            verdict(agent_first <= engine_first)
        );
    }
    Ok(())
}
