//! The docker provider through the HTTP API, on a real engine with the local test images
//! `scripts/test.sh` builds. Skips loudly when no engine answers, unless the run requires one
//! (`SVC_TEST_REQUIRE_DOCKER` or `CI`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use futures::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};
use svc_core::config::Config;

use crate::harness::{wait_for, TestServer};
use crate::lifecycle::{assert_ended, assert_event_says_why};
use crate::reconcile::{history, reconcile_actions};

pub(crate) const IMAGE: &str = "svc-test-busybox:latest";

/// The engine, or `None` with a loud skip.
pub(crate) async fn engine() -> Option<Docker> {
    let docker = Docker::connect_with_defaults().ok();
    let docker = match docker {
        Some(d) => d.negotiate_version().await.ok(),
        None => None,
    };
    let answers = match &docker {
        Some(d) => d.ping().await.is_ok(),
        None => false,
    };
    if !answers {
        assert!(
            std::env::var_os("SVC_TEST_REQUIRE_DOCKER").is_none()
                && std::env::var_os("CI").is_none(),
            "the Docker engine is required here but does not answer"
        );
        eprintln!("SKIPPED (loudly): no Docker engine answers; run scripts/test.sh to start one");
        return None;
    }
    docker
}

/// The two ways svc reaches a docker sandbox's commands and files (decisions §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExecPath {
    /// The engine's exec and archive APIs.
    Engine,
    /// svc's agent as the container's init.
    Agent,
}

/// The static agent `scripts/test.sh` builds, or `None` with a loud skip.
fn static_agent() -> Option<PathBuf> {
    match svc_provider::microvm::Assets::find() {
        Ok(assets) => Some(assets.agent()),
        Err(missing) => {
            assert!(
                std::env::var_os("SVC_TEST_REQUIRE_MICROVM").is_none()
                    && std::env::var_os("CI").is_none(),
                "the static agent is required here: {missing}"
            );
            eprintln!("SKIPPED (loudly): no static agent for the Docker fast path: {missing}");
            None
        }
    }
}

/// A server whose docker sandboxes take the engine path.
pub(crate) async fn docker_server(
    adjust: impl FnOnce(&mut Config),
) -> Option<(TestServer, Docker)> {
    docker_server_on(ExecPath::Engine, adjust).await
}

/// A server whose docker sandboxes take `path`.
pub(crate) async fn docker_server_on(
    path: ExecPath,
    adjust: impl FnOnce(&mut Config),
) -> Option<(TestServer, Docker)> {
    let docker = engine().await?;
    let choose = exec_path_setting(path)?;
    let server = TestServer::start_with(|c| {
        c.providers.docker.enabled = true;
        choose(c);
        adjust(c);
    })
    .await;
    Some((server, docker))
}

/// What makes a server's docker sandboxes take `path`; `None` (a loud skip) when the agent
/// path is asked for and no static agent was built.
pub(crate) fn exec_path_setting(path: ExecPath) -> Option<impl FnOnce(&mut Config)> {
    let agent = match path {
        ExecPath::Agent => Some(static_agent()?),
        ExecPath::Engine => None,
    };
    Some(move |c: &mut Config| match agent {
        Some(agent) => {
            c.providers.docker.agent = svc_core::config::DockerAgentMode::Always;
            c.providers.docker.agent_path = agent;
        }
        None => c.providers.docker.agent = svc_core::config::DockerAgentMode::Never,
    })
}

async fn spawn_docker(server: &TestServer, extra: Value) -> String {
    let mut body = json!({"provider": "docker", "image": IMAGE});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    server.spawn(body).await["id"].as_str().unwrap().to_owned()
}

fn container(id: &str) -> String {
    format!("svc-{id}")
}

/// Removes the containers of every sandbox the server knows (shutdown leaves them running by
/// design) with their agent socket directories, then shuts the server down.
pub(crate) async fn finish(server: TestServer, docker: &Docker) {
    for id in server.listed_ids("?state=all").await {
        if let Ok(inspect) = docker.inspect_container(&container(&id), None).await {
            let labels = inspect.config.and_then(|c| c.labels).unwrap_or_default();
            if let Some(dir) = labels.get("dev.svc.agent_dir") {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        let _ = docker
            .remove_container(
                &container(&id),
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
    }
    server.shutdown().await;
}

async fn docker_sandbox_lifecycle_with_labels_and_limits(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let reply = server
        .client
        .post(server.url("/sandboxes"))
        .header("X-User-ID", "alice")
        .json(&json!({"provider": "docker", "image": IMAGE, "memory_mb": 256, "vcpus": 1, "env": {"GREETING": "hello"}}))
        .send()
        .await
        .unwrap();
    let sandbox = TestServer::reply(reply).await;
    assert_eq!(sandbox.status, 201, "{}", sandbox.body);
    assert_eq!(sandbox.body["provider"], "docker");
    let id = sandbox.body["id"].as_str().unwrap().to_owned();
    let inspect = docker
        .inspect_container(&container(&id), None)
        .await
        .unwrap();
    let labels = inspect.config.as_ref().unwrap().labels.clone().unwrap();
    assert_eq!(labels["dev.svc.managed"], "true");
    assert_eq!(labels["dev.svc.sandbox_id"], id);
    assert_eq!(labels["dev.svc.owner"], "alice");
    assert_eq!(labels["dev.svc.tenant"], "default");
    assert_eq!(labels["dev.svc.worker"], "local");
    let host = inspect.host_config.unwrap();
    assert_eq!(host.memory, Some(256 * 1024 * 1024));
    assert_eq!(
        host.memory_swap,
        Some(256 * 1024 * 1024),
        "no swap beyond the memory limit"
    );
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    assert_eq!(host.pids_limit, Some(256));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert!(host
        .security_opt
        .unwrap()
        .contains(&"no-new-privileges:true".to_owned()));
    assert_eq!(host.network_mode.as_deref(), Some("bridge"));
    assert_eq!(
        inspect.state.unwrap().running,
        Some(true),
        "the container keeps running"
    );

    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo $GREETING; id -u; echo oops >&2; exit 4"}),
        )
        .await;
    assert_eq!(exec.body["stdout"], "hello\n0\n");
    assert_eq!(exec.body["stderr"], "oops\n");
    assert_eq!(exec.body["exit_code"], 4);

    let provider = server.get("/providers/docker").await;
    assert_eq!(provider.body["healthy"], true);
    assert_eq!(provider.body["sandbox_count"], 1);
    assert_eq!(provider.body["config"]["runtime"], "runc");
    assert_eq!(provider.body["config"]["network_mode"], "bridge");
    assert_eq!(provider.body["config"]["dropped_caps"], json!(["ALL"]));
    let capabilities = provider.body["health"]["capabilities"]
        .as_array()
        .unwrap()
        .clone();
    for cap in [
        "spawn",
        "exec",
        "exec_stream",
        "files",
        "console",
        "health",
        "runtime_inventory",
        "container",
        "pause",
        "warm_pool",
    ] {
        assert!(capabilities.contains(&json!(cap)), "{cap}");
    }
    let summary = server.get("/providers").await;
    let docker_summary = summary
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "docker")
        .unwrap()
        .clone();
    assert!(docker_summary["runtime_count"].as_u64().unwrap() >= 1);

    // What the container's main process writes is its log; on the agent path that is the
    // agent, which logs the commands it ran and how they ended.
    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "for i in 1 2 3; do echo line$i > /proc/1/fd/1; done"}),
        )
        .await;
    assert_eq!(exec.body["exit_code"], 0, "{}", exec.body);
    if path == ExecPath::Engine {
        // The engine copies the container's output into its log in the background.
        wait_for(
            "the engine to log the lines",
            Duration::from_secs(60),
            || async {
                server
                    .get(&format!("/sandboxes/{id}/logs?lines=2"))
                    .await
                    .body
                    == json!(["line2", "line3"])
            },
        )
        .await;
    }
    let logs = server.get(&format!("/sandboxes/{id}/logs?lines=2")).await;
    assert_eq!(logs.status, 200);
    match path {
        ExecPath::Engine => assert_eq!(logs.body, json!(["line2", "line3"])),
        ExecPath::Agent => {
            let lines: Vec<&str> = logs
                .body
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap())
                .collect();
            assert_eq!(lines.len(), 2, "{lines:?}");
            let (number, command) = lines[0]
                .strip_prefix("exec ")
                .and_then(|rest| rest.split_once(": "))
                .unwrap_or_else(|| panic!("{lines:?}"));
            assert!(command.ends_with("for i in 1 2 3; do echo line$i > /proc/1/fd/1; done"));
            assert!(
                lines[1].starts_with(&format!("exec {number}: exit 0 after ")),
                "{lines:?}"
            );
        }
    }

    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    let gone = docker.inspect_container(&container(&id), None).await;
    assert!(gone.is_err(), "the container is removed");
    assert_eq!(
        server.delete(&format!("/sandboxes/{id}")).await.status,
        200,
        "idempotent"
    );
    server.shutdown().await;
}

