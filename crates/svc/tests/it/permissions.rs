//! The permission matrix of decisions §5 over HTTP: every route the server documents, called by
//! every role (viewer, operator and tenant_admin by bearer token; api and admin by key). A
//! refused call is 403 `forbidden` whatever its body; an allowed one is never 401 or 403.

use reqwest::Method;
use serde_json::Value;

use crate::harness::TestServer;
use crate::idp::{bearer, Idp};

const API_KEY: &str = "matrix-api-key-0123456789abcdef0123";
const ADMIN_KEY: &str = "matrix-admin-key-0123456789abcdef01";

/// Rows of decisions §5: R read, L lifecycle, C configure, Q quota writes, T own tenant's
/// administration, A every other admin route.
const ROUTES: &[(&str, &str, char)] = &[
    ("GET", "/admin/audit", 'A'),
    ("GET", "/admin/diagnostics", 'A'),
    ("GET", "/admin/metrics", 'A'),
    ("GET", "/admin/metrics/scrape", 'A'),
    ("GET", "/admin/providers", 'A'),
    ("GET", "/admin/providers/{name}", 'A'),
    ("POST", "/admin/providers/test", 'A'),
    ("GET", "/admin/quotas", 'A'),
    ("GET", "/admin/quotas/summary", 'A'),
    ("GET", "/admin/quotas/{ownerID}", 'A'),
    ("PUT", "/admin/quotas/{ownerID}", 'A'),
    ("DELETE", "/admin/quotas/{ownerID}", 'A'),
    ("GET", "/admin/quotas/{ownerID}/usage", 'A'),
    ("GET", "/admin/tenants", 'A'),
    ("POST", "/admin/tenants", 'A'),
    ("GET", "/admin/tenants/{tenantID}", 'A'),
    ("DELETE", "/admin/tenants/{tenantID}", 'A'),
    ("GET", "/admin/tenants/{tenantID}/audit", 'T'),
    ("GET", "/admin/tenants/{tenantID}/members", 'T'),
    ("PUT", "/admin/tenants/{tenantID}/members/{subject}", 'T'),
    ("DELETE", "/admin/tenants/{tenantID}/members/{subject}", 'T'),
    ("GET", "/admin/tenants/{tenantID}/policies", 'T'),
    ("POST", "/admin/tenants/{tenantID}/policies", 'T'),
    ("GET", "/admin/tenants/{tenantID}/policies/{policyID}", 'T'),
    ("PUT", "/admin/tenants/{tenantID}/policies/{policyID}", 'T'),
    (
        "DELETE",
        "/admin/tenants/{tenantID}/policies/{policyID}",
        'T',
    ),
    ("POST", "/admin/worker-tokens", 'A'),
    ("DELETE", "/admin/workers/{workerID}", 'A'),
    ("POST", "/admin/workers/{workerID}/heartbeat", 'A'),
    ("POST", "/admin/workers/{workerID}/drain", 'A'),
    ("POST", "/admin/workers/{workerID}/undrain", 'A'),
    ("GET", "/diagnostics", 'R'),
    ("GET", "/events", 'R'),
    ("GET", "/metrics", 'R'),
    ("GET", "/metrics/scrape", 'R'),
    ("GET", "/pool/status", 'R'),
    ("GET", "/providers", 'R'),
    ("GET", "/providers/{name}", 'R'),
    ("POST", "/providers/test", 'C'),
    ("GET", "/quotas", 'R'),
    ("GET", "/quotas/summary", 'R'),
    ("GET", "/quotas/{ownerID}", 'R'),
    ("PUT", "/quotas/{ownerID}", 'Q'),
    ("DELETE", "/quotas/{ownerID}", 'Q'),
    ("GET", "/quotas/{ownerID}/usage", 'R'),
    ("GET", "/sandboxes", 'R'),
    ("POST", "/sandboxes", 'L'),
    ("DELETE", "/sandboxes", 'L'),
    ("POST", "/sandboxes/admission", 'L'),
    ("GET", "/sandboxes/{id}", 'R'),
    ("DELETE", "/sandboxes/{id}", 'L'),
    ("POST", "/sandboxes/{id}/exec", 'L'),
    ("GET", "/sandboxes/{id}/exec/ws", 'L'),
    ("GET", "/sandboxes/{id}/execs", 'R'),
    ("GET", "/sandboxes/{id}/execs/{exec_id}", 'R'),
    ("DELETE", "/sandboxes/{id}/execs/{exec_id}", 'L'),
    ("GET", "/sandboxes/{id}/execs/{exec_id}/output", 'R'),
    ("POST", "/sandboxes/{id}/execs/{exec_id}/stdin", 'L'),
    ("POST", "/sandboxes/{id}/execs/{exec_id}/signal", 'L'),
    ("POST", "/sandboxes/{id}/extend", 'L'),
    ("POST", "/sandboxes/{id}/pause", 'L'),
    ("POST", "/sandboxes/{id}/resume", 'L'),
    ("POST", "/sandboxes/{id}/preview-tokens", 'L'),
    ("GET", "/sandboxes/{id}/files", 'R'),
    ("POST", "/sandboxes/{id}/files", 'L'),
    ("PUT", "/sandboxes/{id}/files", 'L'),
    ("GET", "/sandboxes/{id}/files/archive", 'R'),
    ("PUT", "/sandboxes/{id}/files/archive", 'L'),
    ("DELETE", "/sandboxes/{id}/files", 'L'),
    ("POST", "/sandboxes/{id}/files/chmod", 'L'),
    ("GET", "/sandboxes/{id}/files/glob", 'R'),
    ("GET", "/sandboxes/{id}/files/list", 'R'),
    ("POST", "/sandboxes/{id}/files/move", 'L'),
    ("GET", "/sandboxes/{id}/files/stat", 'R'),
    ("GET", "/sandboxes/{id}/logs", 'R'),
    ("GET", "/sandboxes/{id}/stats", 'R'),
    ("GET", "/snapshots", 'R'),
    ("GET", "/templates", 'R'),
    ("POST", "/templates", 'C'),
    ("GET", "/templates/{name}", 'R'),
    ("PUT", "/templates/{name}", 'C'),
    ("DELETE", "/templates/{name}", 'C'),
    ("POST", "/templates/{name}/spawn", 'L'),
    ("POST", "/templates/{name}/build", 'C'),
    ("GET", "/templates/{name}/builds", 'R'),
    ("GET", "/templates/{name}/builds/{build_id}", 'R'),
    ("DELETE", "/templates/{name}/builds/{build_id}", 'C'),
    ("GET", "/templates/{name}/builds/{build_id}/logs", 'R'),
    ("GET", "/workers", 'R'),
    ("GET", "/workers/{workerID}", 'R'),
];

