//! API-key authentication and the permission table over HTTP (interface Authentication 1–3;
//! decisions §5): 401 without valid credentials, 403 for a known caller without the role, the
//! admin key and its fallback, probes always open, admin aliases answering as their originals.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::TestServer;

const API_KEY: &str = "test-api-key-0123456789abcdef0123";
const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef01";

fn api() -> [(&'static str, &'static str); 1] {
    [("X-API-Key", API_KEY)]
}

async fn server_with_keys(admin_key: &str, fallback: bool) -> TestServer {
    let admin_key = admin_key.to_owned();
    TestServer::start_with(move |c| {
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
        c.auth.admin_api_key = svc_core::config::Secret::new(admin_key);
        c.auth.admin_fallback_enabled = fallback;
    })
    .await
}

#[tokio::test]
async fn api_routes_need_a_valid_key_and_probes_do_not() {
    let server = server_with_keys(ADMIN_KEY, true).await;
    for path in [
        "/sandboxes",
        "/templates",
        "/providers",
        "/snapshots",
        "/pool/status",
    ] {
        let message = server.get(path).await.assert_error(401, "unauthorized");
        assert!(message.contains("X-API-Key"), "{path}: {message}");
    }
    for (name, value) in [
        ("X-API-Key", "wrong"),
        ("X-API-Key", ""),
        ("X-API-Key", &API_KEY[..API_KEY.len() - 1]),
        ("X-Admin-API-Key", "wrong"),
    ] {
        let reply = server
            .call_as(&[(name, value)], Method::GET, "/sandboxes", None)
            .await;
        let message = reply.assert_error(401, "unauthorized");
        assert!(
            !message.contains(API_KEY) && !message.contains("wrong"),
            "{message}"
        );
    }
    // A refused spawn creates nothing.
    server
        .post("/sandboxes", json!({}))
        .await
        .assert_error(401, "unauthorized");
    for probe in ["/health", "/live", "/ready"] {
        assert_eq!(server.get(probe).await.status, 200, "{probe}");
    }
    let doc = server
        .client
        .get(format!("{}/api/v1/openapi.json", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(doc.status(), 200, "the interface description is public");

    let spawned = server
        .call_as(&api(), Method::POST, "/sandboxes", Some(json!({})))
        .await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    let id = spawned.body["id"].as_str().unwrap();
    let listed = server
        .call_as(&api(), Method::GET, "/sandboxes", None)
        .await;
    assert_eq!(listed.body.as_array().unwrap().len(), 1);
    let exec = server
        .call_as(
            &api(),
            Method::POST,
            &format!("/sandboxes/{id}/exec"),
            Some(json!({"command": "echo hi"})),
        )
        .await;
    assert_eq!(exec.body["stdout"], "hi\n");
    // The admin key works everywhere, in either header.
    for header in ["X-API-Key", "X-Admin-API-Key"] {
        let reply = server
            .call_as(
                &[(header, ADMIN_KEY)],
                Method::GET,
                &format!("/sandboxes/{id}"),
                None,
            )
            .await;
        assert_eq!(reply.status, 200, "{header}");
    }
    // An invalid X-User-ID from an unknown caller is still a 401.
    server
        .call_as(&[("X-User-ID", "a b")], Method::GET, "/sandboxes", None)
        .await
        .assert_error(401, "unauthorized");
    server
        .call_as(
            &[("X-API-Key", API_KEY), ("X-User-ID", "a b")],
            Method::GET,
            "/sandboxes",
            None,
        )
        .await
        .assert_error(400, "bad_request");
    server.shutdown().await;
}

#[tokio::test]
async fn events_need_a_key_too() {
    let server = server_with_keys(ADMIN_KEY, true).await;
    let refused = server
        .client
        .get(server.url("/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let accepted = server
        .client
        .get(server.url("/events"))
        .header("X-API-Key", API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 200);
    server.shutdown().await;
}

#[tokio::test]
async fn admin_aliases_need_the_admin_key_and_answer_like_their_originals() {
    let server = server_with_keys(ADMIN_KEY, true).await;
    let admin = [("X-Admin-API-Key", ADMIN_KEY)];
    for (method, admin_path, path) in [
        (Method::GET, "/admin/providers", "/providers"),
        (Method::GET, "/admin/providers/mock", "/providers/mock"),
        (Method::POST, "/admin/providers/test", "/providers/test"),
    ] {
        server
            .call_as(&api(), method.clone(), admin_path, None)
            .await
            .assert_error(403, "forbidden");
        server
            .call(method.clone(), admin_path, None)
            .await
            .assert_error(401, "unauthorized");
        let via_admin = server
            .call_as(&admin, method.clone(), admin_path, None)
            .await;
        let plain = server.call_as(&api(), method, path, None).await;
        assert_eq!(via_admin.status, 200, "{admin_path}: {}", via_admin.body);
        assert_eq!(plain.status, 200);
        assert_eq!(
            without_health_timing(via_admin.body),
            without_health_timing(plain.body),
            "{admin_path}"
        );
    }
    server
        .call_as(&admin, Method::GET, "/admin/providers/nope", None)
        .await
        .assert_error(404, "not_found");
    server.shutdown().await;
}

#[tokio::test]
async fn quota_routes_follow_the_permission_table() {
    let server = server_with_keys(ADMIN_KEY, true).await;
    let admin = [("X-Admin-API-Key", ADMIN_KEY)];
    let body = json!({"max_sandboxes": 2});
    // The plain key (role api) writes quotas on the plain paths, not on the admin aliases.
    let saved = server
        .call_as(&api(), Method::PUT, "/quotas/olga", Some(body.clone()))
        .await;
    assert_eq!(saved.status, 200, "{}", saved.body);
    server
        .call_as(
            &api(),
            Method::PUT,
            "/admin/quotas/olga",
            Some(body.clone()),
        )
        .await
        .assert_error(403, "forbidden");
    server
        .call(Method::PUT, "/quotas/olga", Some(body.clone()))
        .await
        .assert_error(401, "unauthorized");
    for path in [
        "/quotas",
        "/quotas/summary",
        "/quotas/olga",
        "/quotas/olga/usage",
    ] {
        let plain = server.call_as(&api(), Method::GET, path, None).await;
        let via_admin = server
            .call_as(&admin, Method::GET, &format!("/admin{path}"), None)
            .await;
        assert_eq!(
            (plain.status.as_u16(), via_admin.status.as_u16()),
            (200, 200),
            "{path}"
        );
        assert_eq!(plain.body, via_admin.body, "{path}");
        server
            .call_as(&api(), Method::GET, &format!("/admin{path}"), None)
            .await
            .assert_error(403, "forbidden");
    }
    let deleted = server
        .call_as(&admin, Method::DELETE, "/admin/quotas/olga", None)
        .await;
    assert_eq!(deleted.body, json!({"status": "deleted"}));
    server.shutdown().await;
}

/// A provider answer without the fields that move between two health checks.
fn without_health_timing(mut value: Value) -> Value {
    fn strip(value: &mut Value) {
        if let Some(object) = value.as_object_mut() {
            object.remove("last_checked");
            object.remove("latency_ms");
            if let Some(health) = object.get_mut("health") {
                strip(health);
            }
        }
    }
    match &mut value {
        Value::Array(items) => items.iter_mut().for_each(strip),
        other => strip(other),
    }
    value
}

#[tokio::test]
async fn the_plain_key_reaches_admin_routes_only_through_the_fallback() {
    let server = server_with_keys("", true).await;
    let reply = server
        .call_as(&api(), Method::GET, "/admin/providers", None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = server
        .call_as(
            &[("X-Admin-API-Key", API_KEY)],
            Method::GET,
            "/admin/providers",
            None,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    server.shutdown().await;

    let server = server_with_keys("", false).await;
    server
        .call_as(&api(), Method::GET, "/admin/providers", None)
        .await
        .assert_error(403, "forbidden");
    assert_eq!(
        server
            .call_as(&api(), Method::GET, "/providers", None)
            .await
            .status,
        200
    );
    server.shutdown().await;
}

#[tokio::test]
async fn without_authentication_every_route_is_open() {
    let server = TestServer::start().await;
    assert_eq!(server.get("/admin/providers").await.status, 200);
    assert_eq!(server.post("/sandboxes", json!({})).await.status, 201);
    server.shutdown().await;
}

#[tokio::test]
async fn auth_enabled_without_a_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = svc_core::config::Config::default();
    config.database.path = dir.path().join("svc.db").display().to_string();
    config.providers.docker.enabled = false;
    config.auth.enabled = true;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = svc::start(config, listener)
        .await
        .err()
        .expect("start-up must fail");
    assert!(format!("{err:#}").contains("auth.api_key"), "{err:#}");
}
