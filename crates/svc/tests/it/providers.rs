//! `/providers`, `/snapshots`, `/pool/status`.

use serde_json::json;

use crate::harness::TestServer;

#[tokio::test]
async fn provider_summary_detail_and_test() {
    let server = TestServer::start().await;
    let list = server.get("/providers").await;
    assert_eq!(list.status, 200);
    let mock = &list.body[0];
    crate::harness::assert_schema("ProviderSummary", mock);
    assert_eq!(mock["name"], "mock");
    assert_eq!(mock["healthy"], true);
    assert_eq!(mock["default"], true);
    assert!(mock["latency_ms"].is_u64());
    assert!(mock["last_checked"].as_str().unwrap().ends_with('Z'));
    assert!(mock.get("error").is_none());
    let capabilities = mock["capabilities"].as_array().unwrap();
    assert!(capabilities.contains(&json!("spawn")) && capabilities.contains(&json!("health")));

    server.spawn(json!({})).await;
    let detail = server.get("/providers/mock").await;
    assert_eq!(detail.status, 200);
    crate::harness::assert_schema("ProviderDetail", &detail.body);
    assert_eq!(detail.body["name"], "mock");
    assert_eq!(detail.body["healthy"], true);
    assert_eq!(detail.body["default"], true);
    assert_eq!(detail.body["sandbox_count"], 1);
    assert_eq!(detail.body["health"]["name"], "mock");
    assert!(detail.body["config"].is_object());
    server
        .get("/providers/vmware")
        .await
        .assert_error(404, "not_found");

    let test = server.post("/providers/test", json!({})).await;
    assert_eq!(test.status, 200);
    assert_eq!(test.body, json!({"mock": true}));
    let refreshed = server.get("/providers").await;
    assert_eq!(refreshed.body[0]["runtime_count"], 1);
    server.shutdown().await;
}

#[tokio::test]
async fn snapshots_and_pool_status() {
    let server = TestServer::start().await;
    let snapshots = server.get("/snapshots").await;
    assert_eq!(snapshots.status, 200);
    assert_eq!(snapshots.body, json!([]));
    let pool = server.get("/pool/status").await;
    assert_eq!(pool.status, 200);
    assert_eq!(pool.body, json!({"enabled": false}));
    server.shutdown().await;
}

/// In pool mode every sandbox route needs the user it acts for (decisions §15); other routes
/// do not.
#[tokio::test]
async fn pool_mode_requires_a_user_on_sandbox_routes() {
    let server = TestServer::start_with(|c| c.pool.enabled = true).await;
    for (method, path) in [
        ("POST", "/sandboxes"),
        ("GET", "/sandboxes"),
        ("GET", "/sandboxes/sb-0000000000000000"),
        ("POST", "/sandboxes/sb-0000000000000000/exec"),
        ("POST", "/templates/base/spawn"),
    ] {
        let response = server
            .client
            .request(method.parse().unwrap(), server.url(path))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{method} {path}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["code"], "bad_request", "{method} {path}");
        assert!(
            body["message"].as_str().unwrap().contains("X-User-ID"),
            "{method} {path}: {body}"
        );
    }
    let listed = server
        .client
        .get(server.url("/sandboxes"))
        .header("X-User-ID", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(server.get("/providers").await.status, 200);
    assert_eq!(server.get("/pool/status").await.body["enabled"], true);
    server.shutdown().await;
}
