//! `GET /events`: framing, payloads, filters and `Last-Event-ID` replay.

use std::time::Duration;

use serde_json::json;

use crate::harness::TestServer;

const WITHIN: Duration = Duration::from_secs(5);

#[tokio::test]
async fn lifecycle_events_in_order_with_payloads() {
    let server = TestServer::start().await;
    let mut events = server.events("", None).await;
    let sandbox = server
        .spawn(json!({"owner_id": "alice", "image": "busybox"}))
        .await;
    let id = sandbox["id"].as_str().unwrap();
    server.delete(&format!("/sandboxes/{id}")).await;
    let seen = events.until("sandbox.destroyed", WITHIN).await;
    let types: Vec<_> = seen
        .iter()
        .map(|e| e.data["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types,
        ["sandbox.created", "sandbox.running", "sandbox.destroyed"]
    );
    for event in &seen {
        assert_eq!(event.data["sandbox_id"], id);
        assert_eq!(
            event.id.as_deref(),
            event.data["id"].as_str(),
            "SSE id matches the event id"
        );
        assert!(event.data["timestamp"].as_str().unwrap().ends_with('Z'));
        let data = &event.data["data"];
        assert_eq!(data["provider"], "mock");
        assert_eq!(data["image"], "busybox");
        assert_eq!(data["owner_id"], "alice");
        assert_eq!(data["tenant_id"], "default");
        assert_eq!(data["worker_id"], "local");
    }
    // A second destroy publishes nothing more.
    server.delete(&format!("/sandboxes/{id}")).await;
    assert!(events.next(Duration::from_millis(300)).await.is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn filters_by_type_and_sandbox() {
    let server = TestServer::start().await;
    let first = server.spawn(json!({})).await;
    let first_id = first["id"].as_str().unwrap().to_owned();
    let mut by_type = server
        .events("?types=sandbox.destroyed,sandbox.error", None)
        .await;
    let mut by_sandbox = server
        .events(&format!("?sandbox_id={first_id}"), None)
        .await;
    let second = server.spawn(json!({})).await;
    let second_id = second["id"].as_str().unwrap();
    server.delete(&format!("/sandboxes/{second_id}")).await;
    server.delete(&format!("/sandboxes/{first_id}")).await;

    let event = by_type.next(WITHIN).await.unwrap();
    assert_eq!(
        (
            event.data["type"].as_str().unwrap(),
            event.data["sandbox_id"].as_str().unwrap()
        ),
        ("sandbox.destroyed", second_id)
    );
    let event = by_type.next(WITHIN).await.unwrap();
    assert_eq!(event.data["sandbox_id"], first_id.as_str());

    let event = by_sandbox.next(WITHIN).await.unwrap();
    assert_eq!(event.data["sandbox_id"], first_id.as_str());
    assert_eq!(event.data["type"], "sandbox.destroyed");
    server
        .get("/events?types=sandbox.nope")
        .await
        .assert_error(400, "bad_request");
    server.shutdown().await;
}

#[tokio::test]
async fn last_event_id_replays_newer_history() {
    let server = TestServer::start().await;
    let mut live = server.events("", None).await;
    let sandbox = server.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap();
    server.delete(&format!("/sandboxes/{id}")).await;
    let seen = live.until("sandbox.destroyed", WITHIN).await;
    let created_id = seen[0].id.clone().unwrap();

    let mut replay = server.events("", Some(&created_id)).await;
    assert_eq!(
        replay.next(WITHIN).await.unwrap().data["type"],
        "sandbox.running"
    );
    assert_eq!(
        replay.next(WITHIN).await.unwrap().data["type"],
        "sandbox.destroyed"
    );

    // The query parameter works like the header; an unknown ID replays the whole history.
    let mut all = server.events("?last_event_id=ev-unknown", None).await;
    assert_eq!(
        all.next(WITHIN).await.unwrap().data["type"],
        "sandbox.created"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn history_is_bounded() {
    let server = TestServer::start_with(|c| c.events.history_size = 2).await;
    for _ in 0..2 {
        server.spawn(json!({})).await;
    }
    let mut replay = server.events("?last_event_id=ev-unknown", None).await;
    let first = replay.next(WITHIN).await.unwrap();
    let second = replay.next(WITHIN).await.unwrap();
    assert_eq!(first.data["type"], "sandbox.created");
    assert_eq!(second.data["type"], "sandbox.running");
    assert!(
        replay.next(Duration::from_millis(200)).await.is_none(),
        "only two events are kept"
    );
    server.shutdown().await;
}
