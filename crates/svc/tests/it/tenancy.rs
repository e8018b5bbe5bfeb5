//! Tenants over HTTP (decisions §5–6): isolation of OIDC callers on every sandbox route and the
//! event stream, policies at spawn (priorities, deny winning ties, templates), tenant admins
//! confined to their tenant, and the audit log read back as JSON and as CSV.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};
use crate::idp::{bearer, Idp};
use crate::oidc::call_with;

const ADMIN_KEY: &str = "tenancy-admin-key-0123456789abcdef";

/// A server taking both the admin API key and bearer tokens.
async fn server(idp: &Idp) -> TestServer {
    TestServer::start_with(|c| {
        idp.configure(c);
        c.auth.enabled = true;
        c.auth.admin_api_key = svc_core::config::Secret::new(ADMIN_KEY);
    })
    .await
}

async fn admin(server: &TestServer, method: Method, path: &str, body: Option<Value>) -> Reply {
    server
        .call_as(&[("X-Admin-API-Key", ADMIN_KEY)], method, path, body)
        .await
}

async fn create_tenant(server: &TestServer, id: &str) {
    let reply = admin(
        server,
        Method::POST,
        "/admin/tenants",
        Some(json!({"id": id, "name": id})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
}

#[tokio::test]
async fn tenant_records_follow_decisions() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    let listed = admin(&server, Method::GET, "/admin/tenants", None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body[0]["id"], "default", "{}", listed.body);
    create_tenant(&server, "acme").await;
    // Unknown fields are ignored, as in every other body.
    let extra = admin(
        &server,
        Method::POST,
        "/admin/tenants",
        Some(json!({"id": "initech", "plan": "gold"})),
    )
    .await;
    assert_eq!(extra.status, 201, "{}", extra.body);
    assert_eq!(extra.body["name"], "initech");
    let dup = admin(
        &server,
        Method::POST,
        "/admin/tenants",
        Some(json!({"id": "acme", "name": "x"})),
    )
    .await;
    dup.assert_error(409, "conflict");
    for bad in ["Acme", "-x", "a b", "", &"a".repeat(64)] {
        let reply = admin(
            &server,
            Method::POST,
            "/admin/tenants",
            Some(json!({"id": bad, "name": "x"})),
        )
        .await;
        let message = reply.assert_error(400, "bad_request");
        assert!(message.starts_with("id"), "{message}");
    }
    let got = admin(&server, Method::GET, "/admin/tenants/acme", None).await;
    assert_eq!(got.body["name"], "acme");
    assert!(got.body["created_at"].as_str().unwrap().ends_with('Z'));
    admin(&server, Method::DELETE, "/admin/tenants/default", None)
        .await
        .assert_error(400, "bad_request");
    assert_eq!(
        admin(&server, Method::DELETE, "/admin/tenants/acme", None)
            .await
            .status,
        200
    );
    admin(&server, Method::GET, "/admin/tenants/acme", None)
        .await
        .assert_error(404, "not_found");
    // A spawn by an admin may name an existing tenant only.
    admin(
        &server,
        Method::POST,
        "/sandboxes",
        Some(json!({"tenant_id": "acme"})),
    )
    .await
    .assert_error(400, "bad_request");
    create_tenant(&server, "acme").await;
    let spawned = admin(
        &server,
        Method::POST,
        "/sandboxes",
        Some(json!({"tenant_id": "acme"})),
    )
    .await;
    assert_eq!(spawned.body["tenant_id"], "acme", "{}", spawned.body);
}

#[tokio::test]
async fn oidc_callers_see_only_their_tenant() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    let acme = idp.token("alice", &["operators"], Some("acme"));
    let globex = idp.token("gary", &["operators"], Some("globex"));
    let mut acme_events = server
        .events_as(&[("Authorization", &bearer(&acme))], "", None)
        .await;
    let mut globex_events = server
        .events_as(&[("Authorization", &bearer(&globex))], "", None)
        .await;
    let spawned = call_with(&server, &acme, Method::POST, "/sandboxes", Some(json!({}))).await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    assert_eq!(spawned.body["tenant_id"], "acme");
    let id = spawned.body["id"].as_str().unwrap().to_owned();
    // Spawning into another tenant is refused to an OIDC caller.
    call_with(
        &server,
        &acme,
        Method::POST,
        "/sandboxes",
        Some(json!({"tenant_id": "globex"})),
    )
    .await
    .assert_error(403, "forbidden");

    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/sandboxes/{id}"), None),
        (
            Method::POST,
            format!("/sandboxes/{id}/exec"),
            Some(json!({"command": "echo hi"})),
        ),
        (Method::GET, format!("/sandboxes/{id}/logs"), None),
        (
            Method::POST,
            format!("/sandboxes/{id}/files"),
            Some(json!({"path": "/f", "content": "x"})),
        ),
        (Method::GET, format!("/sandboxes/{id}/files?path=/f"), None),
        (
            Method::GET,
            format!("/sandboxes/{id}/files/list?path=/"),
            None,
        ),
        (
            Method::GET,
            format!("/sandboxes/{id}/files/stat?path=/f"),
            None,
        ),
        (
            Method::GET,
            format!("/sandboxes/{id}/files/glob?pattern=/*"),
            None,
        ),
        (
            Method::POST,
            format!("/sandboxes/{id}/files/chmod"),
            Some(json!({"path": "/f", "mode": "600"})),
        ),
        (
            Method::POST,
            format!("/sandboxes/{id}/files/move"),
            Some(json!({"old_path": "/f", "new_path": "/g"})),
        ),
        (
            Method::DELETE,
            format!("/sandboxes/{id}/files?path=/g"),
            None,
        ),
        (
            Method::POST,
            format!("/sandboxes/{id}/extend"),
            Some(json!({"ttl": "20m"})),
        ),
        (Method::DELETE, format!("/sandboxes/{id}"), None),
    ];
    for (method, path, body) in &routes {
        let reply = call_with(&server, &globex, method.clone(), path, body.clone()).await;
        reply.assert_error(404, "not_found");
    }
    let listed = call_with(&server, &globex, Method::GET, "/sandboxes?state=all", None).await;
    assert_eq!(listed.body, json!([]));
    // The owner's tenant reaches every one of them (the destroy last).
    for (method, path, body) in routes {
        let reply = call_with(&server, &acme, method.clone(), &path, body).await;
        assert!(
            reply.status.is_success(),
            "{method} {path}: {} {}",
            reply.status,
            reply.body
        );
    }
    let listed = call_with(&server, &acme, Method::GET, "/sandboxes?state=all", None).await;
    assert_eq!(listed.body[0]["id"], id.as_str());
    // API-key callers see every tenant.
    let listed = admin(&server, Method::GET, "/sandboxes?state=all", None).await;
    assert_eq!(listed.body.as_array().unwrap().len(), 1);

    // Events: acme's subscriber saw its sandbox's life; globex's saw none of it.
    let seen = acme_events
        .until("sandbox.destroyed", Duration::from_secs(10))
        .await;
    let types: Vec<&str> = seen
        .iter()
        .map(|m| m.data["type"].as_str().unwrap())
        .collect();
    for wanted in [
        "sandbox.created",
        "sandbox.running",
        "exec.started",
        "exec.completed",
        "file.written",
        "file.read",
        "sandbox.destroyed",
    ] {
        assert!(types.contains(&wanted), "{wanted} missing from {types:?}");
    }
    assert!(seen
        .iter()
        .all(|m| m.data["sandbox_id"] == id.as_str() || m.data["sandbox_id"] == ""));
    // Something for globex, to prove its stream is alive and saw nothing of acme's.
    let own = call_with(
        &server,
        &globex,
        Method::POST,
        "/sandboxes",
        Some(json!({})),
    )
    .await;
    let first = globex_events
        .next(Duration::from_secs(10))
        .await
        .expect("globex event");
    assert_eq!(first.data["sandbox_id"], own.body["id"], "{:?}", first.data);
}

