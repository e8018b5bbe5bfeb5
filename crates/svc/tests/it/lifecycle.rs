//! The sandbox lifecycle over HTTP: spawn, get, list with filters, extend, destroy, prune, the
//! reaper, owners and restart persistence.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::json;
use svc_core::GoDuration;

use crate::harness::{wait_for, SseMessage, TestServer};

/// What a caller learns about an ended sandbox (decisions §7): `GET` shows its `state`,
/// `state_reason` and `state_message`, and an exec on it is a 409 saying the same, with when
/// it ended. Returns the record.
pub(crate) async fn assert_ended(
    server: &TestServer,
    id: &str,
    state: &str,
    reason: &str,
) -> serde_json::Value {
    let record = server.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(record.status, 200, "{}", record.body);
    let record = record.body;
    assert_eq!(record["state"], state, "{record}");
    assert_eq!(record["state_reason"], reason, "{record}");
    let state_message = record["state_message"]
        .as_str()
        .unwrap_or_else(|| panic!("an ended sandbox has a state_message: {record}"));
    let refusal = server
        .post(&format!("/sandboxes/{id}/exec"), json!({"command": "true"}))
        .await
        .assert_error(409, "conflict");
    assert_eq!(refusal, refusal_message(&record), "{record}");
    assert!(
        state_message.is_empty() || refusal.contains(state_message),
        "{refusal}"
    );
    record
}

/// The 409 message for an operation on the ended sandbox `record`.
pub(crate) fn refusal_message(record: &serde_json::Value) -> String {
    let verb = match record["state"].as_str() {
        Some("error") => "has failed",
        _ => "was destroyed",
    };
    let mut message = format!(
        "sandbox {} {verb}: {}",
        record["id"].as_str().unwrap(),
        record["state_reason"].as_str().unwrap()
    );
    match record["state_message"].as_str() {
        Some("") | None => {}
        Some(text) => message.push_str(&format!(" ({text})")),
    }
    if let Some(at) = record["destroyed_at"].as_str() {
        message.push_str(&format!(" at {at}"));
    }
    message
}

/// Checks that `event` (`sandbox.destroyed` or `sandbox.error`) says why `record` ended: its
/// data carries `reason` and `message` as the record's `state_reason` and `state_message`.
#[track_caller]
pub(crate) fn assert_event_says_why(event: &SseMessage, record: &serde_json::Value) {
    let expected_type = match record["state"].as_str() {
        Some("error") => "sandbox.error",
        _ => "sandbox.destroyed",
    };
    assert_eq!(event.data["type"], expected_type, "{:?}", event.data);
    assert_eq!(event.data["sandbox_id"], record["id"], "{:?}", event.data);
    assert_eq!(
        event.data["data"]["reason"], record["state_reason"],
        "{:?}",
        event.data
    );
    assert_eq!(
        event.data["data"]["message"], record["state_message"],
        "{:?}",
        event.data
    );
}

fn ts(value: &serde_json::Value) -> DateTime<Utc> {
    let text = value.as_str().expect("timestamp string");
    assert!(text.ends_with('Z'), "{text} is not UTC with Z");
    DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

#[tokio::test]
async fn spawn_applies_defaults_and_renders_every_field() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap();
    assert!(svc_core::SandboxId::parse(id).is_ok(), "{id}");
    assert_eq!(sandbox["state"], "running");
    assert_eq!(sandbox["provider"], "mock");
    assert_eq!(sandbox["image"], "alpine:latest");
    assert_eq!(sandbox["memory_mb"], 512);
    assert_eq!(sandbox["vcpus"], 1);
    assert_eq!(sandbox["metadata"], json!({}));
    assert_eq!(sandbox["preview_domain"], format!("{id}.localhost"));
    assert_eq!(sandbox["worker_id"], "local");
    assert_eq!(sandbox["tenant_id"], "default");
    let lifetime = ts(&sandbox["expires_at"]) - ts(&sandbox["created_at"]);
    assert_eq!(lifetime.num_seconds(), 30 * 60);
    assert!(
        server.mock_root().join(id).is_dir(),
        "the mock runtime exists"
    );

    let custom = server
        .spawn(json!({
            "image": "python:3.12", "memory_mb": 1024, "vcpus": 2, "ttl": "1h30m",
            "metadata": {"team": "ml", "emoji": "✓"}, "provider": "mock"
        }))
        .await;
    assert_eq!(custom["image"], "python:3.12");
    assert_eq!(custom["memory_mb"], 1024);
    assert_eq!(custom["vcpus"], 2);
    assert_eq!(custom["metadata"], json!({"team": "ml", "emoji": "✓"}));
    let lifetime = ts(&custom["expires_at"]) - ts(&custom["created_at"]);
    assert_eq!(lifetime.num_seconds(), 90 * 60);

    let fetched = server.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body, sandbox);
    server.shutdown().await;
}