async fn docker_exec_forms_and_deadlines(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    let exec = format!("/sandboxes/{id}/exec");
    let timed = server
        .post(
            &exec,
            json!({"command": "echo partial; sleep 30", "timeout": "3s"}),
        )
        .await;
    assert_eq!(timed.body["exit_code"], 124);
    assert_eq!(timed.body["timed_out"], true);
    assert_eq!(timed.body["stdout"], "partial\n");
    let ps = server
        .post(
            &exec,
            json!({"command": "ps -o args | grep -c '^sleep 30' || true"}),
        )
        .await;
    assert_eq!(
        ps.body["stdout"], "0\n",
        "the deadline stopped the process inside the container"
    );

    let response = server
        .client
        .post(server.url(&exec))
        .json(&json!({"command": "echo one; echo two >&2", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let text = response.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.contains(&json!({"stream": "stdout", "data": "one\n"})),
        "{lines:?}"
    );
    assert!(
        lines.contains(&json!({"stream": "stderr", "data": "two\n"})),
        "{lines:?}"
    );
    assert_eq!(lines.last().unwrap()["exit_code"], 0);

    let argv = server
        .post(&exec, json!({"command": "echo", "args": ["a b", "$HOME"]}))
        .await;
    assert_eq!(argv.body["stdout"], "a b $HOME\n");
    let workdir = server
        .post(&exec, json!({"command": "pwd", "workdir": "/tmp"}))
        .await;
    assert_eq!(workdir.body["stdout"], "/tmp\n");
    server
        .post(&exec, json!({"command": "pwd", "workdir": "/nope"}))
        .await
        .assert_error(400, "bad_request");
    finish(server, &docker).await;
}

async fn docker_interactive_tty_resize_and_stdin(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    let url = format!(
        "{}/sandboxes/{id}/exec/ws",
        server.url("").replace("http://", "ws://")
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let start = json!({"type": "start", "command": "stty size; read line; stty size; echo got:$line", "tty": true, "cols": 100, "rows": 30});
    socket
        .send(Message::Text(start.to_string().into()))
        .await
        .unwrap();
    let mut output = String::new();
    // Resize only once the first size was printed.
    while !output.contains('\n') {
        let Some(Ok(Message::Text(text))) = socket.next().await else {
            panic!("no output")
        };
        let value: Value = serde_json::from_str(&text).unwrap();
        output.push_str(value["data"].as_str().unwrap_or_default());
    }
    socket
        .send(Message::Text(
            json!({"type": "resize", "cols": 140, "rows": 45})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    socket
        .send(Message::Text(
            json!({"type": "stdin", "data": "hi\n"}).to_string().into(),
        ))
        .await
        .unwrap();
    let mut exit = None;
    while let Ok(Some(Ok(message))) =
        tokio::time::timeout(Duration::from_secs(20), socket.next()).await
    {
        let Message::Text(text) = message else { break };
        let value: Value = serde_json::from_str(&text).unwrap();
        match value["type"].as_str().unwrap() {
            "stdout" => output.push_str(value["data"].as_str().unwrap()),
            "exit" => exit = value["exit_code"].as_i64(),
            other => panic!("unexpected {other}: {value}"),
        }
    }
    assert_eq!(exit, Some(0), "{output:?}");
    assert!(output.contains("30 100"), "{output:?}");
    assert!(output.contains("45 140"), "{output:?}");
    assert!(output.contains("got:hi"), "{output:?}");

    // Plain stdin with EOF.
    let (mut socket, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    socket
        .send(Message::Text(
            json!({"type": "start", "command": "cat"})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    socket
        .send(Message::Text(
            json!({"type": "stdin", "data": "piped", "eof": true})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    let mut text = String::new();
    while let Ok(Some(Ok(Message::Text(message)))) =
        tokio::time::timeout(Duration::from_secs(20), socket.next()).await
    {
        let value: Value = serde_json::from_str(&message).unwrap();
        if value["type"] == "stdout" {
            text.push_str(value["data"].as_str().unwrap());
        }
        if value["type"] == "exit" {
            assert_eq!(value["exit_code"], 0);
            break;
        }
    }
    assert_eq!(text, "piped");
    finish(server, &docker).await;
}

async fn docker_streamed_uploads_are_bounded_and_whole(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |c| {
        c.server.max_body_bytes = 1 << 20;
        c.server.max_upload_bytes = 8 << 20;
    })
    .await
    else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    crate::files::assert_streamed_uploads(&server, &id, "/work").await;
    crate::files::assert_archives(&server, &id, "/work").await;
    finish(server, &docker).await;
}

async fn docker_files_and_2_gib_up_and_down_in_flat_memory(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    crate::files::assert_ranges(&server, &id, "/work").await;
    let files = format!("/sandboxes/{id}/files");
    let written = server
        .post(
            &files,
            json!({"path": "/work/deep/a.txt", "content": "héllo", "mode": "0640"}),
        )
        .await;
    assert_eq!(written.status, 200, "{}", written.body);
    let read = server
        .client
        .get(server.url(&format!("{files}?path=/work/deep/a.txt")))
        .send()
        .await
        .unwrap();
    assert_eq!(read.bytes().await.unwrap(), "héllo".as_bytes());
    let stat = server
        .get(&format!("{files}/stat?path=/work/deep/a.txt"))
        .await;
    assert_eq!(stat.body["mode"], "0640");
    assert_eq!(stat.body["size"], 6);
    let tmp = server.get(&format!("{files}/stat?path=/tmp")).await;
    assert_eq!(
        tmp.body["mode"], "1777",
        "existing directories keep their modes"
    );
    let list = server.get(&format!("{files}/list?path=/work/deep")).await;
    assert_eq!(list.body[0]["name"], "a.txt");
    server
        .post(
            &format!("{files}/move"),
            json!({"old_path": "/work/deep/a.txt", "new_path": "/work/b.txt"}),
        )
        .await;
    server
        .post(
            &format!("{files}/chmod"),
            json!({"path": "/work/b.txt", "mode": "600"}),
        )
        .await;
    assert_eq!(
        server
            .get(&format!("{files}/stat?path=/work/b.txt"))
            .await
            .body["mode"],
        "0600"
    );
    assert_eq!(
        server
            .get(&format!("{files}/glob?pattern=/work/**/*.txt"))
            .await
            .body,
        json!(["/work/b.txt"])
    );
    server
        .call(Method::DELETE, &format!("{files}?path=/work"), None)
        .await
        .assert_error(400, "bad_request");
    assert_eq!(
        server
            .call(
                Method::DELETE,
                &format!("{files}?path=/work&recursive=true"),
                None
            )
            .await
            .status,
        200
    );
    server
        .get(&format!("{files}?path=/work/b.txt"))
        .await
        .assert_error(404, "not_found");

    crate::files::assert_two_gib_round_trip(&server, &id, "/big/two.bin").await;
    finish(server, &docker).await;
}

async fn docker_files_without_a_shell_and_read_only_rootfs(path: ExecPath) {
    let Some((server, docker)) =
        docker_server_on(path, |c| c.providers.docker.read_only_rootfs = true).await
    else {
        return;
    };
    let noshell = server
        .spawn(json!({"provider": "docker", "image": "svc-test-noshell:latest"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let files = format!("/sandboxes/{noshell}/files");
    let read = server
        .client
        .get(server.url(&format!("{files}?path=/data/readme.txt")))
        .send()
        .await
        .unwrap();
    assert_eq!(read.bytes().await.unwrap(), "no shell here\n");

    let id = spawn_docker(&server, json!({})).await;
    let exec = format!("/sandboxes/{id}/exec");
    let rootfs = server
        .post(&exec, json!({"command": "touch /nope 2>&1; echo $?"}))
        .await;
    assert_ne!(
        rootfs.body["stdout"].as_str().unwrap().lines().last(),
        Some("0"),
        "the root filesystem is read-only"
    );
    let tmp = server
        .post(&exec, json!({"command": "echo x > /tmp/ok && cat /tmp/ok"}))
        .await;
    assert_eq!(tmp.body["stdout"], "x\n", "/tmp stays writable");
    finish(server, &docker).await;
}

async fn docker_sandboxes_survive_a_restart(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    let server = server.restart().await;
    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo still here"}),
        )
        .await;
    assert_eq!(exec.body["stdout"], "still here\n");
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    assert!(docker
        .inspect_container(&container(&id), None)
        .await
        .is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn an_engine_that_does_not_answer_is_unhealthy_and_refuses_spawns() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("missing.sock");
    let server = TestServer::start_with(|c| {
        c.providers.docker.enabled = true;
        c.providers.docker.socket = socket.display().to_string();
        c.providers.mock.enabled = false;
    })
    .await;
    let ready = server.get("/ready").await;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.body["providers"][0]["name"], "docker");
    assert_eq!(ready.body["providers"][0]["healthy"], false);
    assert!(ready.body["providers"][0]["error"].is_string());
    let message = server
        .post("/sandboxes", json!({"provider": "docker", "image": IMAGE}))
        .await
        .assert_error(503, "unavailable");
    assert!(message.contains("docker"), "{message}");
    assert!(server.listed_ids("?state=all").await.is_empty());
    server.shutdown().await;
}

/// A socket in front of the real engine that can be cut, as if the engine went away.
struct EngineProxy {
    path: PathBuf,
    connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    acceptor: Option<tokio::task::JoinHandle<()>>,
}

impl EngineProxy {
    fn start(path: &Path) -> Self {
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        let connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let tracked = Arc::clone(&connections);
        let acceptor = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let handle = tokio::spawn(async move {
                    if let Ok(mut engine) =
                        tokio::net::UnixStream::connect("/var/run/docker.sock").await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut engine).await;
                    }
                });
                tracked.lock().unwrap().push(handle);
            }
        });
        EngineProxy {
            path: path.to_path_buf(),
            connections,
            acceptor: Some(acceptor),
        }
    }

    fn cut(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.abort();
        }
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

#[tokio::test]
async fn an_engine_going_away_mid_operation() {
    let Some(docker) = engine().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("engine.sock");
    let mut proxy = EngineProxy::start(&socket);
    let server = TestServer::start_with(|c| {
        c.providers.docker.enabled = true;
        c.providers.docker.socket = socket.display().to_string();
        c.providers.mock.enabled = false;
    })
    .await;
    let id = spawn_docker(&server, json!({})).await;
    let mut events = server.events("?types=provider.failed", None).await;
    proxy.cut();
    // Give the provider's pooled connections a moment to notice.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let message = server
        .post(&format!("/sandboxes/{id}/exec"), json!({"command": "true"}))
        .await
        .assert_error(500, "provider_error");
    assert!(message.contains("docker"), "{message}");
    let failed = events
        .next(Duration::from_secs(60))
        .await
        .expect("provider.failed");
    assert_eq!(failed.data["data"]["provider"], "docker");
    server
        .delete(&format!("/sandboxes/{id}"))
        .await
        .assert_error(500, "provider_error");
    assert_eq!(
        server.get(&format!("/sandboxes/{id}")).await.body["state"],
        "running",
        "a failed destroy changes nothing"
    );
    let failed_spawn = server
        .post("/sandboxes", json!({"provider": "docker", "image": IMAGE}))
        .await;
    assert!(
        matches!(failed_spawn.status.as_u16(), 500 | 503),
        "{}",
        failed_spawn.body
    );
    assert_eq!(
        server.listed_ids("?state=running").await,
        vec![id.clone()],
        "the failed spawn holds nothing"
    );
    // A spawn admitted before the health cache noticed: its rollback waits for the engine.
    let failed: Vec<String> = server
        .listed_ids("?state=all")
        .await
        .into_iter()
        .filter(|other| *other != id)
        .collect();
    wait_for(
        "/ready to report the engine gone",
        Duration::from_secs(60),
        || async { server.get("/ready").await.status == 503 },
    )
    .await;
    // The engine comes back: the sandbox is intact and can be destroyed.
    let _proxy = EngineProxy::start(&socket);
    wait_for("/ready to recover", Duration::from_secs(60), || async {
        server.get("/ready").await.status == 200
    })
    .await;
    for other in &failed {
        wait_for(
            "the failed spawn's rollback",
            Duration::from_secs(30),
            || async { server.get(&format!("/sandboxes/{other}")).await.body["state"] == "error" },
        )
        .await;
        let record = server.get(&format!("/sandboxes/{other}")).await.body;
        assert_eq!(record["state_reason"], "spawn_failed", "{record}");
    }
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    let managed = docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "label".to_owned(),
                vec![format!("dev.svc.sandbox_id={id}")],
            )])),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert!(managed.is_empty(), "no orphaned container");
    server.shutdown().await;
}

#[tokio::test]
async fn missing_images_are_pulled_and_failures_leave_nothing() {
    let Some((server, docker)) = docker_server(|_| {}).await else {
        return;
    };
    let mut events = server
        .events("?types=sandbox.error,provider.failed", None)
        .await;
    // No registry is reachable here, so the pull itself fails; what matters is that it was
    // attempted, the error says so, and nothing is left behind.
    let message = server
        .post(
            "/sandboxes",
            json!({"provider": "docker", "image": "svc-test-not-here/nothing:1.0"}),
        )
        .await
        .assert_error(500, "provider_error");
    assert!(message.contains("pull"), "{message}");
    let sandbox_error = events.next(Duration::from_secs(60)).await.unwrap();
    assert_eq!(sandbox_error.data["type"], "sandbox.error");
    assert_eq!(
        events.next(Duration::from_secs(60)).await.unwrap().data["type"],
        "provider.failed"
    );
    let ids = server.listed_ids("?state=all").await;
    assert_eq!(ids.len(), 1, "one ended record explains the failure");
    let failed = assert_ended(&server, &ids[0], "error", "spawn_failed").await;
    assert!(failed["state_message"].as_str().unwrap().contains("pull"));
    assert_event_says_why(&sandbox_error, &failed);
    let leftovers = docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "ancestor".to_owned(),
                vec!["svc-test-not-here/nothing:1.0".to_owned()],
            )])),
            ..Default::default()
        }))
        .await
        .unwrap_or_default();
    assert!(leftovers.is_empty());

    // A container that vanished behind svc's back is destroyed without complaint.
    let id = spawn_docker(&server, json!({})).await;
    docker
        .remove_container(
            &container(&id),
            Some(bollard::query_parameters::RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    assert_eq!(
        server.get(&format!("/sandboxes/{id}")).await.body["state"],
        "destroyed"
    );
    finish(server, &docker).await;
}

/// On the engine path; on the agent path the agent's going is noticed at once
/// (`an_agent_that_dies_ends_its_sandbox_as_provider_failed`).
#[tokio::test]
async fn a_container_that_stopped_ends_its_sandbox_as_provider_failed() {
    let Some((server, docker)) = docker_server(|_| {}).await else {
        return;
    };
    let killed = spawn_docker(&server, json!({})).await;
    let kept = spawn_docker(&server, json!({})).await;
    // The container dies behind svc's back (SIGKILL, as the OOM killer would).
    docker
        .kill_container(&container(&killed), None)
        .await
        .unwrap();
    wait_for(
        "the killed container to stop",
        Duration::from_secs(60),
        || async {
            docker
                .inspect_container(&container(&killed), None)
                .await
                .is_ok_and(|c| c.state.and_then(|s| s.running) == Some(false))
        },
    )
    .await;
    // The restart's reconciliation finds it stopped.
    let server = server.restart().await;
    let record = assert_ended(&server, &killed, "error", "provider_failed").await;
    assert_eq!(
        record["state_message"],
        "the runtime stopped on provider docker"
    );
    let gone = docker.inspect_container(&container(&killed), None).await;
    assert!(gone.is_err(), "the stopped container is removed: {gone:?}");
    let events = history(&server).await;
    let actions = reconcile_actions(&events);
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["sandbox_id"], killed.as_str());
    assert_eq!(
        actions[0]["data"],
        json!({"action": "marked_error", "provider": "docker", "image": IMAGE})
    );
    let failed = events
        .iter()
        .find(|e| e.data["type"] == "sandbox.error")
        .expect("a sandbox.error event");
    assert_event_says_why(failed, &record);
    // The running one is untouched.
    let exec = server
        .post(
            &format!("/sandboxes/{kept}/exec"),
            json!({"command": "echo alive"}),
        )
        .await;
    assert_eq!(exec.body["stdout"], "alive\n", "{}", exec.body);
    finish(server, &docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spawns_whose_clients_disconnect_leave_no_orphans() {
    let Some((server, docker)) = docker_server(|_| {}).await else {
        return;
    };
    // Only this test's containers: other tests share the engine.
    let owner = format!("disconnect-{}", std::process::id());
    // Clients give up at different moments (before admission, during the engine's work, just
    // before the answer): how far each spawn got depends on the machine's speed, so the waves
    // cover the range instead of betting on one moment.
    let mut given_up = 0;
    for patience in [10, 50, 200, 1000, 3000] {
        let impatient = reqwest::Client::builder()
            .timeout(Duration::from_millis(patience))
            .build()
            .unwrap();
        let spawns = (0..10).map(|_| {
            impatient
                .post(server.url("/sandboxes"))
                .json(&json!({"provider": "docker", "image": IMAGE, "owner_id": owner}))
                .send()
        });
        given_up += futures::future::join_all(spawns)
            .await
            .into_iter()
            .filter(Result::is_err)
            .count();
    }
    assert!(given_up >= 10, "the clients gave up ({given_up} of 50)");
    let records = || async {
        let reply = server
            .get(&format!("/sandboxes?state=all&owner_id={owner}"))
            .await;
        reply.body.as_array().unwrap().clone()
    };
    wait_for(
        "every abandoned spawn to settle",
        Duration::from_secs(180),
        || async { records().await.iter().all(|r| r["state"] != "creating") },
    )
    .await;
    let records = records().await;
    assert!(!records.is_empty(), "the server received the spawns");
    let running: std::collections::BTreeSet<String> = records
        .iter()
        .filter(|r| r["state"] == "running")
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    let containers: std::collections::BTreeSet<String> = docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "label".to_owned(),
                vec![format!("dev.svc.owner={owner}")],
            )])),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.labels?.get("dev.svc.sandbox_id").cloned())
        .collect();
    assert_eq!(
        containers, running,
        "every labelled container has a running record and every running record a container"
    );
    for id in &running {
        assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    }
    finish(server, &docker).await;
}

