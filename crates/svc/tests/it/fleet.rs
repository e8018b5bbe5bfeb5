//! Several nodes as one (decisions §22): the node-to-node listener, its token, and the worker
//! RPC contract it serves (docs/worker-rpc.md), fenced by sandbox leases.

use reqwest::StatusCode;
use serde_json::{json, Value};

use svc_store::Store;

use crate::harness::TestServer;

const TOKEN: &str = "node-to-node-token-0123456789abcdef";

async fn node() -> TestServer {
    TestServer::start_with(|c| {
        c.worker.rpc.enabled = true;
        c.worker.rpc.token = svc_core::config::Secret::new(TOKEN);
        c.worker.rpc.listen = "127.0.0.1:0".to_owned();
    })
    .await
}

/// One request of the contract, as another node sends it.
async fn rpc(node: &TestServer, params: Value) -> Value {
    let deadline = svc_core::Clock::now(node.clock.as_ref()) + chrono::Duration::minutes(1);
    let mut envelope = json!({"id": "rpc-1", "worker_id": "local", "deadline": deadline});
    envelope
        .as_object_mut()
        .unwrap()
        .extend(params.as_object().unwrap().clone());
    let body = send(node, &envelope).await;
    assert_eq!(body["id"], "rpc-1", "{body}");
    body
}

/// An envelope as it is, with the token: the response envelope (always 200).
async fn send(node: &TestServer, envelope: &Value) -> Value {
    let answer = node
        .client
        .post(format!("{}/rpc", node.rpc.as_ref().unwrap()))
        .bearer_auth(TOKEN)
        .json(envelope)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    answer.json().await.unwrap()
}

