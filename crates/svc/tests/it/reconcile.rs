//! Reconciliation at start-up (decisions §11): runtimes the store does not know are adopted,
//! records whose runtime vanished or stopped are ended, each with a `reconcile.action` event.
//! (The mock provider's runtimes cannot stop short of vanishing; the stopped case runs on
//! Docker, in `docker.rs`, and below HTTP in the control plane's tests.)

use serde_json::{json, Value};

use crate::harness::{SseMessage, TestServer};
use crate::lifecycle::{assert_ended, assert_event_says_why};

/// Every event in the server's history (replayed from an ID it never issued).
pub(crate) async fn history(server: &TestServer) -> Vec<SseMessage> {
    let mut events = server.events("", Some("ev-none")).await;
    let mut seen = Vec::new();
    // The replay comes at once; the gap only ends the read, so it is generous.
    while let Some(event) = events.next(std::time::Duration::from_secs(2)).await {
        seen.push(event);
    }
    seen
}

pub(crate) fn reconcile_actions(events: &[SseMessage]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e.data["type"] == "reconcile.action")
        .map(|e| e.data.clone())
        .collect()
}

#[tokio::test]
async fn a_runtime_the_store_does_not_know_is_adopted() {
    let first = TestServer::start().await;
    let dir = std::sync::Arc::clone(&first.dir);
    let db = dir.path().join("svc.db");
    let backup = dir.path().join("backup.db");
    // A backup taken before the sandbox existed (the store is checkpointed at shutdown).
    let first = {
        let config = first.config.clone();
        first.shutdown().await;
        std::fs::copy(&db, &backup).unwrap();
        TestServer::start_with(|c| *c = config).await
    };
    let made = first.spawn(json!({"owner_id": "alice"})).await;
    let id = made["id"].as_str().unwrap().to_owned();
    let config = first.config.clone();
    first.shutdown().await;
    // The backup is restored: the store no longer knows the running sandbox.
    std::fs::copy(&backup, &db).unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("svc.db{suffix}")));
    }
    let second = TestServer::start_with(|c| *c = config).await;
    let adopted = second.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(adopted.status, 200, "{}", adopted.body);
    assert_eq!(adopted.body["state"], "running");
    assert_eq!(
        adopted.body["owner_id"], "alice",
        "from the runtime's labels"
    );
    assert_eq!(adopted.body["worker_id"], "local");
    let actions = reconcile_actions(&history(&second).await);
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["sandbox_id"], id.as_str());
    assert_eq!(
        actions[0]["data"],
        json!({"action": "adopted_runtime", "provider": "mock", "image": made["image"]})
    );
    // It is a sandbox like any other: commands run, destroy removes the runtime.
    let ran = second
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo adopted"}),
        )
        .await;
    assert_eq!(ran.body["stdout"], "adopted\n", "{}", ran.body);
    assert_eq!(second.delete(&format!("/sandboxes/{id}")).await.status, 200);
    assert!(!dir.path().join("mock").join(&id).exists());
    second.shutdown().await;
}

#[tokio::test]
async fn another_deployments_runtimes_are_left_alone() {
    let first = TestServer::start().await;
    let made = first.spawn(json!({})).await;
    let id = made["id"].as_str().unwrap().to_owned();
    // A second deployment (its own store) on the same runtimes, as on a shared engine.
    let root = first.mock_root();
    let second = TestServer::start_with(|c| c.providers.mock.root_dir = root.clone()).await;
    second
        .get(&format!("/sandboxes/{id}"))
        .await
        .assert_error(404, "not_found");
    assert!(reconcile_actions(&history(&second).await).is_empty());
    assert!(root.join(&id).is_dir());
    second.shutdown().await;
    first.shutdown().await;
}

#[tokio::test]
async fn a_record_whose_runtime_vanished_is_ended_as_destroyed() {
    let server = TestServer::start().await;
    let kept = server.spawn(json!({})).await;
    let lost = server.spawn(json!({})).await;
    let lost_id = lost["id"].as_str().unwrap().to_owned();
    let root = server.mock_root();
    // The runtime disappears (while svc runs; the restart's reconciliation finds it gone).
    std::fs::remove_dir_all(root.join(&lost_id)).unwrap();
    std::fs::remove_file(root.join(format!("{lost_id}.json"))).unwrap();
    let server = server.restart().await;
    let record = assert_ended(&server, &lost_id, "destroyed", "runtime_vanished").await;
    assert_eq!(
        record["state_message"],
        "the runtime was gone from provider mock"
    );
    let kept_record = server
        .get(&format!("/sandboxes/{}", kept["id"].as_str().unwrap()))
        .await
        .body;
    assert_eq!(
        kept_record["state"], "running",
        "a present runtime is left alone"
    );
    let events = history(&server).await;
    let actions = reconcile_actions(&events);
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["sandbox_id"], lost_id.as_str());
    assert_eq!(actions[0]["data"]["action"], "marked_destroyed");
    let destroyed = events
        .iter()
        .find(|e| e.data["type"] == "sandbox.destroyed" && e.data["sandbox_id"] == lost_id.as_str())
        .expect("a sandbox.destroyed event");
    assert_event_says_why(destroyed, &record);
    server.shutdown().await;
}
