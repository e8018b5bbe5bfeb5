//! The docker provider next to the raw Engine API, side by side in one run against the same
//! engine and image: spawn-to-first-exec, exec round trip, destroy.

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

pub(crate) async fn run(base: &str, args: &DockerArgs) -> anyhow::Result<()> {
    let docker = Docker::connect_with_defaults()?.negotiate_version().await?;
    let client = crate::client_builder().build()?;
    let (mut svc_first, mut raw_first) = (Vec::new(), Vec::new());
    let (mut svc_exec_ms, mut raw_exec_ms) = (Vec::new(), Vec::new());
    let (mut svc_destroy, mut raw_destroy) = (Vec::new(), Vec::new());
    for round in 0..args.sandboxes {
        // svc: spawn through the API, then the first exec.
        let started = Instant::now();
        let response = client
            .post(format!("{base}/api/v1/sandboxes"))
            .json(&json!({"provider": "docker", "image": args.image}))
            .send()
            .await
            .context("is svc running with the docker provider?")?;
        if response.status() != 201 {
            bail!("spawn: {} {}", response.status(), response.text().await?);
        }
        let sandbox: Value = response.json().await?;
        let id = sandbox["id"].as_str().context("no id")?.to_owned();
        svc_exec(&client, base, &id).await?;
        svc_first.push(ms(started));

        // raw: the same container through the engine API directly.
        let name = format!("svc-bench-raw-{}-{round}", std::process::id());
        let started = Instant::now();
        raw_spawn(&docker, &args.image, &name).await?;
        raw_exec(&docker, &name).await?;
        raw_first.push(ms(started));

        for _ in 0..args.execs {
            let started = Instant::now();
            svc_exec(&client, base, &id).await?;
            svc_exec_ms.push(ms(started));
            let started = Instant::now();
            raw_exec(&docker, &name).await?;
            raw_exec_ms.push(ms(started));
        }

        let started = Instant::now();
        let response = client
            .delete(format!("{base}/api/v1/sandboxes/{id}"))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("destroy: {}", response.status());
        }
        svc_destroy.push(ms(started));
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
    row("spawn to first exec", &mut svc_first, &mut raw_first);
    row("exec round trip", &mut svc_exec_ms, &mut raw_exec_ms);
    row("destroy", &mut svc_destroy, &mut raw_destroy);
    Ok(())
}