#[tokio::test]
async fn the_node_listener_answers_other_nodes_only() {
    let node = node().await;
    let url = format!("{}/rpc", node.rpc.as_ref().unwrap());
    let body = json!({"id": "x", "worker_id": "local", "deadline": "2999-01-01T00:00:00Z",
                      "method": "shutdown", "params": {"drain": true}});
    for token in [None, Some("wrong-token"), Some("")] {
        let mut request = node.client.post(&url).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{token:?}");
        let error: Value = answer.json().await.unwrap();
        assert_eq!(error["code"], "unauthorized");
        assert!(!error.to_string().contains(TOKEN));
    }
    // Nothing was done: the refused shutdown did not drain the node.
    assert_eq!(node.get("/workers/local").await.body["status"], "online");
    // The public API is not served there, even with the token.
    let api = node
        .client
        .get(format!("{}/api/v1/sandboxes", node.rpc.as_ref().unwrap()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::NOT_FOUND);
    // It advertises where it listens.
    assert_eq!(
        node.get("/workers/local").await.body["url"],
        json!(node.rpc.clone().unwrap())
    );
    node.shutdown().await;
    // Off by default: no such listener.
    let single = TestServer::start().await;
    assert!(single.rpc.is_none());
    single.shutdown().await;
}

#[tokio::test]
async fn the_contract_is_served_and_fenced_by_the_sandbox_lease() {
    let node = node().await;
    let sandbox = node.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();

    let status = rpc(
        &node,
        json!({"method": "status", "params": {"sandbox_id": id}}),
    )
    .await;
    assert_eq!(
        (
            status["result"].as_str(),
            status["value"]["status"].as_str()
        ),
        (Some("status"), Some("running")),
        "{status}"
    );
    let unknown = rpc(
        &node,
        json!({"method": "status", "params": {"sandbox_id": "sb-0123456789abcdef"}}),
    )
    .await;
    assert_eq!(unknown["value"]["status"], "missing", "{unknown}");
    let worker = rpc(&node, json!({"method": "heartbeat", "params": {}})).await;
    assert_eq!(
        (worker["result"].as_str(), worker["value"]["id"].as_str()),
        (Some("worker"), Some("local")),
        "{worker}"
    );
    let renewed = rpc(
        &node,
        json!({"method": "renew_lease", "params": {"resource_id": id, "ttl": "2m"}}),
    )
    .await;
    assert_eq!(renewed["result"], "lease", "{renewed}");
    assert_eq!(renewed["value"]["holder_id"], "local");
    let generation = renewed["value"]["generation"].as_u64().unwrap();

    // A stale generation (a node that lost the lease) changes nothing.
    let stale = rpc(
        &node,
        json!({"method": "destroy",
               "params": {"lease": {"resource_id": id, "generation": generation + 1}}}),
    )
    .await;
    assert_eq!(
        (stale["result"].as_str(), stale["value"]["code"].as_str()),
        (Some("error"), Some("lease_conflict")),
        "{stale}"
    );
    let still = rpc(
        &node,
        json!({"method": "status", "params": {"sandbox_id": id}}),
    )
    .await;
    assert_eq!(still["value"]["status"], "running");
    // Addressed to another worker, or past its deadline: refused.
    let mut misaddressed = json!({"id": "rpc-2", "worker_id": "elsewhere",
        "deadline": "2999-01-01T00:00:00Z", "method": "destroy",
        "params": {"lease": {"resource_id": id, "generation": generation}}});
    for (field, value) in [
        ("worker_id", json!("elsewhere")),
        ("deadline", json!("2001-01-01T00:00:00Z")),
    ] {
        misaddressed["worker_id"] = json!("local");
        misaddressed["deadline"] = json!("2999-01-01T00:00:00Z");
        misaddressed[field] = value;
        let answer = send(&node, &misaddressed).await;
        assert_eq!(
            (answer["result"].as_str(), answer["value"]["code"].as_str()),
            (Some("error"), Some("bad_request")),
            "{field}: {answer}"
        );
        assert!(answer["value"]["message"].as_str().unwrap().contains(field));
    }
    let still = rpc(
        &node,
        json!({"method": "status", "params": {"sandbox_id": id}}),
    )
    .await;
    assert_eq!(still["value"]["status"], "running");

    // The current generation removes the runtime.
    let destroyed = rpc(
        &node,
        json!({"method": "destroy",
               "params": {"lease": {"resource_id": id, "generation": generation}}}),
    )
    .await;
    assert_eq!(
        (
            destroyed["result"].as_str(),
            destroyed["value"]["sandbox_id"].as_str()
        ),
        (Some("destroyed"), Some(id.as_str())),
        "{destroyed}"
    );
    let gone = rpc(
        &node,
        json!({"method": "status", "params": {"sandbox_id": id}}),
    )
    .await;
    assert_eq!(gone["value"]["status"], "missing");

    // `spawn` creates the runtime again, for the current generation only.
    let spec = json!({"provider": "mock", "image": "alpine:3", "memory_mb": 256, "vcpus": 1});
    let lease = |generation: u64| json!({"resource_id": id, "generation": generation});
    let refused = rpc(
        &node,
        json!({"method": "spawn", "params": {"lease": lease(generation + 1), "spec": spec}}),
    )
    .await;
    assert_eq!(refused["value"]["code"], "lease_conflict", "{refused}");
    let status = json!({"method": "status", "params": {"sandbox_id": id}});
    assert_eq!(
        rpc(&node, status.clone()).await["value"]["status"],
        "missing"
    );
    let spawned = rpc(
        &node,
        json!({"method": "spawn", "params": {"lease": lease(generation), "spec": spec}}),
    )
    .await;
    assert_eq!(
        (
            spawned["result"].as_str(),
            spawned["value"]["sandbox_id"].as_str()
        ),
        (Some("spawned"), Some(id.as_str())),
        "{spawned}"
    );
    assert_eq!(rpc(&node, status).await["value"]["status"], "running");

    // `shutdown` with `drain` drains the node.
    let drained = rpc(
        &node,
        json!({"method": "shutdown", "params": {"drain": true}}),
    )
    .await;
    assert_eq!(drained["result"], "shutting_down", "{drained}");
    assert_eq!(node.get("/workers/local").await.body["status"], "draining");
    node.shutdown().await;
}

/// Until mutual TLS is built, a node configured for it does not start without it.
#[tokio::test]
async fn a_node_asking_for_tls_it_cannot_have_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = svc_core::config::Config::default();
    config.database.path = dir.path().join("svc.db").display().to_string();
    config.providers.mock.root_dir = dir.path().join("mock");
    config.worker.rpc.enabled = true;
    config.worker.rpc.listen = "127.0.0.1:0".to_owned();
    config.worker.rpc_tls.enabled = true;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let Err(refused) = svc::start(config, listener).await else {
        panic!("a node without the TLS it asks for started");
    };
    assert!(
        format!("{refused:#}").contains("worker.rpc_tls.enabled"),
        "{refused:#}"
    );
}