/// Decisions §5's columns: viewer, operator, tenant_admin, api, admin (no admin fallback here:
/// an admin key is configured).
fn allowed(row: char, role: &str) -> bool {
    let column = ["viewer", "operator", "tenant_admin", "api", "admin"]
        .iter()
        .position(|r| *r == role)
        .unwrap();
    let cells = match row {
        'R' => [true, true, true, true, true],
        'L' | 'C' => [false, true, true, true, true],
        'Q' => [false, false, false, true, true],
        'T' => [false, false, true, false, true],
        'A' => [false, false, false, false, true],
        other => panic!("no row {other}"),
    };
    cells[column]
}

fn fill(template: &str) -> String {
    template
        .replace("{id}", "sb-0000000000000000")
        .replace("{name}", "none")
        .replace("{ownerID}", "alice")
        .replace("{tenantID}", "default")
        .replace("{subject}", "someone")
        .replace("{policyID}", "pol-0000000000000000")
        .replace("{workerID}", "w-none")
}

#[tokio::test]
async fn every_route_follows_the_matrix_for_every_role() {
    let idp = Idp::start().await;
    let server = TestServer::start_with(|c| {
        idp.configure(c);
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
        c.auth.admin_api_key = svc_core::config::Secret::new(ADMIN_KEY);
    })
    .await;
    // The table covers exactly the documented routes (probes and worker routes aside).
    let document: Value = server
        .client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut documented = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        let path = path.strip_prefix("/api/v1").unwrap();
        if ["/health", "/live", "/ready"].contains(&path) || path.starts_with("/worker/") {
            continue;
        }
        for method in item.as_object().unwrap().keys() {
            documented.push((method.to_uppercase(), path.to_owned()));
        }
    }
    documented.sort();
    let mut table: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    table.sort();
    assert_eq!(documented, table, "classify every route in ROUTES");

    let viewer = bearer(&idp.token("v", &["viewers"], None));
    let operator = bearer(&idp.token("o", &["operators"], None));
    let lead = bearer(&idp.token("t", &["leads"], None));
    let callers: [(&str, (&str, &str)); 5] = [
        ("viewer", ("Authorization", viewer.as_str())),
        ("operator", ("Authorization", operator.as_str())),
        ("tenant_admin", ("Authorization", lead.as_str())),
        ("api", ("X-API-Key", API_KEY)),
        ("admin", ("X-Admin-API-Key", ADMIN_KEY)),
    ];
    let mut checked = 0;
    for (method, template, row) in ROUTES {
        let url = server.url(&fill(template));
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        // Unauthenticated: 401 everywhere.
        let anonymous = server
            .client
            .request(method.clone(), &url)
            .send()
            .await
            .unwrap();
        assert_eq!(
            anonymous.status(),
            401,
            "{method} {template} without credentials"
        );
        for (role, (header, value)) in callers {
            let mut request = server
                .client
                .request(method.clone(), &url)
                .header(header, value);
            if method == Method::POST || method == Method::PUT {
                // An empty object: refused calls must be 403 whatever the body holds.
                request = request.json(&serde_json::json!({}));
            }
            // The status is enough; streams (events) are dropped unread.
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            if allowed(*row, role) {
                assert!(
                    status != 401 && status != 403,
                    "{role} may {method} {template}, got {status}"
                );
            } else {
                assert_eq!(status, 403, "{role} may not {method} {template}");
                let body: Value = response.json().await.unwrap();
                assert_eq!(body["code"], "forbidden", "{role} {method} {template}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, ROUTES.len() * 5);
}