async fn policy(server: &TestServer, tenant: &str, body: Value) -> Value {
    let reply = admin(
        server,
        Method::POST,
        &format!("/admin/tenants/{tenant}/policies"),
        Some(body),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.body
}

#[tokio::test]
async fn policies_decide_by_priority_and_deny_wins_ties() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    create_tenant(&server, "acme").await;
    let op = idp.token("alice", &["operators"], Some("acme"));
    let spawn = |body: Value| {
        let (server, op) = (&server, op.clone());
        async move { call_with(server, &op, Method::POST, "/sandboxes", Some(body)).await }
    };
    // Everything is denied at priority 0, the library images allowed at 10, one of them
    // both allowed and denied at 20 (deny wins the tie).
    let deny_all = policy(
        &server,
        "acme",
        json!({"name": "deny-all", "resource": "image", "pattern": "*", "effect": "deny"}),
    )
    .await;
    policy(&server, "acme", json!({"name": "library", "resource": "image", "pattern": "docker.io/library/*", "effect": "allow", "priority": 10})).await;
    let risky = policy(&server, "acme", json!({"name": "no-risky", "resource": "image", "pattern": "docker.io/library/risky*", "effect": "deny", "priority": 20})).await;
    policy(&server, "acme", json!({"name": "risky-ok", "resource": "image", "pattern": "docker.io/library/risky:1", "effect": "allow", "priority": 20})).await;
    assert_eq!(deny_all["priority"], 0);
    assert_eq!(deny_all["tenant_id"], "acme");
    assert!(deny_all["id"].as_str().unwrap().starts_with("pol-"));

    let mut events = server
        .events_as(
            &[("Authorization", &bearer(&op))],
            "?types=operation.failed",
            None,
        )
        .await;
    assert_eq!(
        spawn(json!({"image": "docker.io/library/alpine:3"}))
            .await
            .status,
        201
    );
    let denied = spawn(json!({"image": "ghcr.io/x/y"})).await;
    let message = denied.assert_error(403, "policy_denied");
    for part in [
        "deny-all",
        deny_all["id"].as_str().unwrap(),
        "image",
        "ghcr.io/x/y",
    ] {
        assert!(message.contains(part), "{part} missing: {message}");
    }
    let message = spawn(json!({"image": "docker.io/library/risky:1"}))
        .await
        .assert_error(403, "policy_denied");
    assert!(message.contains(risky["id"].as_str().unwrap()), "{message}");
    let failed = events
        .next(Duration::from_secs(5))
        .await
        .expect("operation.failed");
    assert_eq!(failed.data["data"]["operation"], "spawn");
    assert!(failed.data["data"]["error"]
        .as_str()
        .unwrap()
        .contains("deny-all"));

    // Other tenants are not governed by acme's policies.
    let other = idp.token("bob", &["operators"], Some("globex"));
    let reply = call_with(
        &server,
        &other,
        Method::POST,
        "/sandboxes",
        Some(json!({"image": "ghcr.io/x/y"})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);

    // Provider and network policies; templates are checked too.
    policy(&server, "acme", json!({"name": "no-host-net", "resource": "network", "pattern": "host", "effect": "deny", "priority": 100})).await;
    let message = spawn(json!({"image": "docker.io/library/alpine:3"}))
        .await
        .assert_error(403, "policy_denied");
    assert!(
        message.contains("network") && message.contains("host"),
        "{message}"
    );
    let reply = admin(
        &server,
        Method::POST,
        "/templates",
        Some(json!({"name": "lib", "image": "docker.io/library/alpine:3"})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    call_with(
        &server,
        &op,
        Method::POST,
        "/templates/lib/spawn",
        Some(json!({})),
    )
    .await
    .assert_error(403, "policy_denied");
    // Nothing half-made: only the one allowed spawn of acme exists.
    let listed = call_with(&server, &op, Method::GET, "/sandboxes?state=all", None).await;
    assert_eq!(listed.body.as_array().unwrap().len(), 1, "{}", listed.body);

    // Update and delete.
    let id = risky["id"].as_str().unwrap();
    let path = format!("/admin/tenants/acme/policies/{id}");
    let updated = admin(&server, Method::PUT, &path, Some(json!({"name": "renamed", "resource": "provider", "pattern": "docker", "effect": "deny", "priority": 5}))).await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    assert_eq!(updated.body["resource"], "provider");
    assert_eq!(updated.body["created_at"], risky["created_at"]);
    assert_eq!(
        admin(&server, Method::DELETE, &path, None).await.status,
        200
    );
    admin(&server, Method::GET, &path, None)
        .await
        .assert_error(404, "not_found");
    // Bad policies name their field.
    for (body, field) in [
        (
            json!({"name": "x", "resource": "cpu", "pattern": "*", "effect": "deny"}),
            "resource",
        ),
        (
            json!({"name": "x", "resource": "image", "pattern": "[", "effect": "deny"}),
            "pattern",
        ),
        (
            json!({"name": "x", "resource": "image", "pattern": "*", "effect": "maybe"}),
            "effect",
        ),
        (
            json!({"name": "", "resource": "image", "pattern": "*", "effect": "deny"}),
            "name",
        ),
    ] {
        let reply = admin(
            &server,
            Method::POST,
            "/admin/tenants/acme/policies",
            Some(body),
        )
        .await;
        let message = reply.assert_error(400, "bad_request");
        assert!(message.starts_with(field), "{field}: {message}");
    }
}

#[tokio::test]
async fn tenant_admins_administer_only_their_own_tenant() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    create_tenant(&server, "acme").await;
    create_tenant(&server, "globex").await;
    let lead = idp.token("lead", &["leads"], Some("acme"));
    for path in [
        "/admin/tenants/acme/members",
        "/admin/tenants/acme/policies",
        "/admin/tenants/acme/audit",
    ] {
        let reply = call_with(&server, &lead, Method::GET, path, None).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
    }
    let reply = call_with(
        &server,
        &lead,
        Method::PUT,
        "/admin/tenants/acme/members/dev",
        Some(json!({"role": "operator"})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    for path in [
        "/admin/tenants/globex/members",
        "/admin/tenants/globex/policies",
        "/admin/tenants/globex/audit",
        "/admin/tenants",
        "/admin/tenants/acme",
        "/admin/audit",
    ] {
        call_with(&server, &lead, Method::GET, path, None)
            .await
            .assert_error(403, "forbidden");
    }
    call_with(
        &server,
        &lead,
        Method::POST,
        "/admin/tenants/globex/policies",
        Some(json!({})),
    )
    .await
    .assert_error(403, "forbidden");
}

#[tokio::test]
async fn the_audit_log_records_admin_mutations_quota_changes_and_denials() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    // Entries carry the server's clock, not the wall clock.
    let started = svc_core::Clock::now(server.clock.as_ref()) - chrono::Duration::seconds(1);
    create_tenant(&server, "acme").await;
    let root = idp.token("root", &["admins"], Some("acme"));
    let reply = call_with(&server, &root, Method::POST, "/admin/tenants/acme/policies", Some(json!({"name": "no-ghcr", "resource": "image", "pattern": "ghcr.io/*", "effect": "deny"}))).await;
    assert_eq!(reply.status, 201);
    let reply = admin(
        &server,
        Method::PUT,
        "/quotas/alice",
        Some(json!({"max_sandboxes": 2})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = admin(
        &server,
        Method::POST,
        "/admin/tenants",
        Some(json!({"id": "acme"})),
    )
    .await;
    assert_eq!(reply.status, 409);
    let op = idp.token("olga", &["operators"], Some("acme"));
    call_with(
        &server,
        &op,
        Method::POST,
        "/sandboxes",
        Some(json!({"image": "ghcr.io/a/b"})),
    )
    .await
    .assert_error(403, "policy_denied");
    // A denied admin mutation is audited as denied.
    call_with(&server, &op, Method::DELETE, "/admin/tenants/acme", None)
        .await
        .assert_error(403, "forbidden");
    // Reads are not audited.
    admin(&server, Method::GET, "/admin/tenants", None).await;

    let all = admin(&server, Method::GET, "/admin/audit", None).await;
    assert_eq!(all.status, 200);
    let entries = all.body.as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "tenant.delete",
            "policy.denied",
            "tenant.create",
            "quota.save",
            "policy.create",
            "tenant.create"
        ],
        "newest first"
    );
    let entry = |action: &str, outcome: &str| {
        entries
            .iter()
            .find(|e| e["action"] == action && e["outcome"] == outcome)
            .unwrap_or_else(|| panic!("no {action} {outcome} in {entries:?}"))
            .clone()
    };
    let create = entry("policy.create", "success");
    assert_eq!(create["actor"], "root");
    assert_eq!(create["role"], "admin");
    assert_eq!(create["tenant_id"], "acme");
    assert_eq!(create["resource"], "/admin/tenants/acme/policies");
    let denial = entry("policy.denied", "denied");
    assert_eq!(denial["actor"], "olga");
    assert_eq!(denial["tenant_id"], "acme");
    assert_eq!(denial["details"]["policy_name"], "no-ghcr");
    assert_eq!(denial["details"]["value"], "ghcr.io/a/b");
    assert_eq!(entry("tenant.create", "failure")["details"]["status"], 409);
    assert_eq!(entry("tenant.delete", "denied")["actor"], "olga");
    assert_eq!(entry("quota.save", "success")["actor"], "admin-api-key");
    for e in entries {
        for field in [
            "id",
            "timestamp",
            "actor",
            "role",
            "tenant_id",
            "action",
            "resource",
            "outcome",
            "details",
        ] {
            assert!(e.get(field).is_some(), "{field} missing in {e}");
        }
    }

    // Filters.
    let filtered = |query: String| {
        let server = &server;
        async move {
            let reply = admin(server, Method::GET, &format!("/admin/audit{query}"), None).await;
            assert_eq!(reply.status, 200, "{query}: {}", reply.body);
            reply
                .body
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["action"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        filtered("?actor=olga".into()).await,
        ["tenant.delete", "policy.denied"]
    );
    assert_eq!(filtered("?action=tenant.create".into()).await.len(), 2);
    assert_eq!(
        filtered("?tenant_id=acme&limit=2".into()).await,
        ["tenant.delete", "policy.denied"]
    );
    let since = started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(filtered(format!("?since={since}")).await.len(), 6);
    assert_eq!(
        filtered("?until=2000-01-01T00:00:00Z".into()).await.len(),
        0
    );
    for bad in [
        "?limit=0",
        "?limit=1001",
        "?limit=x",
        "?since=yesterday",
        "?format=xml",
    ] {
        let field = bad[1..].split('=').next().unwrap();
        let message = admin(&server, Method::GET, &format!("/admin/audit{bad}"), None)
            .await
            .assert_error(400, "bad_request");
        assert!(message.starts_with(field), "{bad}: {message}");
    }
    // The tenant's own route is the same, fixed to the tenant.
    let own = admin(&server, Method::GET, "/admin/tenants/acme/audit", None).await;
    let own_actions: Vec<&str> = own
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        own_actions,
        ["tenant.delete", "policy.denied", "policy.create"]
    );

    // CSV, parsed back with a CSV reader: the header in decisions §6's order, then the rows.
    let response = server
        .client
        .get(server.url("/admin/audit?format=csv"))
        .header("X-Admin-API-Key", ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let text = response.text().await.unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(
        reader.headers().unwrap().iter().collect::<Vec<_>>(),
        [
            "id",
            "timestamp",
            "actor",
            "role",
            "tenant_id",
            "action",
            "resource",
            "outcome",
            "details"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), entries.len());
    for (row, entry) in rows.iter().zip(entries) {
        assert_eq!(&row[0], entry["id"].as_str().unwrap());
        assert_eq!(&row[1], entry["timestamp"].as_str().unwrap());
        assert_eq!(&row[5], entry["action"].as_str().unwrap());
        let details: Value = serde_json::from_str(&row[8]).unwrap();
        assert_eq!(details, entry["details"]);
    }
}

#[tokio::test]
async fn cors_preflight_is_answered_for_allowed_origins_only() {
    let server = TestServer::start_with(|c| {
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(ADMIN_KEY);
        c.server.cors_allowed_origins = vec!["https://console.example.com".to_owned()];
    })
    .await;
    let preflight = |origin: &'static str| {
        server
            .client
            .request(Method::OPTIONS, server.url("/sandboxes"))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "authorization, x-api-key, content-type",
            )
            .send()
    };
    // Answered before authentication: a preflight carries no credentials.
    let allowed = preflight("https://console.example.com").await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    let headers = allowed.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://console.example.com"
    );
    let allowed_headers = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        allowed_headers.contains("authorization") && allowed_headers.contains("x-api-key"),
        "{allowed_headers}"
    );
    let other = preflight("https://evil.example.com").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    // Actual requests carry the header for allowed origins.
    let reply = server
        .client
        .get(server.url("/sandboxes"))
        .header("Origin", "https://console.example.com")
        .header("X-API-Key", ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(
        reply.headers()["access-control-allow-origin"],
        "https://console.example.com"
    );
    // Browser clients may read the headers they need: request and exec IDs, rate limits.
    let exposed = reply.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in [
        "x-request-id",
        "retry-after",
        "x-ratelimit-limit",
        "x-exec-id",
    ] {
        assert!(exposed.contains(name), "{name} is not exposed: {exposed}");
    }
}

const API_KEY: &str = "tenancy-api-key-0123456789abcdef";

/// A server taking the API key, the admin API key and bearer tokens, with tenants `acme` and
/// `globex` created.
async fn template_server(idp: &Idp) -> TestServer {
    let server = TestServer::start_with(|c| {
        idp.configure(c);
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
        c.auth.admin_api_key = svc_core::config::Secret::new(ADMIN_KEY);
    })
    .await;
    create_tenant(&server, "acme").await;
    create_tenant(&server, "globex").await;
    server
}

async fn api_key(server: &TestServer, method: Method, path: &str, body: Option<Value>) -> Reply {
    server
        .call_as(&[("X-API-Key", API_KEY)], method, path, body)
        .await
}

/// The names of `GET /templates` for `token`'s caller.
async fn template_names(server: &TestServer, token: &str) -> Vec<String> {
    let reply = call_with(server, token, Method::GET, "/templates", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            crate::harness::assert_schema("Template", t);
            t["name"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Decisions §30: a template made by an OIDC caller is its tenant's, and to another tenant's
/// callers it does not exist: reading, replacing, deleting and building it is 404, exactly as
/// for a missing one, and it stays as it was (the probe that found this: globex's operator
/// pointed acme's template at an image of its own, and acme's next spawn ran it).
#[tokio::test]
async fn another_tenants_template_is_not_found() {
    let idp = Idp::start().await;
    let server = template_server(&idp).await;
    let alice = idp.token("alice", &["operators"], Some("acme"));
    let gary = idp.token("gary", &["operators"], Some("globex"));
    let created = call_with(
        &server,
        &alice,
        Method::POST,
        "/templates",
        Some(json!({"name": "acme-py", "image": "docker.io/library/alpine:3"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    crate::harness::assert_schema("Template", &created.body);
    assert_eq!(created.body["tenant_id"], "acme", "{}", created.body);
    let own = call_with(
        &server,
        &gary,
        Method::POST,
        "/templates",
        Some(json!({"name": "globex-py"})),
    )
    .await;
    assert_eq!(own.status, 201, "{}", own.body);
    assert_eq!(own.body["tenant_id"], "globex");

    let missing = call_with(&server, &gary, Method::GET, "/templates/nope", None)
        .await
        .assert_error(404, "not_found");
    let attempts: Vec<(Method, &str, Option<Value>)> = vec![
        (Method::GET, "/templates/acme-py", None),
        (
            Method::PUT,
            "/templates/acme-py",
            Some(json!({"image": "ghcr.io/globex/payload:1"})),
        ),
        (Method::DELETE, "/templates/acme-py", None),
        (
            Method::POST,
            "/templates/acme-py/build",
            Some(json!({"dockerfile": "FROM ghcr.io/globex/payload:1"})),
        ),
        (Method::GET, "/templates/acme-py/builds", None),
        (
            Method::GET,
            "/templates/acme-py/builds/bd-0123456789abcdef",
            None,
        ),
    ];
    for (method, path, body) in attempts {
        let message = call_with(&server, &gary, method.clone(), path, body)
            .await
            .assert_error(404, "not_found");
        if path == "/templates/acme-py" {
            assert_eq!(
                message,
                missing.replace("nope", "acme-py"),
                "{method} {path}: the same answer as for a missing template"
            );
        }
    }
    // Unchanged, to its own tenant and to the API key.
    for reply in [
        call_with(&server, &alice, Method::GET, "/templates/acme-py", None).await,
        api_key(&server, Method::GET, "/templates/acme-py", None).await,
    ] {
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body, created.body);
    }
    assert_eq!(template_names(&server, &gary).await, ["globex-py"]);
    assert_eq!(template_names(&server, &alice).await, ["acme-py"]);
    let every = api_key(&server, Method::GET, "/templates", None).await;
    assert_eq!(every.body.as_array().unwrap().len(), 2, "{}", every.body);
    // Its own tenant still may change it.
    let replaced = call_with(
        &server,
        &alice,
        Method::PUT,
        "/templates/acme-py",
        Some(json!({"image": "docker.io/library/alpine:3.20"})),
    )
    .await;
    assert_eq!(replaced.status, 200, "{}", replaced.body);
    assert_eq!(
        replaced.body["tenant_id"], "acme",
        "a replace keeps the tenant"
    );
    assert_eq!(
        call_with(&server, &alice, Method::DELETE, "/templates/acme-py", None)
            .await
            .status,
        200
    );
}

/// Decisions §30: global templates (no tenant) are what API-key and admin callers make unless
/// the body names a tenant; every tenant sees them, none may change them (403). Names are
/// unique across tenants; `tenant_id` names only the caller's own tenant (OIDC) or an existing
/// one, and a replace keeps it. Viewers change nothing; without credentials nothing answers.
#[tokio::test]
async fn global_templates_are_read_only_to_tenants() {
    let idp = Idp::start().await;
    let server = template_server(&idp).await;
    let alice = idp.token("alice", &["operators"], Some("acme"));
    let gary = idp.token("gary", &["operators"], Some("globex"));
    let vera = idp.token("vera", &["viewers"], Some("acme"));

    let shared = api_key(
        &server,
        Method::POST,
        "/templates",
        Some(json!({"name": "shared", "image": "docker.io/library/alpine:3"})),
    )
    .await;
    assert_eq!(shared.status, 201, "{}", shared.body);
    assert_eq!(shared.body["tenant_id"], Value::Null, "{}", shared.body);
    crate::harness::assert_schema("Template", &shared.body);
    let by_admin = admin(
        &server,
        Method::POST,
        "/templates",
        Some(json!({"name": "admin-global"})),
    )
    .await;
    assert_eq!(by_admin.body["tenant_id"], Value::Null, "{}", by_admin.body);
    let named = admin(
        &server,
        Method::POST,
        "/templates",
        Some(json!({"name": "acme-lib", "tenant_id": "acme"})),
    )
    .await;
    assert_eq!(named.status, 201, "{}", named.body);
    assert_eq!(named.body["tenant_id"], "acme");
    let message = api_key(
        &server,
        Method::POST,
        "/templates",
        Some(json!({"name": "lost", "tenant_id": "nowhere"})),
    )
    .await
    .assert_error(400, "bad_request");
    assert!(message.starts_with("tenant_id"), "{message}");

    // Every tenant sees the global ones and its own.
    assert_eq!(
        template_names(&server, &gary).await,
        ["admin-global", "shared"]
    );
    assert_eq!(
        template_names(&server, &alice).await,
        ["acme-lib", "admin-global", "shared"]
    );
    let got = call_with(&server, &gary, Method::GET, "/templates/shared", None).await;
    assert_eq!(got.status, 200, "{}", got.body);

    // No tenant changes a global template.
    for (method, path, body) in [
        (
            Method::PUT,
            "/templates/shared",
            Some(json!({"image": "ghcr.io/globex/payload:1"})),
        ),
        (Method::DELETE, "/templates/shared", None),
        (
            Method::POST,
            "/templates/shared/build",
            Some(json!({"dockerfile": "FROM ghcr.io/globex/payload:1"})),
        ),
    ] {
        let message = call_with(&server, &gary, method.clone(), path, body)
            .await
            .assert_error(403, "forbidden");
        assert!(
            message.contains("shared") && message.contains("global"),
            "{method} {path}: {message}"
        );
    }
    let after = api_key(&server, Method::GET, "/templates/shared", None).await;
    assert_eq!(after.body, shared.body);

    // Names are unique across tenants.
    for (token, name) in [(&alice, "shared"), (&gary, "acme-lib")] {
        call_with(
            &server,
            token,
            Method::POST,
            "/templates",
            Some(json!({"name": name})),
        )
        .await
        .assert_error(409, "conflict");
    }

    // An OIDC caller names only its own tenant.
    let message = call_with(
        &server,
        &alice,
        Method::POST,
        "/templates",
        Some(json!({"name": "elsewhere", "tenant_id": "globex"})),
    )
    .await
    .assert_error(403, "forbidden");
    assert!(message.starts_with("tenant_id"), "{message}");
    let own = call_with(
        &server,
        &alice,
        Method::POST,
        "/templates",
        Some(json!({"name": "acme-own", "tenant_id": "acme"})),
    )
    .await;
    assert_eq!(own.status, 201, "{}", own.body);
    assert_eq!(own.body["tenant_id"], "acme");

    // A replace keeps the tenant, and names no other.
    for (reply, path) in [
        (
            call_with(
                &server,
                &alice,
                Method::PUT,
                "/templates/acme-own",
                Some(json!({"tenant_id": "globex"})),
            )
            .await,
            "acme-own",
        ),
        (
            admin(
                &server,
                Method::PUT,
                "/templates/shared",
                Some(json!({"tenant_id": "acme"})),
            )
            .await,
            "shared",
        ),
    ] {
        let message = reply.assert_error(400, "bad_request");
        assert!(message.starts_with("tenant_id"), "{path}: {message}");
    }
    let replaced = admin(
        &server,
        Method::PUT,
        "/templates/acme-lib",
        Some(json!({"image": "docker.io/library/alpine:3.20"})),
    )
    .await;
    assert_eq!(replaced.status, 200, "{}", replaced.body);
    assert_eq!(replaced.body["tenant_id"], "acme");
    let replaced = admin(
        &server,
        Method::PUT,
        "/templates/shared",
        Some(json!({"image": "docker.io/library/alpine:3.20", "tenant_id": null})),
    )
    .await;
    assert_eq!(replaced.status, 200, "{}", replaced.body);
    assert_eq!(replaced.body["tenant_id"], Value::Null);

    // A viewer reads, and changes nothing, not even its own tenant's.
    assert_eq!(
        template_names(&server, &vera).await,
        ["acme-lib", "acme-own", "admin-global", "shared"]
    );
    for (method, path, body) in [
        (Method::POST, "/templates", Some(json!({"name": "v"}))),
        (
            Method::PUT,
            "/templates/acme-own",
            Some(json!({"image": "docker.io/library/alpine:3"})),
        ),
        (Method::DELETE, "/templates/acme-own", None),
        (Method::DELETE, "/templates/shared", None),
    ] {
        call_with(&server, &vera, method.clone(), path, body)
            .await
            .assert_error(403, "forbidden");
    }
    // Without credentials: 401 on every template route.
    for (method, path, body) in [
        (Method::GET, "/templates", None),
        (Method::GET, "/templates/acme-own", None),
        (Method::POST, "/templates", Some(json!({"name": "anon"}))),
        (Method::PUT, "/templates/shared", Some(json!({}))),
        (Method::DELETE, "/templates/shared", None),
    ] {
        server
            .call(method, path, body)
            .await
            .assert_error(401, "unauthorized");
    }
    let every = api_key(&server, Method::GET, "/templates", None).await;
    assert_eq!(every.body.as_array().unwrap().len(), 4, "{}", every.body);
}

/// Decisions §30: spawning from a template another tenant owns is 404 (by name in
/// `POST /sandboxes`, 400 as for a missing one), and nothing is spawned.
#[tokio::test]
async fn spawning_from_another_tenants_template_is_refused() {
    let idp = Idp::start().await;
    let server = template_server(&idp).await;
    let alice = idp.token("alice", &["operators"], Some("acme"));
    let gary = idp.token("gary", &["operators"], Some("globex"));
    let created = call_with(
        &server,
        &alice,
        Method::POST,
        "/templates",
        Some(json!({"name": "acme-py", "image": "docker.io/library/alpine:3"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    call_with(
        &server,
        &gary,
        Method::POST,
        "/templates/acme-py/spawn",
        Some(json!({})),
    )
    .await
    .assert_error(404, "not_found");
    let message = call_with(
        &server,
        &gary,
        Method::POST,
        "/sandboxes",
        Some(json!({"template": "acme-py"})),
    )
    .await
    .assert_error(400, "bad_request");
    assert!(message.starts_with("template"), "{message}");
    let spawned = api_key(&server, Method::GET, "/sandboxes?state=all", None).await;
    assert_eq!(spawned.body, json!([]), "nothing was spawned");
    // Its own tenant spawns from it.
    let own = call_with(
        &server,
        &alice,
        Method::POST,
        "/templates/acme-py/spawn",
        Some(json!({})),
    )
    .await;
    assert_eq!(own.status, 201, "{}", own.body);
    assert_eq!(own.body["image"], "docker.io/library/alpine:3");
    assert_eq!(own.body["tenant_id"], "acme");
}