#[tokio::test]
async fn docker_stats_report_the_container_and_its_limit() {
    let Some((server, docker)) = docker_server(|_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({"memory_mb": 256})).await;
    let stats = server.get(&format!("/sandboxes/{id}/stats")).await;
    assert_eq!(stats.status, 200, "{}", stats.body);
    crate::harness::assert_schema("SandboxStats", &stats.body);
    let body = &stats.body;
    // The keep-alive loop (a shell and its sleep) is always there.
    assert!(body["pids"].as_u64().unwrap() >= 1, "{body}");
    assert!(body["memory_bytes"].as_u64().unwrap() > 0, "{body}");
    assert_eq!(body["memory_limit_bytes"], 256 * 1024 * 1024, "{body}");
    assert!(body["cpu_percent"].as_f64().unwrap() >= 0.0, "{body}");
    assert!(
        body["net_rx_bytes"].is_u64() && body["net_tx_bytes"].is_u64(),
        "{body}"
    );
    let sampled_at = body["sampled_at"].as_str().unwrap();
    assert!(
        sampled_at.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(sampled_at).is_ok(),
        "{sampled_at}"
    );
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    server
        .get(&format!("/sandboxes/{id}/stats"))
        .await
        .assert_error(409, "conflict");
    finish(server, &docker).await;
}

