//! Templates: CRUD, duplicate names, spawning from a template.

use reqwest::Method;
use serde_json::json;

use crate::harness::TestServer;

#[tokio::test]
async fn template_crud() {
    let server = TestServer::start().await;
    let created = server
        .post("/templates", json!({"name": "py", "image": "python:3.12", "memory_mb": 1024, "vcpus": 2, "ttl": "1h", "metadata": {"lang": "python"}}))
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    crate::harness::assert_schema("Template", &created.body);
    assert_eq!(created.body["name"], "py");
    assert_eq!(created.body["image"], "python:3.12");
    assert_eq!(created.body["memory_mb"], 1024);
    assert_eq!(created.body["vcpus"], 2);
    assert_eq!(created.body["ttl"], "1h0m0s");
    assert_eq!(created.body["provider"], "mock");
    assert_eq!(created.body["metadata"], json!({"lang": "python"}));

    let duplicate = server.post("/templates", json!({"name": "py"})).await;
    duplicate.assert_error(409, "conflict");

    let minimal = server.post("/templates", json!({"name": "alpha"})).await;
    assert_eq!(minimal.status, 201);
    assert_eq!(
        minimal.body["image"], "alpine:latest",
        "defaults fill omitted fields"
    );
    assert_eq!(minimal.body["ttl"], "30m0s");

    let list = server.get("/templates").await;
    let names: Vec<_> = list
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("alpha"), json!("py")]);
    assert_eq!(server.get("/templates/py").await.body, created.body);

    let updated = server
        .call(
            Method::PUT,
            "/templates/py",
            Some(json!({"image": "python:3.13", "ttl": "2h"})),
        )
        .await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    assert_eq!(updated.body["image"], "python:3.13");
    assert_eq!(updated.body["ttl"], "2h0m0s");
    assert_eq!(updated.body["created_at"], created.body["created_at"]);
    server
        .call(
            Method::PUT,
            "/templates/missing",
            Some(json!({"image": "x"})),
        )
        .await
        .assert_error(404, "not_found");

    let deleted = server.delete("/templates/py").await;
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.body, json!({"status": "deleted"}));
    server
        .get("/templates/py")
        .await
        .assert_error(404, "not_found");
    server
        .delete("/templates/py")
        .await
        .assert_error(404, "not_found");
    server.shutdown().await;
}

#[tokio::test]
async fn invalid_templates_are_rejected() {
    let server = TestServer::start().await;
    server
        .post("/templates", json!({"image": "x"}))
        .await
        .assert_error(400, "bad_request");
    server
        .post("/templates", json!({"name": "a b"}))
        .await
        .assert_error(400, "bad_request");
    server
        .post("/templates", json!({"name": "t", "ttl": "soon"}))
        .await
        .assert_error(400, "bad_request");
    server
        .post("/templates", json!({"name": "t", "memory_mb": 0}))
        .await
        .assert_error(400, "bad_request");
    let message = server
        .post("/templates", json!({"name": "t", "provider": "nope"}))
        .await
        .assert_error(400, "bad_request");
    assert!(message.contains("mock"), "{message}");
    assert_eq!(server.get("/templates").await.body, json!([]));
    server.shutdown().await;
}

#[tokio::test]
async fn spawn_from_template_uses_its_fields_and_overrides() {
    let server = TestServer::start().await;
    server
        .post("/templates", json!({"name": "py", "image": "python:3.12", "memory_mb": 256, "ttl": "1h", "metadata": {"lang": "python"}}))
        .await;
    let spawned = server
        .post("/templates/py/spawn", json!({"ttl": "10m"}))
        .await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    assert_eq!(spawned.body["image"], "python:3.12");
    assert_eq!(spawned.body["memory_mb"], 256);
    assert_eq!(spawned.body["metadata"], json!({"lang": "python"}));
    let created =
        chrono::DateTime::parse_from_rfc3339(spawned.body["created_at"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(spawned.body["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!((expires - created).num_seconds(), 600);

    // No body at all is fine: the body is optional.
    let bare = server.call(Method::POST, "/templates/py/spawn", None).await;
    assert_eq!(bare.status, 201, "{}", bare.body);

    // The spawn body may name a template too.
    let by_field = server
        .spawn(json!({"template": "py", "memory_mb": 128}))
        .await;
    assert_eq!(by_field["image"], "python:3.12");
    assert_eq!(by_field["memory_mb"], 128);

    server
        .post("/templates/missing/spawn", json!({}))
        .await
        .assert_error(404, "not_found");
    let message = server
        .post("/sandboxes", json!({"template": "missing"}))
        .await
        .assert_error(400, "bad_request");
    assert!(message.contains("template"), "{message}");
    server
        .post("/templates/py/spawn", json!({"provider": "nope"}))
        .await
        .assert_error(400, "bad_request");
    assert_eq!(server.listed_ids("").await.len(), 3);
    server.shutdown().await;
}
