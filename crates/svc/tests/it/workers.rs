//! The worker registry and sandbox leases over HTTP (interface parts 5–6; decisions §11): the
//! server registers itself, heartbeats, goes stale and offline; a lease another worker holds
//! fences the sandbox.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use svc_core::worker::{LeaseAcquire, WorkerStatus};
use svc_core::GoDuration;
use svc_store::sqlite::SqliteStore;
use svc_store::Store;

use crate::harness::{assert_schema, wait_for, TestServer};

/// The server's store, opened a second time (another process on the same file would).
async fn second_store(server: &TestServer) -> SqliteStore {
    SqliteStore::open(server.dir.path().join("svc.db"))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_server_registers_itself_goes_stale_and_goes_offline_at_shutdown() {
    let server = TestServer::start_with(|c| {
        c.defaults.max_sandboxes = 7;
        c.worker.heartbeat_interval = GoDuration::from_secs(3600);
    })
    .await;
    let listed = server.get("/workers").await;
    assert_eq!(listed.status, 200);
    let workers = listed.body.as_array().unwrap();
    assert_eq!(workers.len(), 1);
    let local = &workers[0];
    assert_schema("Worker", local);
    assert_eq!(local["id"], "local");
    assert_eq!(local["status"], "online");
    assert_eq!(local["stale"], false);
    assert_eq!(
        local["capabilities"],
        json!(["api", "single_node", "spawn", "exec", "files"])
    );
    assert!(local["providers"]
        .as_array()
        .unwrap()
        .contains(&json!("mock")));
    assert_eq!(local["capacity"]["max_sandboxes"], 7);
    assert!(!local["hostname"].as_str().unwrap().is_empty());
    assert_eq!(server.get("/workers/local").await.body, *local);
    server
        .get("/workers/nobody")
        .await
        .assert_error(404, "not_found");
    // No heartbeat within worker.stale_after (90s): stale, still online.
    server.clock.advance(Duration::from_secs(91));
    let stale = server.get("/workers/local").await.body;
    assert_eq!(
        (stale["stale"].clone(), stale["status"].clone()),
        (json!(true), json!("online"))
    );
    // The admin alias records a heartbeat as if the worker had sent it.
    let repaired = server
        .call(
            Method::POST,
            "/admin/workers/local/heartbeat",
            Some(
                json!({"hostname": "h", "status": "online", "providers": ["mock"],
                        "capabilities": ["api"], "capacity": {"max_sandboxes": 3}}),
            ),
        )
        .await;
    assert_eq!(repaired.status, 200, "{}", repaired.body);
    assert_eq!(repaired.body["stale"], false);
    assert_eq!(repaired.body["capacity"]["max_sandboxes"], 3);
    server
        .call(
            Method::POST,
            "/admin/workers/a%20b/heartbeat",
            Some(json!({})),
        )
        .await
        .assert_error(400, "bad_request");
    let dir = std::sync::Arc::clone(&server.dir);
    server.shutdown().await;
    let store = SqliteStore::open(dir.path().join("svc.db")).await.unwrap();
    let after = store.get_worker("local").await.unwrap().unwrap();
    assert_eq!(
        after.status,
        WorkerStatus::Offline,
        "shutdown records the worker offline"
    );
    store.close().await;
}

#[tokio::test]
async fn the_heartbeat_loop_refreshes_the_record_and_renews_held_leases() {
    let server = TestServer::start_with(|c| {
        c.worker.heartbeat_interval = GoDuration::from_millis(50);
        c.worker.stale_after = GoDuration::from_secs(5);
        c.worker.lease_ttl = GoDuration::from_secs(10);
    })
    .await;
    let sandbox = server.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    assert_eq!(sandbox["worker_id"], "local");
    let store = second_store(&server).await;
    let lease = store.get_lease(&id).await.unwrap().unwrap();
    assert_eq!((lease.holder_id.as_str(), lease.generation), ("local", 1));
    let first_expiry = lease.expires_at;
    server.clock.advance(Duration::from_secs(8));
    wait_for(
        "a heartbeat after the clock moved",
        Duration::from_secs(5),
        || async {
            let worker = server.get("/workers/local").await.body;
            let renewed = store.get_lease(&id).await.unwrap().unwrap().expires_at;
            worker["stale"] == false && renewed > first_expiry
        },
    )
    .await;
    store.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_lease_held_by_another_worker_fences_the_sandbox() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let store = second_store(&server).await;
    // Our lease (60s) lapses; another worker takes the sandbox over.
    let later = svc_core::Clock::now(server.clock.as_ref()) + chrono::Duration::seconds(61);
    let taken = store
        .acquire_lease(&id, "elsewhere", Duration::from_secs(600), later)
        .await
        .unwrap();
    assert!(
        matches!(taken, LeaseAcquire::Acquired(ref l) if l.generation == 2),
        "{taken:?}"
    );
    server.clock.advance(Duration::from_secs(61));
    let message = server
        .delete(&format!("/sandboxes/{id}"))
        .await
        .assert_error(409, "lease_conflict");
    assert!(message.contains("elsewhere"), "{message}");
    server
        .post(&format!("/sandboxes/{id}/exec"), json!({"command": "true"}))
        .await
        .assert_error(409, "lease_conflict");
    // Nothing changed: the record, the runtime and the lease are as they were.
    let record = server.get(&format!("/sandboxes/{id}")).await.body;
    assert_eq!(record["state"], "running");
    assert!(
        server.mock_root().join(&id).is_dir(),
        "the runtime is untouched"
    );
    assert_eq!(
        store.get_lease(&id).await.unwrap().unwrap().holder_id,
        "elsewhere"
    );
    // Released, the sandbox is ours to destroy again (a new generation).
    assert!(store.release_lease(&id, "elsewhere", later).await.unwrap());
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    let lease = store.get_lease(&id).await.unwrap().unwrap();
    assert_eq!((lease.holder_id.as_str(), lease.generation), ("local", 3));
    store.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_provider_only_other_workers_run_is_placed_there_and_refused() {
    let server =
        TestServer::start_with(|c| c.worker.heartbeat_interval = GoDuration::from_secs(3600)).await;
    let admission = |provider: &'static str| {
        let server = &server;
        async move {
            server
                .post("/sandboxes/admission", json!({"provider": provider}))
                .await
        }
    };
    // Nobody offers it: 400 naming the enabled providers.
    admission("firecracker")
        .await
        .assert_error(400, "bad_request");
    let heartbeat = json!({"hostname": "far", "status": "online", "providers": ["firecracker"],
                           "capabilities": ["spawn"], "capacity": {"max_sandboxes": 1}});
    let saved = server
        .call(
            Method::POST,
            "/admin/workers/far/heartbeat",
            Some(heartbeat.clone()),
        )
        .await;
    assert_eq!(saved.status, 200, "{}", saved.body);
    let decision = admission("firecracker").await;
    assert_eq!(decision.status, 200, "{}", decision.body);
    assert_eq!(decision.body["allowed"], false);
    assert_eq!(decision.body["reason"], "remote_worker_rpc_unavailable");
    assert_eq!(decision.body["queueable"], false);
    let mut limits = server.events("?types=resource.limit", None).await;
    let message = server
        .post("/sandboxes", json!({"provider": "firecracker"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(
        message.contains("remote_worker_rpc_unavailable"),
        "{message}"
    );
    let event = limits.until("resource.limit", Duration::from_secs(5)).await;
    assert_eq!(
        event.last().unwrap().data["data"]["reason"],
        "remote_worker_rpc_unavailable"
    );
    // The only offering worker is full: no eligible worker.
    let store = second_store(&server).await;
    let local = server.spawn(json!({})).await;
    let local_id = svc_core::SandboxId::parse(local["id"].as_str().unwrap()).unwrap();
    let busy = svc_core::sandbox::Sandbox {
        id: svc_core::SandboxId::generate(),
        worker_id: Some("far".to_owned()),
        provider: "firecracker".to_owned(),
        ..store.get_sandbox(&local_id).await.unwrap().unwrap()
    };
    store.insert_sandbox(&busy).await.unwrap();
    assert_eq!(
        admission("firecracker").await.body["reason"],
        "no_eligible_worker"
    );
    // A worker that stopped heartbeating is not offered: 400 again.
    server.clock.advance(Duration::from_secs(91));
    admission("firecracker")
        .await
        .assert_error(400, "bad_request");
    assert_eq!(
        admission("mock").await.body["allowed"],
        true,
        "local providers stay here"
    );
    store.close().await;
    server.shutdown().await;
}