/// The engine's pause (decisions §7): a counter stops and resumes, a streamed exec spans the
/// pause, and a pause right after an exec was started (the engine still putting its process in
/// the container) never leaves the container frozen: each round's resume answers.
async fn docker_pause_and_resume(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    crate::pause::assert_pause_and_resume(&server, &id).await;
    let inspected = docker
        .inspect_container(&container(&id), None)
        .await
        .unwrap();
    assert_eq!(inspected.state.unwrap().paused, Some(false));
    for round in 0..8 {
        let started = server
            .post(
                &format!("/sandboxes/{id}/exec"),
                json!({"command": "sleep 0.2", "background": true}),
            )
            .await;
        assert_eq!(started.status, 202, "{}", started.body);
        let paused = tokio::time::timeout(
            Duration::from_secs(20),
            server.post(&format!("/sandboxes/{id}/pause"), json!({})),
        )
        .await
        .expect("pause answers");
        assert_eq!(paused.status, 200, "round {round}: {}", paused.body);
        let resumed = tokio::time::timeout(
            Duration::from_secs(20),
            server.post(&format!("/sandboxes/{id}/resume"), json!({})),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: the resume hung (engine freezer race)"));
        assert_eq!(resumed.status, 200, "round {round}: {}", resumed.body);
    }
    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo alive"}),
        )
        .await;
    assert_eq!(
        exec.body["stdout"], "alive\n",
        "{}: {}",
        exec.status, exec.body
    );
    finish(server, &docker).await;
}

/// The command-line client on docker (decisions §19): `svc exec -i` and `-it` in a real
/// terminal, `svc cp` round trips, and an MCP session with `svc mcp`.
async fn docker_client_interactive_exec_and_cp(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    crate::client::assert_interactive_exec(&server, &id).await;
    crate::client::assert_cp(&server, &id, "/work").await;
    crate::client::assert_mcp_session(&server, json!({"provider": "docker", "image": IMAGE})).await;
    finish(server, &docker).await;
}

