//! Pool mode (decisions §15) through the HTTP API: logical sandboxes as workspaces in shared
//! pool VMs, on the mock provider (paths relative to the workspace, since the mock's commands
//! are host processes) and on a real Docker engine.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use svc_core::config::{Config, SpawnOverflow};
use svc_core::GoDuration;

use crate::harness::{wait_for, Reply, TestServer};

/// Users as a pool sees them: every call names its user.
pub(crate) struct Users<'a> {
    pub(crate) server: &'a TestServer,
}

impl Users<'_> {
    pub(crate) async fn call(
        &self,
        user: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        self.server
            .call_as(&[("X-User-ID", user)], method, path, body)
            .await
    }

    pub(crate) async fn spawn(&self, user: &str) -> Reply {
        self.call(user, Method::POST, "/sandboxes", Some(json!({})))
            .await
    }

    pub(crate) async fn spawned(&self, user: &str) -> String {
        let reply = self.spawn(user).await;
        assert_eq!(reply.status, 201, "{user}: {}", reply.body);
        reply.body["id"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn exec(&self, user: &str, id: &str, command: &str) -> Reply {
        self.call(
            user,
            Method::POST,
            &format!("/sandboxes/{id}/exec"),
            Some(json!({ "command": command })),
        )
        .await
    }

    async fn write(&self, user: &str, id: &str, path: &str, content: &str) -> Reply {
        self.call(
            user,
            Method::POST,
            &format!("/sandboxes/{id}/files"),
            Some(json!({ "path": path, "content": content })),
        )
        .await
    }

    async fn read(&self, user: &str, id: &str, path: &str) -> (u16, String) {
        let response = self
            .server
            .client
            .get(
                self.server
                    .url(&format!("/sandboxes/{id}/files?path={path}")),
            )
            .header("X-User-ID", user)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    /// Alice's secret, through the file API.
    async fn write_secret(&self, alice: &str) {
        let reply = self
            .write(
                "alice",
                alice,
                "/workspace/alice/secret.txt",
                "alice's secret",
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }

    async fn destroy(&self, user: &str, id: &str) {
        let reply = self
            .call(user, Method::DELETE, &format!("/sandboxes/{id}"), None)
            .await;
        assert!(reply.status.is_success(), "{}", reply.body);
    }
}

async fn status(server: &TestServer) -> Value {
    let reply = server.get("/pool/status").await;
    assert_eq!(reply.status, 200);
    reply.body
}

pub(crate) fn pool(c: &mut Config, max_vms: u32, max_users: u32) {
    c.pool.enabled = true;
    c.pool.max_vms = max_vms;
    c.pool.max_users_per_vm = max_users;
    c.pool.idle_timeout = GoDuration::from_secs(1);
}

/// The mock's workspaces must be reachable by their users: the test's temp directory is
/// private to root.
pub(crate) async fn mock_pool(adjust: impl FnOnce(&mut Config)) -> TestServer {
    let server = TestServer::start_with(|c| {
        c.providers.default = "mock".into();
        adjust(c);
    })
    .await;
    std::fs::set_permissions(server.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    server
}

fn running_as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[tokio::test]
async fn users_share_a_vm_but_not_their_files_on_mock() {
    let server = mock_pool(|c| {
        pool(c, 1, 2);
        // Long enough that "kept for a while" is seen on a busy machine too.
        c.pool.idle_timeout = GoDuration::from_secs(10);
    })
    .await;
    let users = Users { server: &server };
    assert_eq!(
        status(&server).await,
        json!({"enabled": true, "vms": 0, "max_vms": 1, "total_users": 0, "max_users_per_vm": 2})
    );
    let alice = users.spawned("alice").await;
    let again = users.spawn("alice").await;
    let message = again.assert_error(409, "conflict");
    assert!(
        message.contains(&alice),
        "names the existing sandbox: {message}"
    );
    let bob = users.spawned("bob").await;
    assert_eq!(status(&server).await["vms"], 1, "bob sits in alice's VM");
    assert_eq!(status(&server).await["total_users"], 2);
    let leases = server.get("/diagnostics").await.body["leases"].clone();
    assert_eq!(
        leases["active"], 3,
        "one per sandbox and one for the VM: {leases}"
    );
    let full = users.spawn("carol").await;
    let message = full.assert_error(503, "unavailable");
    assert!(message.contains("pool.max_vms"), "{message}");

    // Files through the API.
    users.write_secret(&alice).await;
    assert_eq!(
        users
            .read("alice", &alice, "/workspace/alice/secret.txt")
            .await,
        (200, "alice's secret".to_owned())
    );
    for path in [
        "/workspace/alice/secret.txt",
        "/workspace/bob/../alice/secret.txt",
        "/etc/passwd",
    ] {
        let (code, body) = users.read("bob", &bob, path).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert!(
            body.contains("/workspace/bob"),
            "names the workspace: {body}"
        );
        assert!(!body.contains("alice's secret"), "{body}");
    }
    let reply = users
        .write("bob", &bob, "/workspace/alice/secret.txt", "overwritten")
        .await;
    reply.assert_error(400, "bad_request");
    assert_eq!(
        users
            .read("alice", &alice, "/workspace/alice/secret.txt")
            .await
            .1,
        "alice's secret"
    );

    // Through commands: each runs in its own workspace as its own user.
    let pwd = users.exec("alice", &alice, "pwd; echo $HOME; id -u").await;
    let lines: Vec<&str> = pwd.body["stdout"].as_str().unwrap().lines().collect();
    assert!(lines[0].ends_with("/workspace/alice"), "{lines:?}");
    assert!(lines[1].ends_with("/workspace/alice"), "{lines:?}");
    assert_eq!(
        users.exec("alice", &alice, "cat secret.txt").await.body["stdout"],
        "alice's secret"
    );
    if running_as_root() {
        let bob_id = users.exec("bob", &bob, "id -u").await.body["stdout"].clone();
        assert_ne!(
            bob_id.as_str().unwrap().trim(),
            lines[2],
            "a user per workspace"
        );
        let peek = users
            .exec(
                "bob",
                &bob,
                "cat ../alice/secret.txt; echo x > ../alice/planted",
            )
            .await;
        assert_ne!(peek.body["exit_code"], 0, "{}", peek.body);
        assert!(!peek.body["stdout"].as_str().unwrap().contains("secret"));
        assert!(!server
            .mock_root()
            .read_dir()
            .unwrap()
            .flatten()
            .any(|vm| vm.path().join("workspace/alice/planted").exists()));
    } else {
        eprintln!("SKIPPED (loudly): user switching needs root; exec isolation not checked");
    }

    // Symlinks out of the workspace are not followed by the file API.
    let linked = users
        .exec(
            "bob",
            &bob,
            "ln -s ../alice/secret.txt leak && ln -s ../alice door",
        )
        .await;
    assert_eq!(linked.body["exit_code"], 0, "{}", linked.body);
    let (code, body) = users.read("bob", &bob, "/workspace/bob/leak").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("symlink"), "{body}");
    users
        .write("bob", &bob, "/workspace/bob/door/planted", "x")
        .await
        .assert_error(400, "bad_request");
    // Listing the default directory lists the workspace.
    let listed = users
        .call(
            "bob",
            Method::GET,
            &format!("/sandboxes/{bob}/files/list"),
            None,
        )
        .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let names: Vec<&str> = listed
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["door", "leak"]);

    // The VM's console would show every user's commands.
    users
        .call("bob", Method::GET, &format!("/sandboxes/{bob}/logs"), None)
        .await
        .assert_error(400, "bad_request");

    // A freed seat is taken again in the same VM; an emptied VM goes after the grace period.
    users.destroy("alice", &alice).await;
    assert_eq!(status(&server).await["total_users"], 1);
    let carol = users.spawned("carol").await;
    assert_eq!(status(&server).await["vms"], 1);
    assert_eq!(
        users
            .read("carol", &carol, "/workspace/carol/secret.txt")
            .await
            .0,
        404,
        "a fresh workspace"
    );
    users.destroy("bob", &bob).await;
    users.destroy("carol", &carol).await;
    assert_eq!(status(&server).await["total_users"], 0);
    let vm_dirs = || {
        server
            .mock_root()
            .read_dir()
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .count()
    };
    assert_eq!(vm_dirs(), 1, "kept for the next user for a while");
    wait_for(
        "the idle pool VM to go",
        Duration::from_secs(60),
        || async { status(&server).await["vms"] == 0 && vm_dirs() == 0 },
    )
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_full_pool_queues_when_asked_and_keeps_seats_across_restarts() {
    let server = mock_pool(|c| {
        pool(c, 1, 1);
        c.pool.overflow = SpawnOverflow::Queue;
        c.defaults.spawn_queue_timeout = GoDuration::from_secs(20);
    })
    .await;
    let users = Users { server: &server };
    let alice = users.spawned("alice").await;
    users
        .write("alice", &alice, "/workspace/alice/notes.txt", "kept")
        .await;
    let waiting = {
        let request = server
            .client
            .post(server.url("/sandboxes"))
            .header("X-User-ID", "bob")
            .json(&json!({}));
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "bob waits for a seat");
    users.destroy("alice", &alice).await;
    let bob = TestServer::reply(waiting.await.unwrap()).await;
    assert_eq!(bob.status, 201, "{}", bob.body);
    let bob = bob.body["id"].as_str().unwrap().to_owned();
    users
        .write("bob", &bob, "/workspace/bob/notes.txt", "bob's")
        .await;

    // After a restart the pool finds its VM and bob's workspace again.
    let server = server.restart().await;
    let users = Users { server: &server };
    assert_eq!(status(&server).await["total_users"], 1);
    assert_eq!(
        users.exec("bob", &bob, "cat notes.txt").await.body["stdout"],
        "bob's"
    );
    server.shutdown().await;
}

/// Pool VMs of one server on the engine (their runtime carries the pool label and the
/// server's worker ID).
async fn pool_containers(docker: &bollard::Docker, server: &TestServer) -> usize {
    docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "label".to_owned(),
                vec![
                    "dev.svc.pool=vm".to_owned(),
                    format!("dev.svc.worker={}", server.config.worker.id),
                ],
            )])),
            ..Default::default()
        }))
        .await
        .unwrap()
        .len()
}

