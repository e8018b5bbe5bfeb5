//! Template builds and pull progress (decisions §17) on the real engine, from the local test
//! image (no registry is reachable here; pulls come from the test's own, `registry.rs`):
//! success, a failing step, refused contexts, cancel, two at once, a restart, collection of
//! unused images, and a spawn that pulls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::docker::{engine, IMAGE};
use crate::harness::{wait_for, TestServer};

/// A fresh value, so no step of a test's Dockerfile comes from the engine's build cache.
pub(crate) fn nonce() -> String {
    svc_core::BuildId::generate().as_str()[3..].to_owned()
}

/// A server with docker enabled (builds use the engine whatever the provider).
pub(crate) async fn build_server() -> Option<(TestServer, Docker)> {
    let docker = engine().await?;
    let server = TestServer::start_with(|c| {
        c.providers.docker.enabled = true;
        c.providers.docker.agent = svc_core::config::DockerAgentMode::Never;
    })
    .await;
    Some((server, docker))
}

async fn template(server: &TestServer, name: &str) {
    let created = server
        .post(
            "/templates",
            json!({"name": name, "provider": "docker", "image": IMAGE}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
}

/// Starts a build from a JSON body; its ID.
async fn start(server: &TestServer, name: &str, dockerfile: &str, files: Value) -> String {
    let accepted = server
        .post(
            &format!("/templates/{name}/build"),
            json!({"dockerfile": dockerfile, "files": files}),
        )
        .await;
    assert_eq!(accepted.status, 202, "{}", accepted.body);
    assert_eq!(accepted.body["status"], "running");
    let id = accepted.body["build_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("bd-") && id.len() == 19, "{id}");
    id
}

/// One log line and when it arrived.
pub(crate) struct Line {
    pub(crate) value: Value,
    pub(crate) at: Instant,
}

/// Follows a build's log to its end (or `within`).
pub(crate) async fn follow(
    server: &TestServer,
    name: &str,
    build: &str,
    within: Duration,
) -> Vec<Line> {
    let mut reader = LogLines::open(server, name, build).await;
    let deadline = tokio::time::Instant::now() + within;
    let mut lines = Vec::new();
    while let Some(line) = reader.next(deadline).await {
        lines.push(line);
    }
    lines
}

/// A build's followed log, a line at a time.
pub(crate) struct LogLines {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    pending: Vec<u8>,
}

impl LogLines {
    pub(crate) async fn open(server: &TestServer, name: &str, build: &str) -> LogLines {
        let response = server
            .client
            .get(server.url(&format!("/templates/{name}/builds/{build}/logs")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "application/x-ndjson",
            "NDJSON"
        );
        LogLines {
            body: Box::pin(response.bytes_stream()),
            pending: Vec::new(),
        }
    }

    /// The next line, or `None` at the log's end or at `deadline`.
    pub(crate) async fn next(&mut self, deadline: tokio::time::Instant) -> Option<Line> {
        loop {
            if let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Some(Line {
                    value: serde_json::from_slice(&line).unwrap(),
                    at: Instant::now(),
                });
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(Some(chunk)) => self.pending.extend_from_slice(&chunk.unwrap()),
                _ => return None,
            }
        }
    }
}

pub(crate) fn result_of(lines: &[Line]) -> &Value {
    let last = &lines.last().expect("some lines").value;
    assert_eq!(
        last["type"], "result",
        "the last line is the result: {last}"
    );
    last
}

fn output_of(lines: &[Line]) -> String {
    lines
        .iter()
        .filter(|l| l.value["type"] == "output")
        .map(|l| l.value["data"].as_str().unwrap().to_owned())
        .collect()
}

async fn build_record(server: &TestServer, name: &str, build: &str) -> Value {
    let got = server
        .get(&format!("/templates/{name}/builds/{build}"))
        .await;
    assert_eq!(got.status, 200, "{}", got.body);
    got.body
}

/// Removes what a test built (the server removes unused images on its own only once a minute).
pub(crate) async fn remove_built(docker: &Docker, name: &str) {
    let images = docker
        .list_images(None::<bollard::query_parameters::ListImagesOptions>)
        .await
        .unwrap_or_default();
    for tag in images.into_iter().flat_map(|i| i.repo_tags) {
        if tag.starts_with(&format!("svc-templates/{name}:")) {
            let _ = docker
                .remove_image(
                    &tag,
                    Some(bollard::query_parameters::RemoveImageOptions {
                        force: true,
                        ..Default::default()
                    }),
                    None,
                )
                .await;
        }
    }
}

pub(crate) async fn finish(server: TestServer, docker: &Docker, names: &[&str]) {
    for id in server.listed_ids("?state=all").await {
        let _ = docker
            .remove_container(
                &format!("svc-{id}"),
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
    }
    server.shutdown().await;
    for name in names {
        remove_built(docker, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_makes_the_template_image_and_its_sandboxes_see_all_of_it() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    template(&server, "Web.App").await;
    let mut events = server
        .events(
            "?types=template.build_started,template.build_succeeded",
            None,
        )
        .await;
    let dockerfile = format!(
        "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nENV GREETING=hello-from-env\nWORKDIR /app\nCOPY greet.txt /app/greet.txt\n\
         RUN sleep 1 && echo built > /app/built.txt && echo marker-from-run\n"
    , nonce());
    let build = start(
        &server,
        "Web.App",
        &dockerfile,
        json!({"greet.txt": "hi from the context\n"}),
    )
    .await;
    let lines = follow(&server, "Web.App", &build, Duration::from_secs(120)).await;
    let result = result_of(&lines);
    assert_eq!(result["status"], "succeeded", "{result}");
    let image = format!("svc-templates/web.app:{build}");
    assert_eq!(result["image"], image.as_str(), "the name lowercased");
    let steps: Vec<(u64, String)> = lines
        .iter()
        .filter(|l| l.value["type"] == "step")
        .map(|l| {
            (
                l.value["step"].as_u64().unwrap(),
                l.value["instruction"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(steps.len(), 6, "{steps:?}");
    assert_eq!(steps[0], (1, format!("FROM {IMAGE}")));
    assert!(steps[5].1.starts_with("RUN sleep 1"), "{steps:?}");
    assert!(output_of(&lines).contains("marker-from-run"));
    // Progress arrives while the build runs, not all at its end.
    let first = lines.first().unwrap().at;
    let last = lines.last().unwrap().at;
    assert!(
        last.duration_since(first) >= Duration::from_millis(500),
        "the lines arrived over {:?}, as the build went",
        last.duration_since(first)
    );

    let record = build_record(&server, "Web.App", &build).await;
    assert_eq!(record["status"], "succeeded");
    assert_eq!(record["image"], image.as_str());
    assert_eq!(record["template"], "Web.App");
    assert!(record["ended_at"].is_string());
    assert!(record["error"].is_null());
    let listed = server.get("/templates/Web.App/builds").await;
    assert_eq!(listed.body[0]["build_id"], build.as_str());
    assert_eq!(
        server.get("/templates/Web.App").await.body["image"],
        image.as_str(),
        "the template points at the build"
    );
    let started = events.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(started.data["type"], "template.build_started");
    assert_eq!(started.data["data"]["template"], "Web.App");
    assert_eq!(started.data["data"]["build_id"], build.as_str());
    let succeeded = events.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(succeeded.data["type"], "template.build_succeeded");
    assert_eq!(succeeded.data["data"]["image"], image.as_str());

    // A sandbox of the template sees the COPY, the RUN, the ENV and the WORKDIR.
    let spawned = server.post("/templates/Web.App/spawn", json!({})).await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    assert_eq!(spawned.body["image"], image.as_str());
    let id = spawned.body["id"].as_str().unwrap();
    let ran = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "cat greet.txt built.txt; echo $GREETING; pwd"}),
        )
        .await;
    assert_eq!(ran.body["exit_code"], 0, "{}", ran.body);
    assert_eq!(
        ran.body["stdout"],
        "hi from the context\nbuilt\nhello-from-env\n/app\n"
    );
    finish(server, &docker, &["web.app"]).await;
}

/// A tar context whose Dockerfile has a failing step.
fn failing_context() -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    let dockerfile = format!(
        "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN echo boom-output && exit 3\nRUN echo never\n",
        nonce()
    );
    let mut header = tar::Header::new_gnu();
    header.set_size(dockerfile.len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, "Dockerfile", dockerfile.as_bytes())
        .unwrap();
    tar.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_is_reported_with_its_output_and_the_template_stays() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    template(&server, "broken").await;
    let mut events = server.events("?types=template.build_failed", None).await;
    let accepted = server
        .client
        .post(server.url("/templates/broken/build"))
        .header("content-type", "application/x-tar")
        .body(failing_context())
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let build = accepted.json::<Value>().await.unwrap()["build_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let lines = follow(&server, "broken", &build, Duration::from_secs(120)).await;
    let result = result_of(&lines);
    assert_eq!(result["status"], "failed", "{result}");
    assert!(output_of(&lines).contains("boom-output"));
    let record = build_record(&server, "broken", &build).await;
    assert_eq!(record["status"], "failed");
    assert!(record["image"].is_null());
    let error = record["error"].as_str().unwrap();
    assert!(
        error.contains("step 3 (RUN echo boom-output && exit 3)"),
        "{error}"
    );
    assert!(error.contains("non-zero code: 3"), "{error}");
    assert!(error.contains("boom-output"), "the step's output: {error}");
    assert_eq!(result["error"], error);
    assert_eq!(
        server.get("/templates/broken").await.body["image"],
        IMAGE,
        "a failed build leaves the template as it was"
    );
    let failed = events.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(failed.data["data"]["build_id"], build.as_str());
    assert_eq!(failed.data["data"]["error"], error);
    // Past logs read without follow end at once.
    let past = server
        .client
        .get(server.url(&format!(
            "/templates/broken/builds/{build}/logs?follow=false"
        )))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let last: Value = serde_json::from_str(past.lines().last().unwrap()).unwrap();
    assert_eq!(&last, result, "the stored log ends with the result");
    finish(server, &docker, &["broken"]).await;
}

/// A tar with one raw entry named exactly `name` (builders refuse `..` and absolute names).
fn raw_tar(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, kind, link) in entries {
        let content = if *kind == tar::EntryType::Regular {
            b"FROM scratch\n".as_slice()
        } else {
            b"".as_slice()
        };
        let mut header = tar::Header::new_old();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        header.set_entry_type(*kind);
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(content);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contexts_leaving_themselves_are_refused_and_record_nothing() {
    // No engine needed: refusals come before anything is built.
    let server = TestServer::start().await;
    let created = server.post("/templates", json!({"name": "ctx"})).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let regular = tar::EntryType::Regular;
    let symlink = tar::EntryType::Symlink;
    for (entries, named) in [
        (
            vec![("Dockerfile", regular, ""), ("../evil", regular, "")],
            "../evil",
        ),
        (
            vec![("Dockerfile", regular, ""), ("/etc/evil", regular, "")],
            "/etc/evil",
        ),
        (
            vec![("Dockerfile", regular, ""), ("a/../../evil", regular, "")],
            "a/../../evil",
        ),
        (
            vec![
                ("Dockerfile", regular, ""),
                ("passwd", symlink, "/etc/passwd"),
            ],
            "passwd",
        ),
        (
            vec![("Dockerfile", regular, ""), ("up", symlink, "../../x")],
            "up",
        ),
        (vec![("README", regular, "")], "Dockerfile"),
    ] {
        let refused = server
            .client
            .post(server.url("/templates/ctx/build"))
            .header("content-type", "application/x-tar")
            .body(raw_tar(&entries))
            .send()
            .await
            .unwrap();
        let status = refused.status();
        let body: Value = refused.json().await.unwrap();
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["code"], "bad_request");
        assert!(
            body["message"].as_str().unwrap().contains(named),
            "names {named}: {body}"
        );
    }
    for (files, named) in [
        (json!({"../x": "x"}), "files.../x"),
        (json!({"/abs": "x"}), "files./abs"),
    ] {
        let message = server
            .post(
                "/templates/ctx/build",
                json!({"dockerfile": "FROM scratch", "files": files}),
            )
            .await
            .assert_error(400, "bad_request");
        assert!(message.contains(named), "names {named}: {message}");
    }
    server
        .post("/templates/ctx/build", json!({"files": {}}))
        .await
        .assert_error(400, "bad_request");
    server
        .post(
            "/templates/ctx/build",
            json!({"dockerfile": "FROM scratch", "encoding": "latin1"}),
        )
        .await
        .assert_error(400, "bad_request");
    assert_eq!(
        server.get("/templates/ctx/builds").await.body,
        json!([]),
        "no build was recorded"
    );
    server
        .post(
            "/templates/nope/build",
            json!({"dockerfile": "FROM scratch"}),
        )
        .await
        .assert_error(404, "not_found");
    server
        .get("/templates/ctx/builds/bd-0123456789abcdef")
        .await
        .assert_error(404, "not_found");
    server
        .get("/templates/ctx/builds/not-a-build")
        .await
        .assert_error(404, "not_found");
    server
        .delete("/templates/ctx/builds/bd-0123456789abcdef")
        .await
        .assert_error(404, "not_found");
    server.shutdown().await;
}

/// Whether a container runs `marker` (a build step's intermediate container).
async fn step_container_runs(docker: &Docker, marker: &str) -> bool {
    docker
        .list_containers(None::<bollard::query_parameters::ListContainersOptions>)
        .await
        .unwrap_or_default()
        .iter()
        .any(|c| c.command.as_deref().is_some_and(|cmd| cmd.contains(marker)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_is_cancelled_mid_step_and_the_template_stays() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    template(&server, "slow").await;
    let marker = "sleep 31";
    let build = start(
        &server,
        "slow",
        &format!(
            "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN {marker}\n",
            nonce()
        ),
        json!({}),
    )
    .await;
    wait_for("the slow step to run", Duration::from_secs(60), || async {
        step_container_runs(&docker, marker).await
    })
    .await;
    let mut events = server.events("?types=template.build_failed", None).await;
    let cancelled = server
        .delete(&format!("/templates/slow/builds/{build}"))
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["status"], "cancelled");
    server
        .delete(&format!("/templates/slow/builds/{build}"))
        .await
        .assert_error(409, "conflict");
    let failed = events.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(failed.data["data"]["error"], "cancelled");
    let lines = follow(&server, "slow", &build, Duration::from_secs(20)).await;
    let result = result_of(&lines);
    assert_eq!(result["status"], "cancelled");
    wait_for(
        "the engine to stop the step",
        Duration::from_secs(30),
        || async { !step_container_runs(&docker, marker).await },
    )
    .await;
    assert_eq!(
        build_record(&server, "slow", &build).await["status"],
        "cancelled"
    );
    assert_eq!(server.get("/templates/slow").await.body["image"], IMAGE);
    finish(server, &docker, &["slow"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_templates_build_at_once() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    template(&server, "one").await;
    template(&server, "two").await;
    // Each slow step is seen running on the engine while the other runs too: the engine's own
    // state, not arrival times. The steps are long so that a busy engine still overlaps them.
    let dockerfile = |marker: &str| {
        format!(
            "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN sleep 20 && echo {marker}\n",
            nonce()
        )
    };
    let first = start(
        &server,
        "one",
        &dockerfile("svc-test-one-at-once"),
        json!({}),
    )
    .await;
    let second = start(
        &server,
        "two",
        &dockerfile("svc-test-two-at-once"),
        json!({}),
    )
    .await;
    wait_for(
        "both builds' slow steps to run at once",
        Duration::from_secs(120),
        || async {
            step_container_runs(&docker, "svc-test-one-at-once").await
                && step_container_runs(&docker, "svc-test-two-at-once").await
        },
    )
    .await;
    let (a, b) = tokio::join!(
        follow(&server, "one", &first, Duration::from_secs(120)),
        follow(&server, "two", &second, Duration::from_secs(120)),
    );
    assert_eq!(result_of(&a)["status"], "succeeded", "{}", result_of(&a));
    assert_eq!(result_of(&b)["status"], "succeeded", "{}", result_of(&b));
    finish(server, &docker, &["one", "two"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_build_leaves_it_failed_not_stuck() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    template(&server, "restarted").await;
    let marker = "sleep 32";
    let build = start(
        &server,
        "restarted",
        &format!(
            "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN {marker}\n",
            nonce()
        ),
        json!({}),
    )
    .await;
    wait_for("the slow step to run", Duration::from_secs(60), || async {
        step_container_runs(&docker, marker).await
    })
    .await;
    let server = server.restart().await;
    let record = build_record(&server, "restarted", &build).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert!(
        record["error"].as_str().unwrap().contains("restarted"),
        "{record}"
    );
    let lines = follow(&server, "restarted", &build, Duration::from_secs(10)).await;
    assert_eq!(result_of(&lines)["status"], "failed");
    assert_eq!(
        server.get("/templates/restarted").await.body["image"],
        IMAGE
    );
    wait_for(
        "the engine to stop the step",
        Duration::from_secs(30),
        || async { !step_container_runs(&docker, marker).await },
    )
    .await;
    finish(server, &docker, &["restarted"]).await;
}

async fn image_exists(docker: &Docker, image: &str) -> bool {
    docker.inspect_image(image).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_image_stays_while_a_sandbox_uses_it_and_goes_after() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    template(&server, "layers").await;
    let first = start(
        &server,
        "layers",
        &format!(
            "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN echo one > /v\n",
            nonce()
        ),
        json!({}),
    )
    .await;
    let lines = follow(&server, "layers", &first, Duration::from_secs(120)).await;
    let v1 = result_of(&lines)["image"].as_str().unwrap().to_owned();
    let parent_of = |image: String| {
        let docker = docker.clone();
        async move {
            // The history lists the image, then the steps under it; a step the classic
            // builder made locally has an image ID (others show `<missing>`).
            let history = docker.image_history(&image).await.unwrap();
            let parent = history.get(1).map(|step| step.id.clone());
            parent
                .filter(|id| id.starts_with("sha256:"))
                .expect("the step before")
        }
    };
    let parent1 = parent_of(v1.clone()).await;
    let spawned = server.post("/templates/layers/spawn", json!({})).await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    let sandbox = spawned.body["id"].as_str().unwrap().to_owned();

    let second = start(
        &server,
        "layers",
        &format!(
            "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN echo two > /v\n",
            nonce()
        ),
        json!({}),
    )
    .await;
    let lines = follow(&server, "layers", &second, Duration::from_secs(120)).await;
    let v2 = result_of(&lines)["image"].as_str().unwrap().to_owned();
    assert_eq!(
        server.get("/templates/layers").await.body["image"],
        v2.as_str()
    );
    // The collection after the build ran; the sandbox keeps the first image alive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(image_exists(&docker, &v1).await, "{v1} is still used");
    let ran = server
        .post(
            &format!("/sandboxes/{sandbox}/exec"),
            json!({"command": "cat /v"}),
        )
        .await;
    assert_eq!(ran.body["stdout"], "one\n");

    assert_eq!(
        server.delete(&format!("/sandboxes/{sandbox}")).await.status,
        200
    );
    wait_for(
        "the unused image to go",
        Duration::from_secs(20),
        || async { !image_exists(&docker, &v1).await },
    )
    .await;
    assert!(
        image_exists(&docker, &v2).await,
        "the template's image stays"
    );
    let parent = parent_of(v2.clone()).await;
    assert_eq!(server.delete("/templates/layers").await.status, 200);
    wait_for(
        "the deleted template's image to go",
        Duration::from_secs(20),
        || async { !image_exists(&docker, &v2).await },
    )
    .await;
    // The build cache under both stays: a build running at that moment may be using it.
    for parent in [parent1, parent] {
        assert!(
            image_exists(&docker, &parent).await,
            "removing an image removed the cached step {parent} under it"
        );
        let _ = docker
            .remove_image(
                &parent,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
    }
    finish(server, &docker, &["layers"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_that_pulls_shows_how_far_the_pull_is() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    let registry = crate::registry::serve(6 << 20, Duration::from_millis(60)).await;
    // A fresh tag: the engine pulls it whatever earlier runs left.
    let image = format!("{}/svc-test/pulled:{}", registry.host, nonce());
    let mut events = server.events("?types=image.pulling", None).await;
    // Events are read as they come (their arrival times show the pace).
    let spawned_flag = Arc::new(AtomicBool::new(false));
    let collecting = {
        let spawned_flag = Arc::clone(&spawned_flag);
        tokio::spawn(async move {
            let mut pulls = Vec::new();
            loop {
                match events.next(Duration::from_millis(700)).await {
                    Some(event) => pulls.push((Instant::now(), event)),
                    None if spawned_flag.load(Ordering::SeqCst) => return pulls,
                    None => {}
                }
            }
        })
    };
    let pull_started = Instant::now();
    let spawning = {
        let (client, url, image) = (
            server.client.clone(),
            server.url("/sandboxes"),
            image.clone(),
        );
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({"provider": "docker", "image": image}))
                .send()
                .await
                .unwrap()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let message = loop {
        let creating = server.get("/sandboxes?state=creating").await;
        let message = creating.body[0]["state_message"]
            .as_str()
            .map(str::to_owned);
        if let Some(message) = message.filter(|m| m.contains("pulling image")) {
            break message;
        }
        assert!(
            Instant::now() < deadline,
            "no creating sandbox showed pull progress"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        message.starts_with(&format!("pulling image {image}: ")),
        "{message}"
    );
    assert!(
        message.contains(" MB of ") && message.ends_with("%)"),
        "{message}"
    );

    let spawned = spawning.await.unwrap();
    let pull_took = pull_started.elapsed();
    assert_eq!(spawned.status(), 201);
    let sandbox: Value = spawned.json().await.unwrap();
    assert_eq!(sandbox["state"], "running");
    assert!(
        sandbox["state_message"].is_null(),
        "running clears it: {sandbox}"
    );
    spawned_flag.store(true, Ordering::SeqCst);
    let pulls = collecting.await.unwrap();
    assert!(
        pulls.len() >= 2,
        "a slow pull reports more than once: {}",
        pulls.len()
    );
    for (_, event) in &pulls {
        assert_eq!(event.data["type"], "image.pulling");
        assert_eq!(event.data["sandbox_id"], sandbox["id"]);
        let data = &event.data["data"];
        assert_eq!(data["image"], image.as_str());
        assert!(data["current_bytes"].as_u64().unwrap() <= data["total_bytes"].as_u64().unwrap());
        assert!(data["total_bytes"].as_u64().unwrap() > 6 << 20, "{data}");
    }
    // At most twice a second, counted against how long the spawn took as the client saw it
    // (at least as long as the server's pull): arrival gaps would depend on how promptly this
    // test's reader runs.
    let most = pull_took.as_secs_f64() * 2.0 + 2.0;
    assert!(
        pulls.len() as f64 <= most,
        "at most twice a second: {} reports in {pull_took:?}",
        pulls.len()
    );
    let first = pulls[0].1.data["data"]["current_bytes"].as_u64().unwrap();
    let last = pulls.last().unwrap().1.data["data"]["current_bytes"]
        .as_u64()
        .unwrap();
    assert!(last > first, "the figures move: {first} then {last}");
    let ran = server
        .post(
            &format!("/sandboxes/{}/exec", sandbox["id"].as_str().unwrap()),
            json!({"command": "echo pulled"}),
        )
        .await;
    assert_eq!(ran.body["stdout"], "pulled\n", "{}", ran.body);
    finish(server, &docker, &[]).await;
    let _ = docker
        .remove_image(
            &image,
            Some(bollard::query_parameters::RemoveImageOptions {
                force: true,
                ..Default::default()
            }),
            None,
        )
        .await;
}

/// Runs `svc` with `args` against `server`; exit code, stdout, stderr.
async fn cli(server: &TestServer, args: Vec<String>) -> (Option<i32>, String, String) {
    let mut command = crate::cli::svc();
    command.env("SVC_URL", &server.base).args(args);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_builds_a_directory_shows_the_steps_and_exits_by_the_result() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    template(&server, "cli-web").await;
    let context = tempfile::tempdir().unwrap();
    let dir = context.path();
    std::fs::write(dir.join("hello.txt"), "hello from the directory\n").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/inner.txt"), "inner\n").unwrap();
    std::fs::write(
        dir.join("Dockerfile"),
        format!(
            "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nCOPY hello.txt /hello.txt\nCOPY sub /sub\nRUN cat /hello.txt /sub/inner.txt\n",
            nonce()
        ),
    )
    .unwrap();
    let args = |extra: &[&str]| -> Vec<String> {
        ["template", "build", "cli-web"]
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let dir_arg = dir.display().to_string();
    let (code, stdout, stderr) = cli(&server, args(&[&dir_arg])).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("Step 3: COPY hello.txt /hello.txt"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hello from the directory\ninner\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("built svc-templates/cli-web:bd-"),
        "{stderr}"
    );
    let image = server.get("/templates/cli-web").await.body["image"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(stderr.contains(&format!("built {image}")), "{stderr}");

    // Another Dockerfile with -f, a failing step: exit 1 and the step named; --json prints the
    // log lines as the server sends them.
    let failing = dir.join("Failing.dockerfile");
    std::fs::write(
        &failing,
        format!("FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN exit 3\n", nonce()),
    )
    .unwrap();
    let failing = failing.display().to_string();
    let (code, _, stderr) = cli(&server, args(&["-f", &failing, &dir_arg])).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("build failed: step 3 (RUN exit 3)"),
        "{stderr}"
    );
    let (code, stdout, _) = cli(&server, args(&["--json", "-f", &failing])).await;
    assert_eq!(code, Some(1));
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "result");
    assert_eq!(last["status"], "failed");
    assert_eq!(
        server.get("/templates/cli-web").await.body["image"],
        image.as_str(),
        "failed builds leave the template"
    );
    let (code, _, stderr) = cli(&server, args(&["-f", "/no/such/Dockerfile"])).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("/no/such/Dockerfile"), "{stderr}");
    finish(server, &docker, &["cli-web"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_from_an_image_it_must_pull_shows_the_pulled_bytes() {
    let Some((server, docker)) = build_server().await else {
        return;
    };
    let registry = crate::registry::serve(6 << 20, Duration::from_millis(60)).await;
    let base = format!("{}/svc-test/base:{}", registry.host, nonce());
    template(&server, "pulls-base").await;
    let build = start(
        &server,
        "pulls-base",
        &format!("FROM {base}\nRUN echo on-the-pulled-base\n"),
        json!({}),
    )
    .await;
    let lines = follow(&server, "pulls-base", &build, Duration::from_secs(120)).await;
    assert_eq!(result_of(&lines)["status"], "succeeded");
    let progress: Vec<&Value> = lines
        .iter()
        .map(|l| &l.value)
        .filter(|v| v["type"] == "progress")
        .collect();
    assert!(!progress.is_empty(), "the FROM pull reports its bytes");
    let last = progress.last().unwrap();
    assert!(last["total_bytes"].as_u64().unwrap() > 6 << 20, "{last}");
    assert!(last["current_bytes"].as_u64().unwrap() <= last["total_bytes"].as_u64().unwrap());
    assert!(output_of(&lines).contains("on-the-pulled-base"));
    finish(server, &docker, &["pulls-base"]).await;
    let _ = docker
        .remove_image(
            &base,
            Some(bollard::query_parameters::RemoveImageOptions {
                force: true,
                ..Default::default()
            }),
            None,
        )
        .await;
}

/// An HTTP server on the host that answers 503 until the returned flag is set, then 200: a
/// gate a build step can wait at.
async fn gate() -> (u16, Arc<AtomicBool>) {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let opened = Arc::new(AtomicBool::new(false));
    let open = Arc::clone(&opened);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let status = if open.load(Ordering::SeqCst) {
                "200 OK"
            } else {
                "503 Closed"
            };
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let response =
                    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    (port, opened)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_past_the_concurrency_bound_wait_their_turn() {
    let Some(docker) = engine().await else {
        return;
    };
    let server = TestServer::start_with(|c| {
        c.providers.docker.enabled = true;
        c.providers.docker.agent = svc_core::config::DockerAgentMode::Never;
        c.defaults.max_concurrent_builds = 1;
    })
    .await;
    template(&server, "first").await;
    template(&server, "second").await;
    // The first build holds its slot until the test opens a gate (its step waits for an HTTP
    // answer from the host), so the second is accepted while the first runs, however slow or
    // fast the machine.
    let gateway = crate::docker::bridge_gateway(&docker).await;
    let (gate, opened) = gate().await;
    let first = start(
        &server,
        "first",
        &format!(
            "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN until wget -q -O /dev/null http://{gateway}:{gate}/; do sleep 0.2; done && echo first-done\n",
            nonce()
        ),
        json!({}),
    )
    .await;
    let second = start(
        &server,
        "second",
        &format!(
            "FROM {IMAGE}\nENV SVC_TEST_NONCE={}\nRUN echo second-done\n",
            nonce()
        ),
        json!({}),
    )
    .await;
    // Checked while the first build still holds the slot: once the gate opens, the second may
    // run and end before anyone looks.
    assert_eq!(
        build_record(&server, "second", &second).await["status"],
        "running",
        "a waiting build shows running"
    );
    opened.store(true, Ordering::SeqCst);
    // The second build's first step comes only once the first build's record has ended:
    // checked when that step is read, not by comparing arrival times of two streams.
    let second_follow = async {
        let mut reader = LogLines::open(&server, "second", &second).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let mut lines = Vec::new();
        let mut first_status_at_second_step = None;
        while let Some(line) = reader.next(deadline).await {
            if line.value["type"] == "step" && first_status_at_second_step.is_none() {
                first_status_at_second_step =
                    Some(build_record(&server, "first", &first).await["status"].clone());
            }
            lines.push(line);
        }
        (lines, first_status_at_second_step)
    };
    let (a, (b, first_status)) = tokio::join!(
        follow(&server, "first", &first, Duration::from_secs(120)),
        second_follow,
    );
    // The result line names the error when a build fails.
    assert_eq!(result_of(&a)["status"], "succeeded", "{}", result_of(&a));
    assert_eq!(result_of(&b)["status"], "succeeded", "{}", result_of(&b));
    assert!(
        b[0].value["data"]
            .as_str()
            .is_some_and(|d| d.starts_with("waiting for a build slot")),
        "the waiting build says why: {}",
        b[0].value
    );
    assert_eq!(
        first_status,
        Some(json!("succeeded")),
        "the second build started only after the first ended"
    );
    finish(server, &docker, &["first", "second"]).await;
}