/// Exec jobs on docker (decisions §8): records, signals, stdin and kill on running and ended
/// execs, background execs and `on_disconnect`, the `lost` marker, and 50 MiB reassembled
/// across reconnects.
async fn docker_exec_jobs(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    crate::exec::assert_exec_records(&server, &id).await;
    finish(server, &docker).await;
    let Some((server, docker)) = docker_server_on(path, |c| {
        c.defaults.default_exec_timeout = svc_core::GoDuration::from_millis(300);
        c.exec.output_buffer_bytes = 32 << 20;
    })
    .await
    else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    crate::exec::assert_background_execs(&server, &id).await;
    crate::exec::assert_reconnects_reassemble(&server, &id, "/work").await;
    finish(server, &docker).await;
    let Some((server, docker)) =
        docker_server_on(path, |c| c.exec.output_buffer_bytes = 1000).await
    else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    crate::exec::assert_lost_output(&server, &id).await;
    finish(server, &docker).await;
}

/// After a restart, a docker sandbox's background execs are listed again (decisions §8): one
/// still running (and killable), one that ended while svc was away with its exit code, one
/// that ends later followed to its exit code, and an ended one as it was.
async fn docker_exec_records_survive_a_restart(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    let execs = format!("/sandboxes/{id}/execs");
    let start = |command: &str| {
        let body = json!({"command": command, "background": true});
        let server = &server;
        let id = &id;
        async move {
            let reply = server.post(&format!("/sandboxes/{id}/exec"), body).await;
            assert_eq!(reply.status, 202, "{}", reply.body);
            reply.body["exec_id"].as_str().unwrap().to_owned()
        }
    };
    let done = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "exit 3"}),
        )
        .await
        .body["exec_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let long = start("sleep 1000").await;
    let soon = start("sleep 1; exit 4").await;
    let later = start("sleep 6; exit 5").await;
    let server = server.restart().await;
    let record = |exec: String| {
        let server = &server;
        let execs = &execs;
        async move { server.get(&format!("{execs}/{exec}")).await.body }
    };
    let long_record = record(long.clone()).await;
    assert_eq!(long_record["status"], "running", "{long_record}");
    assert_eq!(long_record["background"], true);
    assert!(long_record["detail"].is_string(), "{long_record}");
    assert_eq!(record(done.clone()).await["exit_code"], 3);
    crate::harness::wait_for("the execs to end", Duration::from_secs(30), || async {
        let soon = record(soon.clone()).await;
        let later = record(later.clone()).await;
        (
            soon["status"].as_str(),
            soon["exit_code"].as_i64(),
            later["status"].as_str(),
            later["exit_code"].as_i64(),
        ) == (Some("exited"), Some(4), Some("exited"), Some(5))
    })
    .await;
    let killed = server.delete(&format!("{execs}/{long}")).await;
    assert_eq!(
        killed.body,
        json!({"status": "killed"}),
        "a recovered exec can still be killed"
    );
    crate::harness::wait_for("the kill", Duration::from_secs(60), || async {
        record(long.clone()).await["status"] == "killed"
    })
    .await;
    finish(server, &docker).await;
}

/// The containers of template `template`'s warm pool (claimed or not), by name.
async fn warm_containers(
    docker: &Docker,
    template: &str,
) -> BTreeMap<String, HashMap<String, String>> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![format!("dev.svc.template={template}")],
    )]);
    let options = bollard::query_parameters::ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    docker
        .list_containers(Some(options))
        .await
        .unwrap()
        .into_iter()
        .map(|c| {
            let name = c.names.unwrap_or_default()[0]
                .trim_start_matches('/')
                .to_owned();
            (name, c.labels.unwrap_or_default())
        })
        .collect()
}

/// Warm pools on docker (decisions §17): started containers wait under their warm names; a
/// spawn claims one (renamed to the sandbox's, labels kept) with its own owner and env, the
/// pool refills, a restart adopts the ready container, and deleting the template removes it.
async fn docker_warm_pool_hands_out_started_containers(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |c| {
        c.defaults.warm_check_interval = "200ms".parse().unwrap();
    })
    .await
    else {
        return;
    };
    let template = format!("dw-{}", std::process::id());
    let created = server
        .post(
            "/templates",
            json!({"name": template, "provider": "docker", "image": IMAGE, "warm_pool": 1}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    crate::warm::wait_ready(&server, &template, 1).await;
    let warm = warm_containers(&docker, &template).await;
    assert_eq!(warm.len(), 1, "{warm:?}");
    let (warm_name, labels) = warm.iter().next().unwrap();
    assert_eq!(labels["dev.svc.warm"], "true");
    assert_eq!(*warm_name, format!("svc-{}", labels["dev.svc.sandbox_id"]));

    let spawned = server
        .client
        .post(server.url("/sandboxes"))
        .header("X-User-ID", "bob")
        .json(&json!({"template": template, "env": {"GREETING": "warm"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(spawned.status(), 201);
    let sandbox: Value = spawned.json().await.unwrap();
    let id = sandbox["id"].as_str().unwrap().to_owned();
    assert_eq!(sandbox["owner_id"], "bob");
    let inspected = docker
        .inspect_container(&container(&id), None)
        .await
        .unwrap();
    let claimed_labels = inspected.config.unwrap().labels.unwrap();
    assert_eq!(
        &claimed_labels["dev.svc.sandbox_id"],
        &labels["dev.svc.sandbox_id"]
    );
    assert!(
        docker.inspect_container(warm_name, None).await.is_err(),
        "renamed"
    );
    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo $GREETING"}),
        )
        .await;
    assert_eq!(exec.body["stdout"], "warm\n", "{}", exec.body);

    crate::warm::wait_ready(&server, &template, 1).await;
    let refilled: Vec<String> = warm_containers(&docker, &template)
        .await
        .into_keys()
        .filter(|name| *name != container(&id))
        .collect();
    assert_eq!(refilled.len(), 1);

    let server = server.restart().await;
    crate::warm::wait_ready(&server, &template, 1).await;
    let after: Vec<String> = warm_containers(&docker, &template)
        .await
        .into_keys()
        .filter(|name| *name != container(&id))
        .collect();
    assert_eq!(
        after, refilled,
        "the ready container adopted, none started twice"
    );
    assert_eq!(server.listed_ids("").await, std::slice::from_ref(&id));
    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo $GREETING"}),
        )
        .await;
    assert_eq!(exec.body["stdout"], "warm\n");

    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    assert_eq!(
        server
            .delete(&format!("/templates/{template}"))
            .await
            .status,
        200
    );
    wait_for(
        "the warm container removed",
        Duration::from_secs(30),
        || async { warm_containers(&docker, &template).await.is_empty() },
    )
    .await;
    finish(server, &docker).await;
}

/// Previews on docker (decisions §18): busybox `httpd` inside the container, reached by path
/// and by host name through the container's address; a port with nothing listening is 502.
async fn docker_previews_reach_a_web_server_in_the_container(path: ExecPath) {
    let Some((server, docker)) = docker_server_on(path, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    crate::preview::assert_previews_of_busybox_httpd(&server, &id).await;
    finish(server, &docker).await;
}

/// A TCP server on every host address answering each connection with `reply` (a minimal HTTP
/// response); its port.
async fn host_http_server(reply: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

/// A stand-in for a TLS server on the host's port 443 (where the egress proxy connects a name
/// admitted by SNI): it keeps the first record each client sends and answers `server hello`.
async fn host_tls_upstream() -> Arc<Mutex<Vec<Vec<u8>>>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:443")
        .await
        .expect("port 443 of 127.0.0.1 must be free for the egress TLS test");
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = received.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut head = [0u8; 5];
                if stream.read_exact(&mut head).await.is_err() {
                    return;
                }
                let mut record = head.to_vec();
                record.resize(5 + usize::from(u16::from_be_bytes([head[3], head[4]])), 0);
                if stream.read_exact(&mut record[5..]).await.is_ok() {
                    kept.lock().unwrap().push(record);
                    let _ = stream.write_all(b"server hello").await;
                }
            });
        }
    });
    received
}