#[tokio::test]
async fn users_share_a_container_but_not_their_files_on_docker() {
    users_share_a_container_but_not_their_files_on(crate::docker::ExecPath::Engine).await;
}

#[tokio::test]
async fn users_share_a_container_but_not_their_files_on_docker_agents() {
    users_share_a_container_but_not_their_files_on(crate::docker::ExecPath::Agent).await;
}

async fn users_share_a_container_but_not_their_files_on(path: crate::docker::ExecPath) {
    let Some(docker) = crate::docker::engine().await else {
        return;
    };
    let Some(exec_path) = crate::docker::exec_path_setting(path) else {
        return;
    };
    let server = TestServer::start_with(|c| {
        c.providers.docker.enabled = true;
        exec_path(c);
        c.pool.provider = "docker".into();
        c.pool.image = crate::docker::IMAGE.into();
        c.worker.id = format!("pool-{}", svc_core::SandboxId::generate());
        pool(c, 2, 2);
    })
    .await;
    let users = Users { server: &server };
    let alice = users.spawned("alice").await;
    let bob = users.spawned("bob").await;
    assert_eq!(status(&server).await["vms"], 1, "one container for both");
    assert_eq!(pool_containers(&docker, &server).await, 1);
    let sandbox = users
        .call("alice", Method::GET, &format!("/sandboxes/{alice}"), None)
        .await
        .body;
    assert_eq!(sandbox["provider"], "docker");
    let expected_path = match path {
        crate::docker::ExecPath::Engine => "engine",
        crate::docker::ExecPath::Agent => "agent",
    };
    assert_eq!(sandbox["exec_path"], expected_path, "{sandbox}");
    assert_eq!(sandbox["image"], crate::docker::IMAGE);
    users
        .call(
            "alice",
            Method::POST,
            "/sandboxes",
            Some(json!({"image": "alpine:3.19"})),
        )
        .await
        .assert_error(400, "bad_request");

    users.write_secret(&alice).await;
    // The file the API wrote belongs to alice: her commands may change it.
    let own = users
        .exec(
            "alice",
            &alice,
            "echo more >> secret.txt && cat secret.txt && pwd && echo $HOME",
        )
        .await;
    assert_eq!(own.body["exit_code"], 0, "{}", own.body);
    assert_eq!(
        own.body["stdout"],
        "alice's secretmore\n/workspace/alice\n/workspace/alice\n"
    );
    let mut ids = Vec::new();
    for (user, id) in [("alice", &alice), ("bob", &bob)] {
        let reply = users.exec(user, id, "id -u").await;
        ids.push(reply.body["stdout"].as_str().unwrap().trim().to_owned());
    }
    assert_ne!(ids[0], ids[1], "a user per workspace: {ids:?}");
    assert!(
        ids.iter().all(|id| id != "0" && !id.is_empty()),
        "not root: {ids:?}"
    );

    for command in [
        "cat /workspace/alice/secret.txt",
        "ls /workspace/alice",
        "echo x > /workspace/alice/planted",
        "ls /workspace",
    ] {
        let reply = users.exec("bob", &bob, command).await;
        assert_ne!(reply.body["exit_code"], 0, "{command}: {}", reply.body);
        assert!(
            !reply.body["stdout"].as_str().unwrap().contains("secret"),
            "{command}: {}",
            reply.body
        );
    }
    let (code, body) = users.read("bob", &bob, "/workspace/alice/secret.txt").await;
    assert_eq!(code, 400, "{body}");
    let linked = users
        .exec(
            "bob",
            &bob,
            "ln -s /workspace/alice/secret.txt leak && ln -s /workspace/alice door",
        )
        .await;
    assert_eq!(linked.body["exit_code"], 0, "{}", linked.body);
    let (code, body) = users.read("bob", &bob, "/workspace/bob/leak").await;
    assert_eq!(code, 400, "{body}");
    users
        .write("bob", &bob, "/workspace/bob/door/planted", "x")
        .await
        .assert_error(400, "bad_request");
    // A large write meets the refusal too, at once: the script ends before its input does,
    // which neither a broken pipe (the agent) nor the engine's attach stream may hide.
    let large = "x".repeat(4 << 20);
    tokio::time::timeout(
        Duration::from_secs(60),
        users.write("bob", &bob, "/workspace/bob/door/planted", &large),
    )
    .await
    .expect("a refused large write answers before the engine's 120 s timeout")
    .assert_error(400, "bad_request");
    assert_eq!(
        users.exec("alice", &alice, "ls").await.body["stdout"],
        "secret.txt\n",
        "nothing planted"
    );

    // The container outlives a user, and goes once the last one has left.
    users.destroy("alice", &alice).await;
    assert_eq!(status(&server).await["total_users"], 1);
    assert_eq!(pool_containers(&docker, &server).await, 1);
    users.destroy("bob", &bob).await;
    wait_for(
        "the idle pool container to go",
        Duration::from_secs(20),
        || async { pool_containers(&docker, &server).await == 0 },
    )
    .await;
    assert_eq!(status(&server).await["vms"], 0);
    server.shutdown().await;
}

