//! `/health`, `/live`, `/ready`, the OpenAPI document, unknown routes and methods, request IDs.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use crate::harness::TestServer;

fn assert_go_duration(value: &Value) {
    let text = value.as_str().expect("duration string");
    assert!(
        svc_core::GoDuration::parse(text).is_ok(),
        "{text} is not a Go duration"
    );
}

#[tokio::test]
async fn health_live_and_ready() {
    let server = TestServer::start().await;
    let health = server.get("/health").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.body["status"], "ok");
    assert!(health.body["version"]
        .as_str()
        .unwrap()
        .starts_with(env!("CARGO_PKG_VERSION")));
    assert_go_duration(&health.body["uptime"]);

    let live = server.get("/live").await;
    assert_eq!(live.status, 200);
    assert_eq!(live.body["status"], "alive");
    assert_go_duration(&live.body["uptime"]);

    let ready = server.get("/ready").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert_eq!(ready.body["status"], "ready");
    crate::harness::assert_schema("ReadyBody", &ready.body);
    crate::harness::assert_schema("HealthBody", &health.body);
    assert_eq!(ready.body["ready_providers"], 1);
    assert_eq!(ready.body["total_providers"], 1);
    assert_eq!(ready.body["providers"][0]["name"], "mock");
    assert_eq!(ready.body["providers"][0]["healthy"], true);
    server.shutdown().await;
}

#[tokio::test]
async fn ready_is_503_when_no_provider_is_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let root = blocker.join("mock");
    let server = TestServer::start_with(|c| c.providers.mock.root_dir = root).await;
    let ready = server.get("/ready").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.body["status"], "not_ready");
    assert_eq!(ready.body["ready_providers"], 0);
    assert_eq!(ready.body["providers"][0]["healthy"], false);
    assert!(ready.body["providers"][0]["error"]
        .as_str()
        .unwrap()
        .contains("cannot create"));
    // A spawn on the unhealthy provider is refused as unavailable and leaves nothing behind.
    server
        .post("/sandboxes", serde_json::json!({}))
        .await
        .assert_error(503, "unavailable");
    assert!(server.listed_ids("?state=all").await.is_empty());
    // Liveness does not depend on providers.
    assert_eq!(server.get("/live").await.status, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json() {
    let server = TestServer::start().await;
    let missing = server.get("/no/such/route").await;
    missing.assert_error(404, "not_found");
    assert_eq!(missing.headers["content-type"], "application/json");
    let wrong = server.call(Method::PUT, "/health", None).await;
    wrong.assert_error(405, "method_not_allowed");
    assert_eq!(wrong.headers["content-type"], "application/json");
    let wrong = server.call(Method::PATCH, "/sandboxes", None).await;
    wrong.assert_error(405, "method_not_allowed");
    // Framework-level rejections are JSON too (here: a path segment that is not UTF-8).
    let bad_segment = server.get("/templates/%FF%FE").await;
    assert!(bad_segment.status.is_client_error());
    assert!(bad_segment.body["code"].is_string(), "{}", bad_segment.body);
    server.shutdown().await;
}

#[tokio::test]
async fn request_ids_are_generated_or_kept() {
    let server = TestServer::start().await;
    let generated = server.get("/health").await;
    let id = generated.headers["x-request-id"].to_str().unwrap();
    assert!(!id.is_empty());
    let kept = server
        .client
        .get(server.url("/health"))
        .header("X-Request-ID", "trace-me-123")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.headers()["x-request-id"], "trace-me-123");
    server.shutdown().await;
}