/// A TLS ClientHello record with a server name (SNI) extension and nothing else of note.
fn client_hello(name: &str) -> Vec<u8> {
    let be16 = |n: usize| u16::try_from(n).unwrap().to_be_bytes();
    let mut sni = [be16(name.len() + 3).as_slice(), &[0], &be16(name.len())].concat();
    sni.extend_from_slice(name.as_bytes());
    let extensions = [&[0u8, 0][..], &be16(sni.len()), &sni].concat();
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[7; 32]); // random
    body.push(0); // no session ID
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01, 0x01, 0x00]); // one suite, no compression
    body.extend_from_slice(&be16(extensions.len()));
    body.extend_from_slice(&extensions);
    let handshake = [&[0x01, 0x00][..], &be16(body.len()), &body].concat();
    [&[0x16, 0x03, 0x01][..], &be16(handshake.len()), &handshake].concat()
}

/// The host as containers on the default bridge reach it.
pub(crate) async fn bridge_gateway(docker: &Docker) -> String {
    let network = docker
        .inspect_network(
            "bridge",
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .unwrap();
    // The provider's own reading (an engine that adopted an existing bridge records no gateway).
    svc_provider::docker::network_gateway(&network.ipam.unwrap().config.unwrap())
        .unwrap()
        .to_string()
}

fn host_firewall() -> String {
    let output = std::process::Command::new("iptables")
        .arg("-S")
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Egress on docker (decisions §18): an allowlisted address and port is reached, anything else
/// fails within a second; `none` leaves loopback only; the host's firewall is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_egress_allowlist_and_none() {
    let proxy_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The host's own services stand in for the world here, so the operator opens the host on
    // purpose (decisions §30; without it these entries are refused, tests/it/isolation.rs).
    let Some((server, docker)) = docker_server(|c| {
        c.providers.docker.egress_proxy_port = proxy_port;
        c.providers.docker.egress_allow_host = true;
    })
    .await
    else {
        return;
    };
    let before = host_firewall();
    let gateway = bridge_gateway(&docker).await;
    let allowed = host_http_server("allowed").await;
    let denied = host_http_server("denied").await;
    let named = host_http_server("named").await;
    let tls_upstream = host_tls_upstream().await;
    let allow = json!([
        format!("{gateway}:{allowed}"),
        format!("localhost:{named}"),
        "localhost:443"
    ]);
    let id = spawn_docker(
        &server,
        json!({"egress": {"mode": "allowlist", "allow": allow}}),
    )
    .await;
    let shown = server.get(&format!("/sandboxes/{id}")).await.body;
    assert_eq!(shown["egress"]["mode"], "allowlist");
    assert_eq!(shown["egress"]["allow"], allow);
    // Host names go through the egress proxy, which the sandbox is told about.
    let env = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo $HTTP_PROXY"}),
        )
        .await;
    assert_eq!(
        env.body["stdout"],
        format!("http://{gateway}:{proxy_port}\n")
    );
    // A refusal ends nc at once; a dropped connection would hold it for its whole `-w 5`. The
    // bound leaves the exec's own round trip room on a busy machine.
    const REFUSED_AT_ONCE: Duration = Duration::from_secs(4);
    // `request` sent with nc to `address port` inside the sandbox: its output, and how long.
    let send = |request: String, address: String, port: u16| {
        let (server, id) = (&server, id.clone());
        async move {
            let started = std::time::Instant::now();
            let command = format!("printf '{request}' | nc -w 5 {address} {port}");
            let reply = server
                .post(
                    &format!("/sandboxes/{id}/exec"),
                    json!({"command": command}),
                )
                .await;
            let stdout = reply.body["stdout"].as_str().unwrap_or("").to_owned();
            (stdout, started.elapsed())
        }
    };
    let via_proxy = |url: String| {
        send(
            format!("GET {url} HTTP/1.0\\r\\n\\r\\n"),
            gateway.clone(),
            proxy_port,
        )
    };
    let (by_name, _) = via_proxy(format!("http://localhost:{named}/")).await;
    assert!(by_name.ends_with("named"), "{by_name}");
    let (other_port, _) = via_proxy(format!("http://localhost:{denied}/")).await;
    assert!(other_port.starts_with("HTTP/1.1 403"), "{other_port}");
    let (other_name, took) = via_proxy(format!("http://denied.invalid:{named}/")).await;
    assert!(other_name.starts_with("HTTP/1.1 403"), "{other_name}");
    assert!(took < REFUSED_AT_ONCE, "a denied name took {took:?}");
    // The transparent mode: plain HTTP to port 80 anywhere reaches the proxy, which admits it
    // by its Host header (clients that ignore the proxy variables).
    let transparent = |host: String| {
        send(
            format!("GET / HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n"),
            "192.0.2.1".to_owned(),
            80,
        )
    };
    let (by_host, _) = transparent(format!("localhost:{named}")).await;
    assert!(by_host.ends_with("named"), "{by_host}");
    let (refused_host, _) = transparent(format!("denied.invalid:{named}")).await;
    assert!(refused_host.starts_with("HTTP/1.1 403"), "{refused_host}");
    // TLS to port 443 anywhere: admitted by the name in its ClientHello (SNI), and the hello
    // reaches the named server unchanged. Busybox has no TLS client, so nc sends the hello.
    let tls = |name: &str| {
        let hello = client_hello(name);
        let escaped: String = hello.iter().map(|b| format!("\\{b:03o}")).collect();
        (hello, send(escaped, "192.0.2.1".to_owned(), 443))
    };
    let (hello, reply) = tls("localhost");
    let (answer, _) = reply.await;
    assert_eq!(answer, "server hello");
    assert_eq!(tls_upstream.lock().unwrap().as_slice(), [hello]);
    let (_, reply) = tls("denied.invalid");
    let (answer, took) = reply.await;
    assert_eq!(answer, "", "a refused name got an answer");
    assert!(took < REFUSED_AT_ONCE, "a refused name took {took:?}");
    assert_eq!(
        tls_upstream.lock().unwrap().len(),
        1,
        "a refused name reached a server"
    );
    let fetch = |port: u16| {
        let (server, id, gateway) = (&server, id.clone(), gateway.clone());
        async move {
            let started = std::time::Instant::now();
            let reply = server
                .post(
                    &format!("/sandboxes/{id}/exec"),
                    // busybox's static wget crashes on this image; nc speaks the HTTP itself.
                    json!({"command": format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {gateway} {port}")}),
                )
                .await;
            (reply.body, started.elapsed())
        }
    };
    let (ok, _) = fetch(allowed).await;
    assert_eq!(ok["exit_code"], 0, "{ok}");
    assert!(ok["stdout"].as_str().unwrap().ends_with("allowed"), "{ok}");
    let (refused, took) = fetch(denied).await;
    assert_ne!(refused["exit_code"], 0, "{refused}");
    assert!(took < REFUSED_AT_ONCE, "a denied connection took {took:?}");
    let outside = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "nc -w 3 192.0.2.1 25 </dev/null; echo $?"}),
        )
        .await;
    assert_ne!(outside.body["stdout"], "0\n", "{}", outside.body);

    // Inbound, only the host: a preview reaches a server in the allowlisted sandbox, a sibling
    // container on the same bridge does not (no channel in to pull data out).
    let listening = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "httpd -p 8080 -h /tmp"}),
        )
        .await;
    assert_eq!(listening.body["exit_code"], 0, "{}", listening.body);
    let preview = server.get(&format!("/sandboxes/{id}/proxy/8080/")).await;
    assert_eq!(
        preview.status, 404,
        "busybox httpd's answer: {}",
        preview.body
    );
    let address = docker
        .inspect_container(&format!("svc-{id}"), None)
        .await
        .unwrap()
        .network_settings
        .and_then(|n| n.networks)
        .and_then(|networks| networks.into_values().find_map(|n| n.ip_address))
        .unwrap();
    let sibling = spawn_docker(&server, json!({})).await;
    let knocked = server
        .post(
            &format!("/sandboxes/{sibling}/exec"),
            json!({"command": format!("nc -w 2 {address} 8080 </dev/null; echo $?")}),
        )
        .await;
    assert_ne!(knocked.body["stdout"], "0\n", "{}", knocked.body);
    assert_eq!(
        server.delete(&format!("/sandboxes/{sibling}")).await.status,
        200
    );

    let closed = spawn_docker(&server, json!({"egress": {"mode": "none"}})).await;
    let interfaces = server
        .post(
            &format!("/sandboxes/{closed}/exec"),
            json!({"command": "ls /sys/class/net"}),
        )
        .await;
    assert_eq!(interfaces.body["stdout"], "lo\n", "{}", interfaces.body);
    let cut = server
        .post(
            &format!("/sandboxes/{closed}/exec"),
            json!({"command": format!("nc -w 2 {gateway} {allowed} </dev/null")}),
        )
        .await;
    assert_ne!(cut.body["exit_code"], 0, "{}", cut.body);

    // After a restart the proxy tells the sandbox's connections apart again (by the container's
    // `dev.svc.egress` label) and admits and refuses as before.
    let server = server.restart().await;
    for (port, expected) in [(named, "named"), (denied, "HTTP/1.1 403")] {
        let request = format!("GET http://localhost:{port}/ HTTP/1.0\\r\\n\\r\\n");
        let command = format!("printf '{request}' | nc -w 5 {gateway} {proxy_port}");
        let reply = server
            .post(
                &format!("/sandboxes/{id}/exec"),
                json!({"command": command}),
            )
            .await;
        let stdout = reply.body["stdout"].as_str().unwrap_or_default();
        assert!(
            stdout.ends_with(expected) || stdout.starts_with(expected),
            "after a restart, port {port}: {}",
            reply.body
        );
    }
    for sandbox in [&id, &closed] {
        assert_eq!(
            server.delete(&format!("/sandboxes/{sandbox}")).await.status,
            200
        );
    }
    assert_eq!(host_firewall(), before, "the host's firewall changed");
    finish(server, &docker).await;
}

