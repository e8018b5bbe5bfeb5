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