/// Every route the server has is in the document, with the methods it serves.
#[tokio::test]
async fn openapi_document_describes_every_route() {
    let server = TestServer::start().await;
    let json = server.get("/openapi.json").await;
    assert_eq!(json.status, 200);
    let paths = json.body["paths"].as_object().expect("paths");
    let expected: &[(&str, &[&str])] = &[
        ("/api/v1/health", &["get"]),
        ("/api/v1/live", &["get"]),
        ("/api/v1/ready", &["get"]),
        ("/api/v1/sandboxes", &["get", "post", "delete"]),
        ("/api/v1/sandboxes/{id}", &["get", "delete"]),
        ("/api/v1/sandboxes/{id}/extend", &["post"]),
        ("/api/v1/templates", &["get", "post"]),
        ("/api/v1/templates/{name}", &["get", "put", "delete"]),
        ("/api/v1/templates/{name}/spawn", &["post"]),
        ("/api/v1/providers", &["get"]),
        ("/api/v1/providers/{name}", &["get"]),
        ("/api/v1/providers/test", &["post"]),
        ("/api/v1/snapshots", &["get"]),
        ("/api/v1/pool/status", &["get"]),
        ("/api/v1/events", &["get"]),
        ("/api/v1/sandboxes/{id}/exec", &["post"]),
        ("/api/v1/sandboxes/{id}/exec/ws", &["get"]),
        ("/api/v1/sandboxes/{id}/logs", &["get"]),
        ("/api/v1/sandboxes/{id}/files", &["get", "post", "delete"]),
        ("/api/v1/sandboxes/{id}/files/list", &["get"]),
        ("/api/v1/sandboxes/{id}/files/move", &["post"]),
        ("/api/v1/sandboxes/{id}/files/chmod", &["post"]),
        ("/api/v1/sandboxes/{id}/files/stat", &["get"]),
        ("/api/v1/sandboxes/{id}/files/glob", &["get"]),
        ("/api/v1/admin/providers", &["get"]),
        ("/api/v1/admin/providers/{name}", &["get"]),
        ("/api/v1/admin/providers/test", &["post"]),
    ];
    // Operation IDs are unique (OpenAPI requires it; client generators refuse duplicates).
    let mut ids = std::collections::BTreeMap::new();
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"].as_str().unwrap_or_else(|| {
                panic!("{method} {path} has no operationId");
            });
            if let Some(other) = ids.insert(id.to_owned(), format!("{method} {path}")) {
                panic!("operationId {id} names both {other} and {method} {path}");
            }
        }
    }
    for (path, methods) in expected {
        let item = paths
            .get(*path)
            .unwrap_or_else(|| panic!("{path} missing from the document"));
        for method in *methods {
            assert!(
                item.get(*method).is_some(),
                "{method} {path} missing from the document"
            );
        }
    }
    // Every documented operation answers something other than 404/405 route errors.
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            let concrete = path
                .replace("{id}", "sb-0000000000000000")
                .replace("{name}", "none")
                .trim_start_matches("/api/v1")
                .to_owned();
            if concrete == "/events" {
                continue;
            }
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let reply = server.call(method.clone(), &concrete, None).await;
            assert_ne!(
                reply.status, 405,
                "{method} {path} is documented but not served"
            );
            assert!(
                reply.status != 404
                    || reply.body["message"]
                        .as_str()
                        .is_some_and(|m| !m.starts_with("route")),
                "{method} {path} is documented but not routed"
            );
        }
    }
    // Authentication is described: API-key schemes, 401/403 on every route but the probes.
    let schemes = &json.body["components"]["securitySchemes"];
    assert_eq!(schemes["api_key"]["name"], "X-API-Key");
    assert_eq!(schemes["admin_api_key"]["name"], "X-Admin-API-Key");
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            let probe =
                ["/api/v1/health", "/api/v1/live", "/api/v1/ready"].contains(&path.as_str());
            let responses = &operation["responses"];
            if probe {
                assert_eq!(
                    operation["security"],
                    serde_json::json!([{}]),
                    "{method} {path}"
                );
                assert!(responses.get("401").is_none(), "{method} {path}");
            } else if path.starts_with("/api/v1/worker/") {
                // Worker routes take worker credentials, never API keys.
                assert_eq!(
                    operation["security"],
                    serde_json::json!([{"worker_token": []}]),
                    "{method} {path}"
                );
                assert!(responses.get("401").is_some(), "{method} {path} lacks 401");
            } else {
                assert!(responses.get("401").is_some(), "{method} {path} lacks 401");
                assert!(responses.get("403").is_some(), "{method} {path} lacks 403");
            }
            if !probe {
                let limited = &responses["429"]["headers"];
                assert!(
                    limited.get("Retry-After").is_some(),
                    "{method} {path} lacks 429"
                );
            }
        }
    }
    let schemas = json.body["components"]["schemas"]
        .as_object()
        .expect("schemas");
    for schema in [
        "ExecRequest",
        "ExecResult",
        "FileInfo",
        "Sandbox",
        "SpawnRequest",
        "Template",
        "TemplateSpec",
        "ErrorBody",
        "ProviderSummary",
    ] {
        assert!(schemas.contains_key(schema), "schema {schema} missing");
    }
    let yaml = server
        .client
        .get(server.url("/openapi.yaml"))
        .send()
        .await
        .unwrap();
    assert_eq!(yaml.status(), 200);
    assert!(yaml.headers()["content-type"]
        .to_str()
        .unwrap()
        .contains("yaml"));
    let text = yaml.text().await.unwrap();
    let parsed: Value = serde_norway::from_str(&text).expect("valid YAML");
    assert_eq!(parsed["paths"].as_object().unwrap().len(), paths.len());
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_loops_and_ends_event_streams() {
    let server = TestServer::start().await;
    let mut events = server.events("", None).await;
    let report = server.shutdown().await;
    assert_eq!(
        report.loops_stopped, 4,
        "the reaper, the heartbeat, reconciliation, the warm pools"
    );
    assert!(
        report.drained,
        "an open event stream must not hold up shutdown"
    );
    assert!(events.next(Duration::from_secs(2)).await.is_none());
}

/// The harness turns the OpenAPI response check on for every server it starts: JSON answers,
/// successes and errors alike, carry the check's mark (without it, the tests' answers would go
/// unchecked and nothing would say so).
#[tokio::test]
async fn every_json_answer_in_these_tests_is_checked_against_the_openapi_document() {
    let server = TestServer::start().await;
    for (path, status) in [("/sandboxes", 200), ("/sandboxes/not-an-id", 404)] {
        let reply = server.get(path).await;
        assert_eq!(reply.status.as_u16(), status, "{path}: {}", reply.body);
        assert_eq!(
            reply
                .headers
                .get(svc_api::CHECKED_HEADER)
                .and_then(|v| v.to_str().ok()),
            Some("1"),
            "{path} was not checked against the OpenAPI document"
        );
    }
    server.shutdown().await;
}