/// Each test here runs on both exec paths, as `<test>::engine` and `<test>::agent`, on the
/// runtime flavor it names.
macro_rules! on_both_paths {
    ($($flavor:ident: [$($test:ident),* $(,)?]),* $(,)?) => {
        $($(
            mod $test {
                on_both_paths!(@test $flavor, engine, $test, Engine);
                on_both_paths!(@test $flavor, agent, $test, Agent);
            }
        )*)*
    };
    (@test current_thread, $name:ident, $test:ident, $path:ident) => {
        #[tokio::test]
        async fn $name() {
            super::$test(super::ExecPath::$path).await;
        }
    };
    (@test multi_thread, $name:ident, $test:ident, $path:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            super::$test(super::ExecPath::$path).await;
        }
    };
}

on_both_paths!(
    current_thread: [
        docker_sandbox_lifecycle_with_labels_and_limits,
        docker_exec_forms_and_deadlines,
        docker_interactive_tty_resize_and_stdin,
        docker_streamed_uploads_are_bounded_and_whole,
        docker_files_and_2_gib_up_and_down_in_flat_memory,
        docker_files_without_a_shell_and_read_only_rootfs,
        docker_sandboxes_survive_a_restart,
        docker_warm_pool_hands_out_started_containers,
    ],
    multi_thread: [
        docker_pause_and_resume,
        docker_client_interactive_exec_and_cp,
        docker_exec_jobs,
        docker_exec_records_survive_a_restart,
        docker_previews_reach_a_web_server_in_the_container,
    ],
);

/// The provider's detail for docker.
async fn docker_detail(server: &TestServer) -> Value {
    let detail = server.get("/providers/docker").await;
    assert_eq!(detail.status, 200, "{}", detail.body);
    detail.body
}

/// The host's PID of a container's main process.
async fn main_pid(docker: &Docker, id: &str) -> i64 {
    docker
        .inspect_container(&container(id), None)
        .await
        .unwrap()
        .state
        .and_then(|s| s.pid)
        .unwrap()
}

/// The fast path's sandboxes (decisions §14): the provider detail and each sandbox name their
/// exec path; each container's agent socket sits alone in a private host directory that no
/// other container mounts; an image with neither a shell nor `sleep` runs commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sandboxes_reach_only_their_own_agent() {
    let Some((server, docker)) = docker_server_on(ExecPath::Agent, |_| {}).await else {
        return;
    };
    let detail = docker_detail(&server).await;
    assert_eq!(detail["config"]["exec_path"], "agent", "{detail}");
    assert_eq!(detail["config"]["agent"], "always", "{detail}");
    assert!(detail["config"]["agent_path"].is_string(), "{detail}");
    let socket_root = PathBuf::from(detail["config"]["agent_socket_dir"].as_str().unwrap());
    let a = spawn_docker(&server, json!({})).await;
    let b = spawn_docker(&server, json!({})).await;
    assert_eq!(
        server.get(&format!("/sandboxes/{a}")).await.body["exec_path"],
        "agent"
    );
    let mock = server.spawn(json!({"provider": "mock"})).await;
    assert!(mock.get("exec_path").is_none(), "{mock}");
    let mut dirs = Vec::new();
    for id in [&a, &b] {
        let inspect = docker
            .inspect_container(&container(id), None)
            .await
            .unwrap();
        let labels = inspect.config.unwrap().labels.unwrap();
        assert_eq!(labels["dev.svc.exec_path"], "agent");
        let dir = PathBuf::from(&labels["dev.svc.agent_dir"]);
        assert!(dir.starts_with(&socket_root), "{dir:?}");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&dir).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o700, "{dir:?} is private");
        let entries: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(entries, vec!["agent.sock".to_owned()]);
        let sources: Vec<String> = inspect
            .mounts
            .unwrap()
            .into_iter()
            .filter_map(|m| m.source)
            .collect();
        assert!(sources.contains(&dir.display().to_string()), "{sources:?}");
        dirs.push((dir, sources));
    }
    assert_ne!(dirs[0].0, dirs[1].0);
    assert!(
        !dirs[0].1.contains(&dirs[1].0.display().to_string()),
        "a mounts only its own"
    );
    assert!(
        !dirs[1].1.contains(&dirs[0].0.display().to_string()),
        "b mounts only its own"
    );
    // Inside, a sandbox sees its own socket and nothing of the other's.
    let seen = server
        .post(
            &format!("/sandboxes/{a}/exec"),
            json!({"command": format!("ls -a /.svc/run; ls {} 2>&1; echo $?", dirs[1].0.display())}),
        )
        .await;
    let stdout = seen.body["stdout"].as_str().unwrap();
    assert!(stdout.starts_with(".\n..\nagent.sock\n"), "{stdout}");
    assert!(
        stdout.trim_end().ends_with('1'),
        "b's directory is not there: {stdout}"
    );
    // A sandbox that swaps its socket for a link to another's reaches nothing: svc follows
    // the link on the host, and checks that the process it reached is this container's agent.
    let b_socket = dirs[1].0.join("agent.sock");
    let swapped = server
        .post(
            &format!("/sandboxes/{a}/exec"),
            json!({"command": format!(
                "rm /.svc/run/agent.sock && ln -s {} /.svc/run/agent.sock && echo swapped",
                b_socket.display()
            )}),
        )
        .await;
    assert_eq!(swapped.body["stdout"], "swapped\n", "{}", swapped.body);
    let refused = server
        .post(
            &format!("/sandboxes/{a}/exec"),
            json!({"command": "touch /tmp/reached-from-a"}),
        )
        .await;
    assert!(
        refused.status.is_server_error(),
        "{}: {}",
        refused.status,
        refused.body
    );
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap()
            .contains("does not lead to its agent"),
        "{}",
        refused.body
    );
    let in_b = server
        .post(
            &format!("/sandboxes/{b}/exec"),
            json!({"command": "ls /tmp/reached-from-a 2>&1; echo $?"}),
        )
        .await;
    assert!(
        in_b.body["stdout"].as_str().unwrap().ends_with("1\n"),
        "{}",
        in_b.body
    );
    // Destroying a sandbox removes its directory.
    assert_eq!(server.delete(&format!("/sandboxes/{a}")).await.status, 200);
    assert!(!dirs[0].0.exists(), "the socket directory is removed");

    // An image of one data file, with no shell and no `sleep`: its container runs, commands run
    // (the only program there is the agent itself) and directories list without a shell.
    let noshell = spawn_docker(&server, json!({"image": "svc-test-noshell:latest"})).await;
    let running = docker
        .inspect_container(&container(&noshell), None)
        .await
        .unwrap();
    assert_eq!(running.state.unwrap().running, Some(true));
    let ran = server
        .post(
            &format!("/sandboxes/{noshell}/exec"),
            json!({"command": "/.svc/svc-agent", "args": ["--version"]}),
        )
        .await;
    assert_eq!(ran.status, 200, "{}", ran.body);
    assert!(
        ran.body["stdout"]
            .as_str()
            .unwrap()
            .contains("(protocol 1)"),
        "{}",
        ran.body
    );
    let listed = server
        .get(&format!("/sandboxes/{noshell}/files/list?path=/data"))
        .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body[0]["name"], "readme.txt", "{}", listed.body);
    finish(server, &docker).await;
}

