//! Owner quotas, their validation and aliases, the admission endpoint, and the effective limits
//! every spawn form, extend and exec are held to (interface "Owner quotas"; decisions §10).

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{assert_schema, TestServer};

async fn put_quota(server: &TestServer, path: &str, body: Value) -> crate::harness::Reply {
    server.call(Method::PUT, path, Some(body)).await
}

#[tokio::test]
async fn every_invalid_quota_is_a_400_naming_the_field() {
    let server = TestServer::start().await;
    let cases = [
        (json!({"max_sandboxes": -1}), "max_sandboxes"),
        (json!({"max_sandboxes": 1.5}), "max_sandboxes"),
        (json!({"max_sandboxes": "3"}), "max_sandboxes"),
        (json!({"max_ttl": "500ms"}), "max_ttl"),
        (json!({"max_ttl": "1.5s"}), "max_ttl"),
        (json!({"max_ttl": "-1h"}), "max_ttl"),
        (json!({"max_ttl": "soon"}), "max_ttl"),
        (json!({"max_ttl": 60}), "max_ttl"),
        (json!({"max_exec_timeout": "90.5s"}), "max_exec_timeout"),
        (json!({"max_exec_timeout": "1m-"}), "max_exec_timeout"),
    ];
    for (body, field) in cases {
        for prefix in ["/quotas", "/admin/quotas"] {
            let message = put_quota(&server, &format!("{prefix}/alice"), body.clone())
                .await
                .assert_error(400, "bad_request");
            assert!(message.contains(field), "{body}: {message}");
        }
    }
    let too_long = "a".repeat(129);
    for owner in [
        "a%20b",
        "a%2Fb",
        "a%5Cb",
        "a%07b",
        "%20%20",
        too_long.as_str(),
    ] {
        for path in [
            format!("/quotas/{owner}"),
            format!("/quotas/{owner}/usage"),
            format!("/admin/quotas/{owner}"),
        ] {
            let message = server.get(&path).await.assert_error(400, "bad_request");
            assert!(message.contains("ownerID"), "{path}: {message}");
        }
        put_quota(
            &server,
            &format!("/quotas/{owner}"),
            json!({"max_sandboxes": 1}),
        )
        .await
        .assert_error(400, "bad_request");
    }
    assert_eq!(
        server.get("/quotas").await.body,
        json!([]),
        "nothing invalid was saved"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn quotas_round_trip_identically_on_both_paths_with_events() {
    let server = TestServer::start_with(|c| {
        c.defaults.max_sandboxes_per_owner = 4;
        c.defaults.max_ttl = "2h".parse().unwrap();
        c.defaults.max_exec_timeout = "5m".parse().unwrap();
    })
    .await;
    let mut events = server
        .events("?types=quota.saved,quota.deleted", None)
        .await;
    server
        .get("/quotas/alice")
        .await
        .assert_error(404, "not_found");
    let usage = server.get("/quotas/alice/usage").await;
    assert_eq!(usage.status, 200);
    assert_schema("OwnerUsage", &usage.body);
    assert_eq!(
        usage.body,
        json!({"owner_id": "alice", "active_sandboxes": 0, "max_sandboxes": 4,
               "max_ttl": "2h0m0s", "max_exec_timeout": "5m0s", "quota_configured": false})
    );
    let saved = put_quota(
        &server,
        "/quotas/alice",
        json!({"max_sandboxes": 2, "max_ttl": "1h", "max_exec_timeout": "0s"}),
    )
    .await;
    assert_eq!(saved.status, 200, "{}", saved.body);
    assert_schema("OwnerQuota", &saved.body);
    assert_eq!(saved.body["owner_id"], "alice");
    assert_eq!(saved.body["max_sandboxes"], 2);
    assert_eq!(saved.body["max_ttl"], "1h0m0s");
    assert_eq!(saved.body["max_exec_timeout"], "0s");
    let event = events.until("quota.saved", Duration::from_secs(5)).await;
    assert_eq!(
        event.last().unwrap().data["data"],
        json!({"owner_id": "alice"})
    );
    put_quota(&server, "/admin/quotas/bob", json!({"max_ttl": "30m"})).await;
    server.spawn(json!({"owner_id": "alice"})).await;
    for (plain, admin) in [
        ("/quotas", "/admin/quotas"),
        ("/quotas/summary", "/admin/quotas/summary"),
        ("/quotas/alice", "/admin/quotas/alice"),
        ("/quotas/alice/usage", "/admin/quotas/alice/usage"),
    ] {
        let (a, b) = (server.get(plain).await, server.get(admin).await);
        assert_eq!(
            (a.status.as_u16(), b.status.as_u16()),
            (200, 200),
            "{plain}"
        );
        assert_eq!(a.body, b.body, "{plain} and {admin} answer the same");
    }
    let listed = server.get("/quotas").await.body;
    let owners: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["owner_id"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["alice", "bob"]);
    let summary = server.get("/quotas/summary").await.body;
    assert_schema("QuotaSummary", &summary);
    assert_eq!(
        summary,
        json!({"total": 2, "with_max_sandboxes": 1, "with_max_ttl": 2, "with_max_exec_timeout": 0})
    );
    let usage = server.get("/quotas/alice/usage").await.body;
    assert_eq!(
        usage,
        json!({"owner_id": "alice", "active_sandboxes": 1, "max_sandboxes": 2,
               "max_ttl": "1h0m0s", "max_exec_timeout": "5m0s", "quota_configured": true}),
        "zero fields inherit the global limits"
    );
    // Saving again keeps created_at.
    let again = put_quota(&server, "/quotas/alice", json!({"max_sandboxes": 3})).await;
    assert_eq!(again.body["created_at"], saved.body["created_at"]);
    assert_eq!(again.body["max_ttl"], "0s");
    let deleted = server.delete("/admin/quotas/alice").await;
    assert_eq!(
        (deleted.status.as_u16(), deleted.body.clone()),
        (200, json!({"status": "deleted"}))
    );
    let event = events.until("quota.deleted", Duration::from_secs(5)).await;
    assert_eq!(
        event.last().unwrap().data["data"],
        json!({"owner_id": "alice"})
    );
    server
        .delete("/quotas/alice")
        .await
        .assert_error(404, "not_found");
    assert_eq!(
        server.get("/quotas/alice/usage").await.body["quota_configured"],
        false
    );
    server.shutdown().await;
}

fn admission_body(reply: &crate::harness::Reply) -> &Value {
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_schema("Admission", &reply.body);
    &reply.body
}

#[tokio::test]
async fn admission_reports_reasons_in_order_and_creates_nothing() {
    let server = TestServer::start_with(|c| {
        c.defaults.max_sandboxes = 3;
        c.defaults.max_sandboxes_per_owner = 1;
        c.defaults.max_ttl = "1h".parse().unwrap();
    })
    .await;
    let check = |body: Value, owner: &'static str| {
        let server = &server;
        async move {
            server
                .call_as(
                    &[("X-User-ID", owner)],
                    Method::POST,
                    "/sandboxes/admission",
                    Some(body),
                )
                .await
        }
    };
    let reply = check(json!({}), "alice").await;
    assert_eq!(
        admission_body(&reply),
        &json!({"allowed": true, "queueable": false, "active_sandboxes": 0, "max_sandboxes": 3,
                "active_owner_sandboxes": 0, "max_owner_sandboxes": 1, "max_ttl": "1h0m0s"})
    );
    server.spawn(json!({"owner_id": "alice"})).await;
    let owner = check(json!({"owner_id": "someone-else"}), "alice").await;
    let owner = admission_body(&owner);
    assert_eq!(owner["allowed"], false);
    assert_eq!(
        owner["reason"], "max_owner_sandboxes",
        "X-User-ID overrides owner_id"
    );
    assert_eq!(owner["active_owner_sandboxes"], 1);
    // TTL comes first, and is never queueable.
    let ttl = check(json!({"ttl": "2h"}), "alice").await;
    assert_eq!(admission_body(&ttl)["reason"], "max_ttl");
    assert_eq!(admission_body(&ttl)["queueable"], false);
    server.spawn(json!({"owner_id": "bob"})).await;
    server.spawn(json!({"owner_id": "carol"})).await;
    let global = check(json!({}), "alice").await;
    assert_eq!(
        admission_body(&global)["reason"],
        "max_sandboxes",
        "global before owner"
    );
    assert_eq!(admission_body(&global)["active_sandboxes"], 3);
    // A quota lifts the owner's limit and the TTL ceiling for its owner only.
    put_quota(&server, "/quotas/dave", json!({"max_ttl": "3h"})).await;
    server
        .delete(&format!(
            "/sandboxes/{}",
            server.listed_ids("?owner_id=carol").await[0]
        ))
        .await;
    let dave = check(json!({"ttl": "2h30m"}), "dave").await;
    assert_eq!(admission_body(&dave)["allowed"], true);
    assert_eq!(admission_body(&dave)["max_ttl"], "3h0m0s");
    // Bad input is refused like a spawn's.
    server
        .post("/sandboxes/admission", json!({"ttl": "-1s"}))
        .await
        .assert_error(400, "bad_request");
    server
        .post("/sandboxes/admission", json!({"provider": "nope"}))
        .await
        .assert_error(400, "bad_request");
    assert_eq!(
        server.listed_ids("?state=all").await.len(),
        3,
        "admission created nothing"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn owner_quotas_apply_to_spawn_template_spawn_extend_and_every_exec_form() {
    let server = TestServer::start_with(|c| {
        c.defaults.max_sandboxes_per_owner = 1;
        c.defaults.max_ttl = "1h".parse().unwrap();
        c.defaults.max_exec_timeout = "10m".parse().unwrap();
    })
    .await;
    put_quota(
        &server,
        "/quotas/erin",
        json!({"max_sandboxes": 2, "max_ttl": "20m", "max_exec_timeout": "1s"}),
    )
    .await;
    let mut limits = server.events("?types=resource.limit", None).await;
    let headers = [("X-User-ID", "erin")];
    let spawn = |body: Value| {
        let server = &server;
        async move {
            server
                .call_as(&headers, Method::POST, "/sandboxes", Some(body))
                .await
        }
    };
    // The quota's TTL ceiling (20m) replaces the global one (1h).
    let message = spawn(json!({"ttl": "30m"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("max_ttl"), "{message}");
    let first = spawn(json!({"ttl": "10m"})).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let id = first.body["id"].as_str().unwrap().to_owned();
    // Template spawn: the same ceiling.
    let template = server
        .post("/templates", json!({"name": "long", "ttl": "45m"}))
        .await;
    assert_eq!(template.status, 201, "{}", template.body);
    let message = server
        .call_as(
            &headers,
            Method::POST,
            "/templates/long/spawn",
            Some(json!({})),
        )
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("max_ttl"), "{message}");
    // The quota's count (2) replaces the global per-owner limit (1).
    assert_eq!(spawn(json!({"ttl": "10m"})).await.status, 201);
    let message = spawn(json!({"ttl": "10m"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("2 of 2"), "{message}");
    // Extend: lifetime from creation within the quota's 20m.
    let extend = |ttl: &'static str| {
        let server = &server;
        let id = id.clone();
        async move {
            server
                .post(&format!("/sandboxes/{id}/extend"), json!({"ttl": ttl}))
                .await
        }
    };
    assert_eq!(extend("15m").await.status, 200);
    extend("25m").await.assert_error(429, "resource_limit");
    // Exec: the quota's 1s cap, for the buffered and the streamed form alike.
    let exec_path = format!("/sandboxes/{id}/exec");
    let message = server
        .post(&exec_path, json!({"command": "true", "timeout": "2s"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("max_exec_timeout"), "{message}");
    server
        .post(
            &exec_path,
            json!({"command": "true", "timeout": "2s", "stream": true}),
        )
        .await
        .assert_error(429, "resource_limit");
    // The default deadline (60s) is cut to the owner's cap.
    let capped = server.post(&exec_path, json!({"command": "sleep 5"})).await;
    assert_eq!(capped.status, 200, "{}", capped.body);
    assert_eq!(capped.body["timed_out"], true, "{}", capped.body);
    // Every denial was published, naming its reason and the owner.
    let mut reasons = Vec::new();
    for _ in 0..6 {
        let event = limits
            .next(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("a denial was not published; saw {reasons:?}"));
        assert_eq!(event.data["data"]["owner_id"], "erin");
        reasons.push(event.data["data"]["reason"].as_str().unwrap().to_owned());
    }
    if let Some(extra) = limits.next(Duration::from_millis(300)).await {
        panic!("a denial beyond {reasons:?}: {:?}", extra.data);
    }
    assert_eq!(
        reasons,
        [
            "max_ttl",
            "max_ttl",
            "max_owner_sandboxes",
            "max_ttl",
            "max_exec_timeout",
            "max_exec_timeout"
        ]
    );
    // Another owner still has the global caps.
    let other = server
        .spawn(json!({"owner_id": "frank", "ttl": "50m"}))
        .await;
    let ok = server
        .post(
            &format!("/sandboxes/{}/exec", other["id"].as_str().unwrap()),
            json!({"command": "true", "timeout": "5m"}),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    server.shutdown().await;
}
