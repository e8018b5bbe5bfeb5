//! Bad input gets a clear 4xx JSON error, the server keeps serving, and the store is unchanged.

use reqwest::Method;
use serde_json::json;
use svc_core::GoDuration;

use crate::harness::TestServer;

#[tokio::test]
async fn malformed_and_wrongly_typed_bodies() {
    let server = TestServer::start().await;
    let before = server.spawn(json!({})).await;
    let cases: &[(&str, &str)] = &[
        ("{", "invalid JSON"),
        ("[]", "invalid JSON"),
        ("\"text\"", "invalid JSON"),
        (r#"{"memory_mb": "lots"}"#, "memory_mb"),
        (r#"{"memory_mb": -5}"#, "memory_mb"),
        (r#"{"vcpus": 1.5}"#, "vcpus"),
        (r#"{"metadata": {"a": 1}}"#, "metadata.a"),
        (r#"{"metadata": "x"}"#, "metadata"),
        (r#"{"ttl": 30}"#, "ttl"),
        (r#"{"ttl": "-5m"}"#, "negative"),
        (r#"{"ttl": "forever"}"#, "ttl"),
        (r#"{"ttl": "5x"}"#, "unknown unit"),
        (r#"{"ttl": "99999999999h"}"#, "too large"),
        (r#"{"ttl": "0s"}"#, "ttl"),
        (r#"{"image": ""}"#, "image"),
        (r#"{"memory_mb": 0}"#, "memory_mb"),
        (r#"{"vcpus": 0}"#, "vcpus"),
        (r#"{"tenant_id": "nope"}"#, "tenant_id"),
        (r#"{"env": {"": "x"}}"#, "env"),
        (r#"{"image": "../../etc"}"#, "image"),
        (r#"{"image": "Alpine:Latest"}"#, "image"),
        (r#"{"image": "/srv/rootfs.tar"}"#, "microVM"),
    ];
    for (body, mention) in cases {
        let reply = server.call_raw(Method::POST, "/sandboxes", *body).await;
        let message = reply.assert_error(400, "bad_request");
        assert!(
            message.contains(mention),
            "body {body}: message {message:?} should mention {mention:?}"
        );
    }
    assert_eq!(
        server.listed_ids("?state=all").await,
        vec![before["id"].as_str().unwrap().to_owned()]
    );
    assert_eq!(server.get("/health").await.status, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn echoed_input_is_cut_to_a_sane_length() {
    let server = TestServer::start().await;
    let huge = "x".repeat(1_000_000);
    for body in [
        json!({"memory_mb": huge}),
        json!({"image": huge}),
        json!({"provider": huge}),
        json!({"ttl": huge}),
        json!({"template": huge}),
    ] {
        let reply = server.post("/sandboxes", body).await;
        let message = reply.assert_error(400, "bad_request");
        assert!(message.len() < 500, "{} bytes echoed", message.len());
    }
    let path = format!("/sandboxes?state={}", "y".repeat(6_000));
    let message = server.get(&path).await.assert_error(400, "bad_request");
    assert!(message.len() < 500, "{} bytes echoed", message.len());
    assert!(server.listed_ids("?state=all").await.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_provider_lists_the_enabled_ones() {
    let server = TestServer::start().await;
    let message = server
        .post("/sandboxes", json!({"provider": "vmware"}))
        .await
        .assert_error(400, "bad_request");
    assert!(
        message.contains("vmware") && message.contains("mock"),
        "{message}"
    );
    assert!(server.listed_ids("?state=all").await.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn ttl_over_max_is_a_resource_limit() {
    let server = TestServer::start_with(|c| c.defaults.max_ttl = GoDuration::from_secs(3600)).await;
    let mut events = server.events("?types=resource.limit", None).await;
    let message = server
        .post("/sandboxes", json!({"ttl": "2h"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("max_ttl"), "{message}");
    let seen = events
        .until("resource.limit", std::time::Duration::from_secs(5))
        .await;
    assert_eq!(seen.last().unwrap().data["data"]["reason"], "max_ttl");
    assert!(server.listed_ids("?state=all").await.is_empty());
    assert!(
        std::fs::read_dir(server.mock_root()).map_or(true, |d| d.count() == 0),
        "no runtime was created"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn capacity_limits_deny_spawns() {
    let server = TestServer::start_with(|c| {
        c.defaults.max_sandboxes = 3;
        c.defaults.max_sandboxes_per_owner = 2;
    })
    .await;
    for _ in 0..2 {
        server.spawn(json!({"owner_id": "alice"})).await;
    }
    let message = server
        .post("/sandboxes", json!({"owner_id": "alice"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("max_owner_sandboxes"), "{message}");
    server.spawn(json!({"owner_id": "bob"})).await;
    let message = server
        .post("/sandboxes", json!({"owner_id": "carol"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("max_sandboxes"), "{message}");
    assert_eq!(server.listed_ids("").await.len(), 3);
    server.shutdown().await;
}

#[tokio::test]
async fn a_megabyte_of_garbage_is_refused_and_the_server_keeps_serving() {
    let server = TestServer::start().await;
    let garbage: Vec<u8> = (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    for path in [
        "/sandboxes",
        "/templates",
        "/sandboxes/sb-0123456789abcdef/extend",
    ] {
        let reply = server.call_raw(Method::POST, path, garbage.clone()).await;
        assert!(reply.status.is_client_error(), "{path}: {}", reply.status);
        assert!(reply.body["code"].is_string(), "{path}: JSON error body");
    }
    assert!(server.listed_ids("?state=all").await.is_empty());
    assert_eq!(server.get("/templates").await.body, json!([]));
    assert_eq!(server.get("/health").await.status, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let server = TestServer::start_with(|c| c.server.max_body_bytes = 1024).await;
    let big = json!({"metadata": {"blob": "x".repeat(4096)}}).to_string();
    let reply = server.call_raw(Method::POST, "/sandboxes", big).await;
    let message = reply.assert_error(413, "payload_too_large");
    assert!(message.contains("1024"), "{message}");
    assert!(server.listed_ids("?state=all").await.is_empty());
    server.shutdown().await;
}