/// An agent that dies is noticed at once (decisions §14): its sandbox ends `error` with
/// `provider_failed` and event `sandbox.error`, and its container is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_dies_ends_its_sandbox_as_provider_failed() {
    let Some((server, docker)) = docker_server_on(ExecPath::Agent, |_| {}).await else {
        return;
    };
    let id = spawn_docker(&server, json!({})).await;
    let kept = spawn_docker(&server, json!({})).await;
    let mut events = server.events(&format!("?sandbox_id={id}"), None).await;
    // The agent's server is the only child of the container's init.
    let init = main_pid(&docker, &id).await;
    let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).unwrap();
    let server_pid: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(server_pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_for("the sandbox to end", Duration::from_secs(20), || async {
        server.get(&format!("/sandboxes/{id}")).await.body["state"] == "error"
    })
    .await;
    let record = assert_ended(&server, &id, "error", "provider_failed").await;
    assert_eq!(record["state_message"], "the sandbox's agent stopped");
    let mut saw_error = false;
    while let Some(event) = events.next(Duration::from_secs(2)).await {
        if event.data["type"] == "sandbox.error" {
            assert_event_says_why(&event, &record);
            saw_error = true;
            break;
        }
    }
    assert!(saw_error, "sandbox.error was published");
    wait_for(
        "the container to be removed",
        Duration::from_secs(60),
        || async {
            docker
                .inspect_container(&container(&id), None)
                .await
                .is_err()
        },
    )
    .await;
    // One agent's going says nothing about the engine: docker stays healthy.
    assert_eq!(docker_detail(&server).await["healthy"], true);
    // The other sandbox is untouched.
    let ok = server
        .post(
            &format!("/sandboxes/{kept}/exec"),
            json!({"command": "echo ok"}),
        )
        .await;
    assert_eq!(ok.body["stdout"], "ok\n");
    finish(server, &docker).await;
}

/// Compiles a static stand-in for the agent from C: `--version` names `protocol`, and anything
/// else waits forever without serving.
fn fake_agent(dir: &Path, protocol: u32) -> PathBuf {
    let source = dir.join(format!("fake-{protocol}.c"));
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n\
             int main(int c, char **v) {{\n\
               if (c > 1 && !strcmp(v[1], \"--version\")) {{ puts(\"svc-agent 0.0.0 (protocol {protocol})\"); return 0; }}\n\
               for (;;) pause();\n}}\n"
        ),
    )
    .unwrap();
    let binary = dir.join(format!("fake-{protocol}"));
    let built = std::process::Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("a C compiler (cc) builds the stand-in agent");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    binary
}

/// An agent of another protocol stops start-up with `always` (naming
/// `providers.docker.agent_path`) and is passed over with the reason under `auto`; an agent
/// that never answers fails its spawn within the spawn deadline, leaving no container and no
/// socket directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_agents_are_refused_and_leave_nothing() {
    let Some(docker) = engine().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let other = fake_agent(dir.path(), 99);
    let mut config = svc_core::config::Config::default();
    config.database.path = dir.path().join("svc.db").display().to_string();
    config.providers.docker.agent = svc_core::config::DockerAgentMode::Always;
    config.providers.docker.agent_path = other.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let Err(err) = svc::start(config, listener).await else {
        panic!("started with an agent of another protocol");
    };
    let err = format!("{err:#}");
    assert!(err.contains("providers.docker.agent_path"), "{err}");
    assert!(err.contains("speaks protocol 99, svc speaks 1"), "{err}");
    let other_path = other.clone();
    let server = TestServer::start_with(|c| {
        c.providers.docker.enabled = true;
        c.providers.docker.agent_path = other_path;
    })
    .await;
    let detail = docker_detail(&server).await;
    assert_eq!(detail["config"]["exec_path"], "engine", "{detail}");
    assert!(
        detail["config"]["exec_path_reason"]
            .as_str()
            .unwrap()
            .contains("speaks protocol 99"),
        "{detail}"
    );
    let id = spawn_docker(&server, json!({})).await;
    assert_eq!(
        server.get(&format!("/sandboxes/{id}")).await.body["exec_path"],
        "engine"
    );
    finish(server, &docker).await;

    let silent = fake_agent(dir.path(), 1);
    let sockets = dir.path().join("sockets");
    let socket_dir = sockets.clone();
    let server = TestServer::start_with(|c| {
        c.providers.docker.enabled = true;
        c.providers.docker.agent = svc_core::config::DockerAgentMode::Always;
        c.providers.docker.agent_path = silent;
        c.providers.docker.agent_socket_dir = socket_dir;
        c.defaults.spawn_timeout = svc_core::GoDuration::from_secs(2);
    })
    .await;
    let started = std::time::Instant::now();
    let refused = server
        .post("/sandboxes", json!({"provider": "docker", "image": IMAGE}))
        .await;
    assert!(refused.status.is_server_error(), "{}", refused.body);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let listed = server.get("/sandboxes?state=all").await;
    let record = &listed.body.as_array().unwrap()[0];
    assert_eq!(record["state"], "error", "{record}");
    assert_eq!(record["state_reason"], "spawn_failed", "{record}");
    let id = record["id"].as_str().unwrap().to_owned();
    wait_for(
        "the container and its directory to go",
        Duration::from_secs(20),
        || async {
            docker
                .inspect_container(&container(&id), None)
                .await
                .is_err()
                && std::fs::read_dir(&sockets).map_or(true, |mut d| d.next().is_none())
        },
    )
    .await;
    finish(server, &docker).await;
}