/// A node shutting down drains itself first: `draining` while its in-flight requests finish,
/// then `offline` (decisions §22).
#[tokio::test]
async fn a_node_drains_itself_while_it_shuts_down() {
    let node = node().await;
    let sandbox = node.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let gate = tempfile::tempdir().unwrap();
    let go = gate.path().join("go");
    // A request still in flight when the shutdown begins: a command that waits for the gate.
    let exec = {
        let (client, url) = (
            node.client.clone(),
            node.url(&format!("/sandboxes/{id}/exec")),
        );
        let command = format!("until [ -e {} ]; do sleep 0.02; done", go.display());
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({"command": command}))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    let store = svc_store::sqlite::SqliteStore::open(node.dir.path().join("svc.db"))
        .await
        .unwrap();
    let status = || async { store.get_worker("local").await.unwrap().unwrap().status };
    crate::harness::wait_for(
        "the command to run",
        std::time::Duration::from_secs(30),
        || async {
            let listed = node.get(&format!("/sandboxes/{id}/execs")).await.body;
            listed.as_array().is_some_and(|execs| !execs.is_empty())
        },
    )
    .await;
    let stopping = tokio::spawn(node.shutdown());
    crate::harness::wait_for(
        "the node to drain itself",
        std::time::Duration::from_secs(30),
        || async { status().await == svc_core::worker::WorkerStatus::Draining },
    )
    .await;
    std::fs::write(&go, b"").unwrap();
    assert_eq!(exec.await.unwrap(), StatusCode::OK);
    let report = stopping.await.unwrap();
    assert!(report.drained);
    assert_eq!(status().await, svc_core::worker::WorkerStatus::Offline);
    store.close().await;
}

/// Every answer about one sandbox names the worker that served it; other answers do not.
#[tokio::test]
async fn sandbox_answers_name_the_worker_that_served_them() {
    let node = TestServer::start_with(|c| c.worker.id = "node-a".to_owned()).await;
    let id = node.spawn(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let served_by = |reply: &crate::harness::Reply| {
        reply
            .headers
            .get("x-svc-worker")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    for path in [
        format!("/sandboxes/{id}"),
        format!("/sandboxes/{id}/execs"),
        "/sandboxes/sb-0123456789abcdef/stats".to_owned(),
    ] {
        let reply = node.get(&path).await;
        assert_eq!(served_by(&reply).as_deref(), Some("node-a"), "{path}");
    }
    let exec = node
        .post(&format!("/sandboxes/{id}/exec"), json!({"command": "true"}))
        .await;
    assert_eq!(served_by(&exec).as_deref(), Some("node-a"));
    assert_eq!(served_by(&node.get("/sandboxes").await), None);
    assert_eq!(served_by(&node.get("/workers").await), None);
    node.shutdown().await;
}

/// Two nodes on one database: a spawn through one is placed on the node with the most free
/// capacity, which creates the runtime over worker RPC and holds its lease; a drained node takes
/// none; with no room anywhere the spawn is refused `no_eligible_worker` (decisions §22).
#[tokio::test]
async fn spawns_are_placed_on_the_node_with_the_most_room() {
    let fleet = |id: &'static str, capacity: u64, database: Option<String>| {
        move |c: &mut svc_core::config::Config| {
            c.worker.id = id.to_owned();
            c.worker.max_sandboxes = capacity;
            c.worker.rpc.enabled = true;
            c.worker.rpc.token = svc_core::config::Secret::new(TOKEN);
            c.worker.rpc.listen = "127.0.0.1:0".to_owned();
            if let Some(database) = database {
                c.database.path = database;
            }
        }
    };
    let a = TestServer::start_with(fleet("node-a", 1, None)).await;
    let database = a.dir.path().join("svc.db").display().to_string();
    let b = TestServer::start_with(fleet("node-b", 5, Some(database))).await;

    // node-a has room for 1, node-b for 5: a spawn through node-a runs on node-b.
    let placed = a.spawn(json!({})).await;
    let id = placed["id"].as_str().unwrap().to_owned();
    assert_eq!(placed["worker_id"], "node-b", "{placed}");
    assert_eq!(placed["state"], "running");
    assert!(
        b.dir.path().join("mock").join(&id).exists(),
        "the runtime is node-b's"
    );
    assert!(!a.dir.path().join("mock").join(&id).exists());
    let ran = b
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo placed"}),
        )
        .await;
    assert_eq!(ran.status, 200, "{}", ran.body);
    assert_eq!(ran.body["stdout"], "placed\n");
    let lease = a.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(lease.body["worker_id"], "node-b");

    // Drained, node-b takes nothing: the next spawn stays on node-a, and then no node has room.
    b.call(reqwest::Method::POST, "/admin/workers/node-b/drain", None)
        .await;
    let local = a.spawn(json!({})).await;
    assert_eq!(local["worker_id"], "node-a", "{local}");
    let full = a.post("/sandboxes", json!({})).await;
    let message = full.assert_error(429, "resource_limit");
    assert!(message.contains("no_eligible_worker"), "{message}");

    // Undrained, node-b takes the next one again.
    b.call(reqwest::Method::POST, "/admin/workers/node-b/undrain", None)
        .await;
    assert_eq!(a.spawn(json!({})).await["worker_id"], "node-b");
    b.shutdown().await;
    a.shutdown().await;
}