/// On a microVM provider the agent inside the guest switches users: the same isolation as on
/// docker, in a QEMU guest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_share_a_microvm_but_not_their_files_on_qemu() {
    let Some(assets) = crate::microvm::assets() else {
        return;
    };
    let server = TestServer::start_with(|c| {
        c.providers.qemu = assets.qemu_config(&c.providers.mock.root_dir.with_file_name("qemu"));
        c.pool.provider = "qemu".into();
        c.pool.image = crate::docker::IMAGE.into();
        c.pool.memory_mb = 256;
        c.pool.vcpus = 1;
        pool(c, 1, 2);
    })
    .await;
    let users = Users { server: &server };
    let alice = users.spawned("alice").await;
    let bob = users.spawned("bob").await;
    assert_eq!(status(&server).await["vms"], 1);
    users.write_secret(&alice).await;
    let own = users
        .exec("alice", &alice, "cat secret.txt; echo; pwd; id -u")
        .await;
    let out = own.body["stdout"].as_str().unwrap().to_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..2],
        ["alice's secret", "/workspace/alice"],
        "{}",
        own.body
    );
    let peek = users
        .exec("bob", &bob, "id -u; cat /workspace/alice/secret.txt")
        .await;
    assert_ne!(peek.body["exit_code"], 0, "{}", peek.body);
    let bob_out = peek.body["stdout"].as_str().unwrap();
    assert!(!bob_out.contains("alice's secret"), "{}", peek.body);
    assert_ne!(bob_out.trim(), lines[2], "a user per workspace");
    users.destroy("alice", &alice).await;
    users.destroy("bob", &bob).await;
    wait_for(
        "the idle pool VM to go",
        Duration::from_secs(20),
        || async {
            status(&server).await["vms"] == 0
                && std::fs::read_dir(&server.config.providers.qemu.data_dir).map_or(true, |dir| {
                    // The VM's own directory; the shared initramfs stays.
                    !dir.flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with("sb-"))
                })
        },
    )
    .await;
    server.shutdown().await;
}
