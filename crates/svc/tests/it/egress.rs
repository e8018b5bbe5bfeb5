//! Egress (decisions §18) through the API on the mock provider, which does not enforce it:
//! the field on sandboxes, its checks, 400 where the provider cannot enforce it, and tenant
//! `network` policies over the mode and each entry. Enforcement is tested on docker
//! (`docker.rs`).

use reqwest::Method;
use serde_json::json;

use crate::harness::TestServer;

#[tokio::test]
async fn egress_is_shown_checked_and_needs_a_provider_that_enforces_it() {
    let server = TestServer::start().await;
    let plain = server.spawn(json!({})).await;
    assert_eq!(plain["egress"], json!({"mode": "all", "allow": []}));
    crate::harness::assert_schema("Sandbox", &plain);

    let refused = server
        .post(
            "/sandboxes",
            json!({"egress": {"mode": "allowlist", "allow": ["10.0.0.1:80"]}}),
        )
        .await;
    let message = refused.assert_error(400, "bad_request");
    assert!(
        message.contains("egress") && message.contains("mock"),
        "{message}"
    );
    for (body, names) in [
        (
            json!({"mode": "allowlist", "allow": ["bad host"]}),
            "bad host",
        ),
        (json!({"mode": "none", "allow": ["x.com"]}), "allowlist"),
        (json!({"mode": "allowlist", "allow": ["x.com:0"]}), "port"),
        (json!({"mode": "sometimes"}), "mode"),
    ] {
        let reply = server.post("/sandboxes", json!({"egress": body})).await;
        let message = reply.assert_error(400, "bad_request");
        assert!(message.contains(names), "{body}: {message}");
    }
    server
        .post(
            "/templates",
            json!({"name": "closed", "egress": {"mode": "none"}}),
        )
        .await
        .assert_error(400, "bad_request");
    let open = server
        .post(
            "/templates",
            json!({"name": "open", "egress": {"mode": "all"}}),
        )
        .await;
    assert_eq!(open.status, 201, "{}", open.body);
    assert_eq!(open.body["egress"], json!({"mode": "all", "allow": []}));
    assert_eq!(server.listed_ids("").await.len(), 1, "nothing half made");
}

#[tokio::test]
async fn network_policies_see_the_egress_mode_and_each_entry() {
    let server = TestServer::start().await;
    let deny = |name: &str, pattern: &str| {
        let body =
            json!({"name": name, "resource": "network", "pattern": pattern, "effect": "deny"});
        let server = &server;
        async move {
            let reply = server
                .call(Method::POST, "/admin/tenants/default/policies", Some(body))
                .await;
            assert_eq!(reply.status, 201, "{}", reply.body);
        }
    };
    deny("no-private", "10.*").await;
    deny("no-closed", "none").await;
    let denied = server
        .post(
            "/sandboxes",
            json!({"egress": {"mode": "allowlist", "allow": ["example.com:443", "10.1.2.3:5432"]}}),
        )
        .await;
    let message = denied.assert_error(403, "policy_denied");
    assert!(
        message.contains("no-private") && message.contains("10.1.2.3:5432"),
        "{message}"
    );
    let closed = server
        .post("/sandboxes", json!({"egress": {"mode": "none"}}))
        .await;
    let message = closed.assert_error(403, "policy_denied");
    assert!(message.contains("no-closed"), "{message}");
    // Allowed by policy: on to the provider, which cannot enforce it here.
    server
        .post(
            "/sandboxes",
            json!({"egress": {"mode": "allowlist", "allow": ["example.com:443"]}}),
        )
        .await
        .assert_error(400, "bad_request");
    assert!(server.listed_ids("?state=all").await.is_empty());
}