#[tokio::test]
async fn get_unknown_or_malformed_ids_is_404() {
    let server = TestServer::start().await;
    server
        .get("/sandboxes/sb-0123456789abcdef")
        .await
        .assert_error(404, "not_found");
    server
        .get("/sandboxes/not-an-id")
        .await
        .assert_error(404, "not_found");
    server
        .delete("/sandboxes/sb-0123456789abcdef")
        .await
        .assert_error(404, "not_found");
    // A malformed ID names nothing on every sandbox route, and a malformed exec ID nothing
    // in a sandbox that exists.
    let sandbox = server.spawn(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for path in [
        "/sandboxes/not-an-id/exec".to_owned(),
        "/sandboxes/not-an-id/extend".to_owned(),
        "/sandboxes/not-an-id/pause".to_owned(),
        "/sandboxes/not-an-id/preview-tokens".to_owned(),
        format!("/sandboxes/{sandbox}/execs/not-an-exec/kill"),
    ] {
        let message = server
            .post(&path, json!({"command": "true", "ttl": "1m", "port": 8080}))
            .await
            .assert_error(404, "not_found");
        let named = if path.contains("not-an-exec") {
            "not-an-exec"
        } else {
            "not-an-id"
        };
        assert!(message.contains(named), "{path}: {message}");
    }
    for path in [
        "/sandboxes/not-an-id/files?path=/x".to_owned(),
        "/sandboxes/not-an-id/stats".to_owned(),
        "/sandboxes/not-an-id/execs".to_owned(),
        format!("/sandboxes/{sandbox}/execs/not-an-exec"),
    ] {
        server.get(&path).await.assert_error(404, "not_found");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn list_filters_by_state_owner_and_provider_newest_first() {
    let server = TestServer::start().await;
    let alice = server
        .client
        .post(server.url("/sandboxes"))
        .header("X-User-ID", "  alice  ")
        .json(&json!({"owner_id": "mallory"}))
        .send()
        .await
        .unwrap();
    let alice = TestServer::reply(alice).await;
    assert_eq!(alice.status, 201);
    assert_eq!(
        alice.body["owner_id"], "alice",
        "X-User-ID wins over owner_id and is trimmed"
    );
    // The test clock stands still; move it so creation times differ.
    server.clock.advance(Duration::from_secs(1));
    let bob = server.spawn(json!({"owner_id": "bob"})).await;
    server.clock.advance(Duration::from_secs(1));
    let gone = server.spawn(json!({"owner_id": "bob"})).await;
    let gone_id = gone["id"].as_str().unwrap();
    assert_eq!(
        server.delete(&format!("/sandboxes/{gone_id}")).await.status,
        200
    );

    let alice_id = alice.body["id"].as_str().unwrap().to_owned();
    let bob_id = bob["id"].as_str().unwrap().to_owned();
    assert_eq!(
        server.listed_ids("").await,
        vec![bob_id.clone(), alice_id.clone()]
    );
    assert_eq!(
        server.listed_ids("?state=running").await,
        vec![bob_id.clone(), alice_id.clone()]
    );
    assert_eq!(
        server.listed_ids("?state=destroyed").await,
        vec![gone_id.to_owned()]
    );
    assert_eq!(server.listed_ids("?state=all").await.len(), 3);
    assert_eq!(
        server.listed_ids("?owner_id=alice").await,
        vec![alice_id.clone()]
    );
    assert_eq!(server.listed_ids("?owner_id=bob&state=all").await.len(), 2);
    assert_eq!(server.listed_ids("?provider=mock").await.len(), 2);
    assert!(server.listed_ids("?provider=docker").await.is_empty());
    server
        .get("/sandboxes?state=sleeping")
        .await
        .assert_error(400, "bad_request");
    server.shutdown().await;
}

#[tokio::test]
async fn invalid_owner_ids_are_rejected_naming_the_header_or_field() {
    let server = TestServer::start().await;
    for bad in ["a b", "a/b", "a\\b", &"x".repeat(129)] {
        let reply = server
            .client
            .post(server.url("/sandboxes"))
            .header("X-User-ID", bad)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let reply = TestServer::reply(reply).await;
        let message = reply.assert_error(400, "bad_request");
        assert!(message.contains("X-User-ID"), "{message}");
    }
    let message = server
        .post("/sandboxes", json!({"owner_id": "has space"}))
        .await
        .assert_error(400, "bad_request");
    assert!(message.contains("owner_id"), "{message}");
    assert!(server.listed_ids("?state=all").await.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn destroy_is_idempotent_and_keeps_the_record() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap();
    let path = format!("/sandboxes/{id}");
    let mut events = server
        .events("?types=sandbox.destroyed,sandbox.error", None)
        .await;
    let first = server.delete(&path).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, json!({"status": "destroyed"}));
    assert!(
        !server.mock_root().join(id).exists(),
        "the runtime is removed"
    );
    let again = server.delete(&path).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, json!({"status": "destroyed"}));
    let record = assert_ended(&server, id, "destroyed", "destroyed_by_request").await;
    assert!(ts(&record["destroyed_at"]) >= ts(&record["created_at"]));
    let destroyed = events
        .until("sandbox.destroyed", Duration::from_secs(5))
        .await;
    assert_event_says_why(destroyed.last().unwrap(), &record);
    assert!(
        events.next(Duration::from_millis(300)).await.is_none(),
        "the second destroy publishes nothing"
    );
    // Files, logs and extend are refused the same way as exec.
    let refusal = refusal_message(&record);
    for reply in [
        server
            .get(&format!("{path}/files?path=/etc/hostname"))
            .await,
        server.get(&format!("{path}/logs")).await,
        server
            .post(
                &format!("{path}/files"),
                json!({"path": "/x", "content": "x"}),
            )
            .await,
        server
            .post(&format!("{path}/extend"), json!({"ttl": "5m"}))
            .await,
    ] {
        assert_eq!(reply.assert_error(409, "conflict"), refusal);
    }
    assert!(server.listed_ids("").await.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn extend_moves_expiry_within_max_ttl() {
    let server = TestServer::start_with(|c| c.defaults.max_ttl = GoDuration::from_secs(3600)).await;
    let sandbox = server.spawn(json!({"ttl": "10m"})).await;
    let id = sandbox["id"].as_str().unwrap();
    let extended = server
        .post(&format!("/sandboxes/{id}/extend"), json!({"ttl": "45m"}))
        .await;
    assert_eq!(extended.status, 200, "{}", extended.body);
    let new_expiry = ts(&extended.body["expires_at"]);
    // The test clock stands still: the new expiry is exactly now + 45m.
    let lifetime = new_expiry - ts(&sandbox["created_at"]);
    assert_eq!(lifetime.num_seconds(), 45 * 60);
    assert_eq!(
        server.get(&format!("/sandboxes/{id}")).await.body["expires_at"],
        extended.body["expires_at"]
    );

    let message = server
        .post(&format!("/sandboxes/{id}/extend"), json!({"ttl": "2h"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("max_ttl"), "{message}");
    assert_eq!(
        server.get(&format!("/sandboxes/{id}")).await.body["expires_at"],
        extended.body["expires_at"],
        "nothing changes on denial"
    );

    server
        .post(&format!("/sandboxes/{id}/extend"), json!({"ttl": "-5m"}))
        .await
        .assert_error(400, "bad_request");
    server
        .post(&format!("/sandboxes/{id}/extend"), json!({}))
        .await
        .assert_error(400, "bad_request");
    server
        .post(
            "/sandboxes/sb-0123456789abcdef/extend",
            json!({"ttl": "5m"}),
        )
        .await
        .assert_error(404, "not_found");
    server.delete(&format!("/sandboxes/{id}")).await;
    let message = server
        .post(&format!("/sandboxes/{id}/extend"), json!({"ttl": "5m"}))
        .await
        .assert_error(409, "conflict");
    assert!(message.contains("destroyed"), "{message}");
    server.shutdown().await;
}

#[tokio::test]
async fn prune_destroys_only_expired_sandboxes() {
    let server =
        TestServer::start_with(|c| c.defaults.reap_interval = GoDuration::from_secs(3600)).await;
    let short = server.spawn(json!({"ttl": "1s"})).await;
    let long = server.spawn(json!({"ttl": "1h"})).await;
    let pruned = server.call(Method::DELETE, "/sandboxes", None).await;
    assert_eq!(pruned.body, json!({"pruned": 0}));
    server.clock.advance(Duration::from_secs(2));
    let mut events = server.events("?types=sandbox.destroyed", None).await;
    let pruned = server.call(Method::DELETE, "/sandboxes", None).await;
    assert_eq!(pruned.status, 200);
    assert_eq!(pruned.body, json!({"pruned": 1}));
    let gone = assert_ended(
        &server,
        short["id"].as_str().unwrap(),
        "destroyed",
        "pruned",
    )
    .await;
    assert_eq!(gone["state_message"], "");
    let destroyed = events
        .until("sandbox.destroyed", Duration::from_secs(5))
        .await;
    assert_event_says_why(destroyed.last().unwrap(), &gone);
    let alive = server
        .get(&format!("/sandboxes/{}", long["id"].as_str().unwrap()))
        .await
        .body;
    assert!(
        alive.get("state_reason").is_none() && alive.get("state_message").is_none(),
        "absent until the sandbox ends: {alive}"
    );
    let long_id = long["id"].as_str().unwrap();
    assert_eq!(
        server.delete(&format!("/sandboxes/{long_id}")).await.status,
        200
    );
    assert_eq!(
        server.get(&format!("/sandboxes/{long_id}")).await.body["state_reason"],
        "destroyed_by_request"
    );
    assert!(server.listed_ids("").await.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn reaper_destroys_expired_and_forgets_old_records() {
    let server = TestServer::start_with(|c| {
        c.defaults.reap_interval = GoDuration::from_millis(100);
        c.defaults.destroyed_retention = GoDuration::from_secs(3600);
    })
    .await;
    let mut events = server.events("?types=sandbox.destroyed", None).await;
    let sandbox = server.spawn(json!({"ttl": "10m"})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    // Nothing expires while the clock stands still.
    assert!(events.next(Duration::from_millis(400)).await.is_none());
    server.clock.advance(Duration::from_secs(601));
    let destroyed = events
        .until("sandbox.destroyed", Duration::from_secs(10))
        .await;
    let event = destroyed.last().unwrap();
    assert_eq!(event.data["sandbox_id"], id);
    assert_eq!(event.data["data"]["reason"], "expired");
    assert!(!server.mock_root().join(&id).exists());
    let path = format!("/sandboxes/{id}");
    // Kept for the retention, saying why it went.
    let record = assert_ended(&server, &id, "destroyed", "expired").await;
    assert_event_says_why(event, &record);
    server.clock.advance(Duration::from_secs(3601));
    wait_for(
        "the destroyed record to be forgotten",
        Duration::from_secs(10),
        || async { server.get(&path).await.status == 404 },
    )
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn sandboxes_survive_a_restart_and_stay_destroyable() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({"metadata": {"keep": "me"}})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let server = server.restart().await;
    assert_eq!(server.listed_ids("").await, vec![id.clone()]);
    let fetched = server.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(fetched.body, sandbox);
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    assert!(!server.mock_root().join(&id).exists());
    let server = server.restart().await;
    assert_eq!(
        server.get(&format!("/sandboxes/{id}")).await.body["state"],
        "destroyed"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_failed_spawn_ends_as_error_and_publishes_failure_events() {
    let server = TestServer::start().await;
    let mut events = server.events("", None).await;
    // The provider was healthy at start-up (cached); now its root becomes unusable.
    let root = server.mock_root();
    std::fs::remove_dir_all(&root).ok();
    std::fs::write(&root, b"not a directory").unwrap();
    let message = server
        .post("/sandboxes", json!({}))
        .await
        .assert_error(500, "provider_error");
    assert!(message.contains("mock"), "{message}");
    let seen = events
        .until("provider.failed", Duration::from_secs(5))
        .await;
    let types: Vec<_> = seen
        .iter()
        .map(|e| e.data["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types,
        ["sandbox.error", "operation.failed", "provider.failed"]
    );
    assert_eq!(seen[1].data["data"]["operation"], "spawn");
    assert_eq!(seen[1].data["data"]["provider"], "mock");
    assert!(seen[1].data["data"]["error"].as_str().is_some());
    // Nothing runs; the record says why the sandbox is gone (decisions §7).
    assert!(server.listed_ids("?state=running").await.is_empty());
    let ids = server.listed_ids("?state=all").await;
    assert_eq!(ids.len(), 1, "the admitted record stays, ended");
    let failed = server.get(&format!("/sandboxes/{}", ids[0])).await.body;
    assert_eq!(failed["state"], "error");
    assert_eq!(failed["state_reason"], "spawn_failed");
    assert!(failed["state_message"].as_str().unwrap().contains("mock"));
    assert_eq!(seen[0].data["data"]["reason"], "spawn_failed");
    assert_eq!(seen[0].data["sandbox_id"], ids[0]);
    let record = assert_ended(&server, &ids[0], "error", "spawn_failed").await;
    assert_event_says_why(&seen[0], &record);
    server.shutdown().await;
}

#[tokio::test]
async fn stats_sample_a_running_command_and_refuse_ended_sandboxes() {
    use futures::StreamExt;
    let server = TestServer::start().await;
    let id = server.spawn(json!({"memory_mb": 256})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A streamed command runs until its caller leaves, so it is there while stats sample.
    let response = server
        .client
        .post(server.url(&format!("/sandboxes/{id}/exec")))
        .json(&json!({"command": "echo started; sleep 30", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut output = response.bytes_stream();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("started") {
        let chunk = tokio::time::timeout(Duration::from_secs(20), output.next())
            .await
            .expect("the command starts")
            .expect("the stream stays open")
            .unwrap();
        seen.extend_from_slice(&chunk);
    }
    let stats = server.get(&format!("/sandboxes/{id}/stats")).await;
    assert_eq!(stats.status, 200, "{}", stats.body);
    crate::harness::assert_schema("SandboxStats", &stats.body);
    let body = &stats.body;
    assert!(body["pids"].as_u64().unwrap() >= 1, "{body}");
    assert!(body["memory_bytes"].as_u64().unwrap() > 0, "{body}");
    assert_eq!(body["memory_limit_bytes"], 256 * 1024 * 1024, "{body}");
    assert!(body["cpu_percent"].as_f64().unwrap() >= 0.0, "{body}");
    assert_eq!(
        (&body["net_rx_bytes"], &body["net_tx_bytes"]),
        (&json!(0), &json!(0))
    );
    ts(&body["sampled_at"]);
    drop(output);

    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    server
        .get(&format!("/sandboxes/{id}/stats"))
        .await
        .assert_error(409, "conflict");
    server
        .get("/sandboxes/sb-0123456789abcdef/stats")
        .await
        .assert_error(404, "not_found");
    server.shutdown().await;
}

#[tokio::test]
async fn lists_page_with_cursors_without_skipping_or_repeating() {
    let server = TestServer::start().await;
    for _ in 0..7 {
        // (the test clock stands still unless moved: each sandbox a second newer)
        server.clock.advance(Duration::from_secs(1));
        server.spawn(json!({"provider": "mock"})).await;
    }
    let whole: Vec<String> = server
        .get("/sandboxes")
        .await
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(whole.len(), 7);
    let (seen, pages) = crate::paging::pages(&server, "/sandboxes?limit=3", "id", |page| {
        if page != 1 {
            return Vec::new();
        }
        // Between pages: a new sandbox (newer than the cursor) and the oldest one destroyed.
        server.clock.advance(Duration::from_secs(1));
        vec![
            (
                Method::POST,
                "/sandboxes".into(),
                Some(json!({"provider": "mock"})),
            ),
            (Method::DELETE, format!("/sandboxes/{}", whole[6]), None),
        ]
    })
    .await;
    assert_eq!(
        seen,
        whole[..6].to_vec(),
        "newest first, none skipped or repeated"
    );
    assert_eq!(pages, 2);

    // The default page is 1000; a bad limit or cursor is 400 naming it.
    let first = server.get("/sandboxes?limit=2").await;
    let cursor = first.headers["x-next-cursor"].to_str().unwrap().to_owned();
    for (query, field) in [
        (format!("limit=2&state=all&cursor={cursor}"), "cursor"),
        ("cursor=not-a-cursor".to_owned(), "cursor"),
        ("limit=0".to_owned(), "limit"),
        ("limit=1001".to_owned(), "limit"),
    ] {
        let refused = server.get(&format!("/sandboxes?{query}")).await;
        let message = refused.assert_error(400, "bad_request");
        assert!(message.contains(field), "{query}: {message}");
    }
    let unpaged = server.get("/sandboxes?limit=1000").await;
    assert!(unpaged.headers.get("x-next-cursor").is_none());
    server.shutdown().await;
}
