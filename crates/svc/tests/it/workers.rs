//! The worker registry and sandbox leases over HTTP (interface parts 5–6; decisions §11): the
//! server registers itself, heartbeats, goes stale and offline; a lease another worker holds
//! fences the sandbox.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use svc_core::worker::{LeaseAcquire, WorkerStatus};
use svc_core::GoDuration;
use svc_store::sqlite::SqliteStore;
use svc_store::Store;

use crate::harness::{assert_schema, wait_for, TestServer};

/// The server's store, opened a second time (another process on the same file would).
async fn second_store(server: &TestServer) -> SqliteStore {
    SqliteStore::open(server.dir.path().join("svc.db"))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_server_registers_itself_goes_stale_and_goes_offline_at_shutdown() {
    let server = TestServer::start_with(|c| {
        c.defaults.max_sandboxes = 7;
        c.worker.heartbeat_interval = GoDuration::from_secs(3600);
    })
    .await;
    let listed = server.get("/workers").await;
    assert_eq!(listed.status, 200);
    let workers = listed.body.as_array().unwrap();
    assert_eq!(workers.len(), 1);
    let local = &workers[0];
    assert_schema("Worker", local);
    assert_eq!(local["id"], "local");
    assert_eq!(local["status"], "online");
    assert_eq!(local["stale"], false);
    assert_eq!(
        local["capabilities"],
        json!(["api", "single_node", "spawn", "exec", "files"])
    );
    assert!(local["providers"]
        .as_array()
        .unwrap()
        .contains(&json!("mock")));
    assert_eq!(local["capacity"]["max_sandboxes"], 7);
    assert!(!local["hostname"].as_str().unwrap().is_empty());
    assert_eq!(server.get("/workers/local").await.body, *local);
    server
        .get("/workers/nobody")
        .await
        .assert_error(404, "not_found");
    // No heartbeat within worker.stale_after (90s): stale, still online.
    server.clock.advance(Duration::from_secs(91));
    let stale = server.get("/workers/local").await.body;
    assert_eq!(
        (stale["stale"].clone(), stale["status"].clone()),
        (json!(true), json!("online"))
    );
    // The admin alias records a heartbeat as if the worker had sent it.
    let repaired = server
        .call(
            Method::POST,
            "/admin/workers/local/heartbeat",
            Some(
                json!({"hostname": "h", "status": "online", "providers": ["mock"],
                        "capabilities": ["api"], "capacity": {"max_sandboxes": 3}}),
            ),
        )
        .await;
    assert_eq!(repaired.status, 200, "{}", repaired.body);
    assert_eq!(repaired.body["stale"], false);
    assert_eq!(repaired.body["capacity"]["max_sandboxes"], 3);
    server
        .call(
            Method::POST,
            "/admin/workers/a%20b/heartbeat",
            Some(json!({})),
        )
        .await
        .assert_error(400, "bad_request");
    let dir = std::sync::Arc::clone(&server.dir);
    server.shutdown().await;
    let store = SqliteStore::open(dir.path().join("svc.db")).await.unwrap();
    let after = store.get_worker("local").await.unwrap().unwrap();
    assert_eq!(
        after.status,
        WorkerStatus::Offline,
        "shutdown records the worker offline"
    );
    store.close().await;
}

#[tokio::test]
async fn the_heartbeat_loop_refreshes_the_record_and_renews_held_leases() {
    let server = TestServer::start_with(|c| {
        c.worker.heartbeat_interval = GoDuration::from_millis(50);
        c.worker.stale_after = GoDuration::from_secs(5);
        c.worker.lease_ttl = GoDuration::from_secs(10);
    })
    .await;
    let sandbox = server.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    assert_eq!(sandbox["worker_id"], "local");
    let store = second_store(&server).await;
    let lease = store.get_lease(&id).await.unwrap().unwrap();
    assert_eq!((lease.holder_id.as_str(), lease.generation), ("local", 1));
    let first_expiry = lease.expires_at;
    server.clock.advance(Duration::from_secs(8));
    wait_for(
        "a heartbeat after the clock moved",
        Duration::from_secs(30),
        || async {
            let worker = server.get("/workers/local").await.body;
            let renewed = store.get_lease(&id).await.unwrap().unwrap().expires_at;
            worker["stale"] == false && renewed > first_expiry
        },
    )
    .await;
    store.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_lease_held_by_another_worker_fences_the_sandbox() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let store = second_store(&server).await;
    // Our lease (60s) lapses; another worker takes the sandbox over.
    let later = svc_core::Clock::now(server.clock.as_ref()) + chrono::Duration::seconds(61);
    let taken = store
        .acquire_lease(&id, "elsewhere", Duration::from_secs(600), later)
        .await
        .unwrap();
    assert!(
        matches!(taken, LeaseAcquire::Acquired(ref l) if l.generation == 2),
        "{taken:?}"
    );
    server.clock.advance(Duration::from_secs(61));
    let message = server
        .delete(&format!("/sandboxes/{id}"))
        .await
        .assert_error(409, "lease_conflict");
    assert!(message.contains("elsewhere"), "{message}");
    server
        .post(&format!("/sandboxes/{id}/exec"), json!({"command": "true"}))
        .await
        .assert_error(409, "lease_conflict");
    // Nothing changed: the record, the runtime and the lease are as they were.
    let record = server.get(&format!("/sandboxes/{id}")).await.body;
    assert_eq!(record["state"], "running");
    assert!(
        server.mock_root().join(&id).is_dir(),
        "the runtime is untouched"
    );
    assert_eq!(
        store.get_lease(&id).await.unwrap().unwrap().holder_id,
        "elsewhere"
    );
    // Released, the sandbox is ours to destroy again (a new generation).
    assert!(store.release_lease(&id, "elsewhere", later).await.unwrap());
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    let lease = store.get_lease(&id).await.unwrap().unwrap();
    assert_eq!((lease.holder_id.as_str(), lease.generation), ("local", 3));
    store.close().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_provider_only_other_workers_run_is_placed_there_and_refused() {
    let server =
        TestServer::start_with(|c| c.worker.heartbeat_interval = GoDuration::from_secs(3600)).await;
    let admission = |provider: &'static str| {
        let server = &server;
        async move {
            server
                .post("/sandboxes/admission", json!({"provider": provider}))
                .await
        }
    };
    // Nobody offers it: 400 naming the enabled providers.
    admission("firecracker")
        .await
        .assert_error(400, "bad_request");
    let heartbeat = json!({"hostname": "far", "status": "online", "providers": ["firecracker"],
                           "capabilities": ["spawn"], "capacity": {"max_sandboxes": 1}});
    let saved = server
        .call(
            Method::POST,
            "/admin/workers/far/heartbeat",
            Some(heartbeat.clone()),
        )
        .await;
    assert_eq!(saved.status, 200, "{}", saved.body);
    let decision = admission("firecracker").await;
    assert_eq!(decision.status, 200, "{}", decision.body);
    assert_eq!(decision.body["allowed"], false);
    assert_eq!(decision.body["reason"], "remote_worker_rpc_unavailable");
    assert_eq!(decision.body["queueable"], false);
    let mut limits = server.events("?types=resource.limit", None).await;
    let message = server
        .post("/sandboxes", json!({"provider": "firecracker"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(
        message.contains("remote_worker_rpc_unavailable"),
        "{message}"
    );
    let event = limits.until("resource.limit", Duration::from_secs(5)).await;
    assert_eq!(
        event.last().unwrap().data["data"]["reason"],
        "remote_worker_rpc_unavailable"
    );
    // The only offering worker is full: no eligible worker.
    let store = second_store(&server).await;
    let local = server.spawn(json!({})).await;
    let local_id = svc_core::SandboxId::parse(local["id"].as_str().unwrap()).unwrap();
    let busy = svc_core::sandbox::Sandbox {
        id: svc_core::SandboxId::generate(),
        worker_id: Some("far".to_owned()),
        provider: "firecracker".to_owned(),
        ..store.get_sandbox(&local_id).await.unwrap().unwrap()
    };
    store.insert_sandbox(&busy).await.unwrap();
    assert_eq!(
        admission("firecracker").await.body["reason"],
        "no_eligible_worker"
    );
    // A worker that stopped heartbeating is not offered: 400 again.
    server.clock.advance(Duration::from_secs(91));
    admission("firecracker")
        .await
        .assert_error(400, "bad_request");
    assert_eq!(
        admission("mock").await.body["allowed"],
        true,
        "local providers stay here"
    );
    store.close().await;
    server.shutdown().await;
}

const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef01";
const SIGNING_KEY: &str = "test-signing-key-0123456789abcdef012345";

async fn server_with_worker_auth() -> TestServer {
    TestServer::start_with(|c| {
        c.auth.enabled = true;
        c.auth.admin_api_key = svc_core::config::Secret::new(ADMIN_KEY);
        c.auth.worker_signing_key = svc_core::config::Secret::new(SIGNING_KEY);
        c.auth.worker_token = svc_core::config::Secret::new("shared-staging-token");
        c.auth.worker_tokens.insert(
            "w1".to_owned(),
            svc_core::config::Secret::new("static-token-w1"),
        );
    })
    .await
}

/// A heartbeat with a wrong credential of any kind is answered 401, never a dropped connection
/// (decisions §30).
#[tokio::test]
async fn a_heartbeat_with_a_wrong_credential_is_answered_401() {
    let server = TestServer::start_with(|c| {
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new("right-api-key-0123456789abcdef");
        c.auth.admin_api_key = svc_core::config::Secret::new(ADMIN_KEY);
        c.auth.worker_token = svc_core::config::Secret::new("shared-staging-token");
    })
    .await;
    let beat = json!({"hostname": "h", "status": "online"});
    for headers in [
        vec![("X-API-Key", "wrong-api-key")],
        vec![("X-Admin-API-Key", "wrong-admin-key")],
        vec![("Authorization", "Bearer not-a-token")],
        vec![("X-Worker-ID", "w1"), ("X-Worker-Token", "wrong-token")],
        vec![],
    ] {
        let reply = server
            .call_as(
                &headers,
                Method::POST,
                "/worker/w1/heartbeat",
                Some(beat.clone()),
            )
            .await;
        assert_eq!(reply.status, 401, "{headers:?}: {}", reply.body);
        reply.assert_error(401, "unauthorized");
    }
    server.shutdown().await;
}

fn as_worker<'a>(id: &'a str, token: &'a str) -> [(&'a str, &'a str); 2] {
    [("X-Worker-ID", id), ("X-Worker-Token", token)]
}

#[tokio::test]
async fn workers_authenticate_with_minted_static_or_shared_tokens() {
    let server = server_with_worker_auth().await;
    let admin = [("X-Admin-API-Key", ADMIN_KEY)];
    let mint = |body: serde_json::Value| {
        let server = &server;
        async move {
            server
                .call_as(&admin, Method::POST, "/admin/worker-tokens", Some(body))
                .await
        }
    };
    let minted = mint(json!({"worker_id": "w2", "ttl": "10m"})).await;
    assert_eq!(minted.status, 200, "{}", minted.body);
    assert_schema("WorkerToken", &minted.body);
    assert_eq!(
        minted.body["scopes"],
        json!(["worker:heartbeat", "worker:lease"])
    );
    let token = minted.body["token"].as_str().unwrap().to_owned();
    let beat = json!({"hostname": "w2-host", "status": "online", "providers": ["mock"],
                      "capabilities": ["spawn"], "capacity": {"max_sandboxes": 2}});
    let heartbeat = |id: &'static str, headers: Vec<(&'static str, String)>| {
        let server = &server;
        let beat = beat.clone();
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server
                .call_as(
                    &headers,
                    Method::POST,
                    &format!("/worker/{id}/heartbeat"),
                    Some(beat),
                )
                .await
        }
    };
    let ok = heartbeat(
        "w2",
        vec![
            ("X-Worker-ID", "w2".into()),
            ("X-Worker-Token", token.clone()),
        ],
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.body["hostname"], "w2-host");
    // The header must name the worker in the path; the token must be the worker's.
    heartbeat(
        "w2",
        vec![
            ("X-Worker-ID", "w3".into()),
            ("X-Worker-Token", token.clone()),
        ],
    )
    .await
    .assert_error(401, "unauthorized");
    heartbeat(
        "w3",
        vec![
            ("X-Worker-ID", "w3".into()),
            ("X-Worker-Token", token.clone()),
        ],
    )
    .await
    .assert_error(401, "unauthorized");
    heartbeat("w2", vec![("X-Worker-ID", "w2".into())])
        .await
        .assert_error(401, "unauthorized");
    // API keys are not worker credentials.
    heartbeat(
        "w2",
        vec![
            ("X-Worker-ID", "w2".into()),
            ("X-Admin-API-Key", ADMIN_KEY.into()),
        ],
    )
    .await
    .assert_error(401, "unauthorized");
    // A token without the heartbeat scope.
    let lease_only = mint(json!({"worker_id": "w2", "scopes": ["worker:lease"]})).await;
    let lease_token = lease_only.body["token"].as_str().unwrap().to_owned();
    heartbeat(
        "w2",
        vec![
            ("X-Worker-ID", "w2".into()),
            ("X-Worker-Token", lease_token),
        ],
    )
    .await
    .assert_error(401, "unauthorized");
    // Static and shared tokens.
    let static_ok = heartbeat(
        "w1",
        vec![
            ("X-Worker-ID", "w1".into()),
            ("X-Worker-Token", "static-token-w1".into()),
        ],
    )
    .await;
    assert_eq!(static_ok.status, 200);
    heartbeat(
        "w2",
        vec![
            ("X-Worker-ID", "w2".into()),
            ("X-Worker-Token", "static-token-w1".into()),
        ],
    )
    .await
    .assert_error(401, "unauthorized");
    let shared_ok = heartbeat(
        "w5",
        vec![
            ("X-Worker-ID", "w5".into()),
            ("X-Worker-Token", "shared-staging-token".into()),
        ],
    )
    .await;
    assert_eq!(shared_ok.status, 200);
    // Minting: admin only, worker: scopes only, at most 24h.
    for (body, field) in [
        (json!({"worker_id": "w2", "scopes": ["admin"]}), "scopes"),
        (json!({"worker_id": "w2", "ttl": "25h"}), "ttl"),
        (json!({"worker_id": "a b"}), "worker_id"),
    ] {
        let message = mint(body).await.assert_error(400, "bad_request");
        assert!(message.contains(field), "{message}");
    }
    server
        .call(
            Method::POST,
            "/admin/worker-tokens",
            Some(json!({"worker_id": "w2"})),
        )
        .await
        .assert_error(401, "unauthorized");
    // The registry lists them all.
    let listed = server.call_as(&admin, Method::GET, "/workers", None).await;
    let ids: Vec<&str> = listed
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["local", "w1", "w2", "w5"]);
    server.shutdown().await;

    let unsigned = TestServer::start().await;
    unsigned
        .post("/admin/worker-tokens", json!({"worker_id": "w2"}))
        .await
        .assert_error(503, "unavailable");
    unsigned.shutdown().await;
}

#[tokio::test]
async fn a_worker_renews_only_leases_it_holds() {
    let server = server_with_worker_auth().await;
    let admin = [("X-Admin-API-Key", ADMIN_KEY)];
    let sandbox = server
        .call_as(&admin, Method::POST, "/sandboxes", Some(json!({})))
        .await;
    let id = sandbox.body["id"].as_str().unwrap().to_owned();
    let creds = as_worker("w1", "static-token-w1");
    let message = server
        .call_as(
            &creds,
            Method::POST,
            &format!("/worker/w1/leases/{id}/renew"),
            Some(json!({"ttl": "30s"})),
        )
        .await
        .assert_error(409, "lease_conflict");
    assert!(message.contains("local"), "{message}");
    let store = second_store(&server).await;
    let now = svc_core::Clock::now(server.clock.as_ref());
    store
        .acquire_lease("job-7", "w1", Duration::from_secs(10), now)
        .await
        .unwrap();
    let renewed = server
        .call_as(
            &creds,
            Method::POST,
            "/worker/w1/leases/job-7/renew",
            Some(json!({"ttl": "45s"})),
        )
        .await;
    assert_eq!(renewed.status, 200, "{}", renewed.body);
    assert_schema("LeaseBody", &renewed.body);
    assert_eq!(renewed.body["lease"]["holder_id"], "w1");
    assert_eq!(renewed.body["lease"]["generation"], 1);
    // Past its expiry the lease is no longer the worker's to renew.
    server.clock.advance(Duration::from_secs(46));
    server
        .call_as(
            &creds,
            Method::POST,
            "/worker/w1/leases/job-7/renew",
            Some(json!({})),
        )
        .await
        .assert_error(409, "lease_conflict");
    server
        .call(
            Method::POST,
            "/worker/w1/leases/job-7/renew",
            Some(json!({})),
        )
        .await
        .assert_error(401, "unauthorized");
    store.close().await;
    server.shutdown().await;
}

/// Draining (decisions §22): the worker says `draining` until undrained, whatever its own
/// heartbeats say; an unknown worker is 404.
#[tokio::test]
async fn a_drained_worker_stays_draining_until_undrained() {
    let server = TestServer::start_with(|c| {
        c.worker.heartbeat_interval = GoDuration::from_millis(50);
        c.worker.stale_after = GoDuration::from_secs(5);
        c.worker.lease_ttl = GoDuration::from_secs(10);
    })
    .await;
    let drained = server
        .call(Method::POST, "/admin/workers/local/drain", None)
        .await;
    assert_eq!(drained.status, 200, "{}", drained.body);
    assert_schema("Worker", &drained.body);
    assert_eq!(
        (drained.body["id"].clone(), drained.body["status"].clone()),
        (json!("local"), json!("draining"))
    );
    // Its own heartbeats (every 50 ms, saying online) leave it draining.
    let store = second_store(&server).await;
    let drained_beat = store
        .get_worker("local")
        .await
        .unwrap()
        .unwrap()
        .last_heartbeat;
    server.clock.advance(Duration::from_secs(1));
    wait_for(
        "a heartbeat after the drain",
        Duration::from_secs(30),
        || async {
            let worker = store.get_worker("local").await.unwrap().unwrap();
            worker.last_heartbeat > drained_beat
        },
    )
    .await;
    assert_eq!(
        server.get("/workers/local").await.body["status"],
        "draining"
    );
    let undrained = server
        .call(Method::POST, "/admin/workers/local/undrain", None)
        .await;
    assert_eq!(undrained.status, 200, "{}", undrained.body);
    assert_eq!(undrained.body["status"], "online");
    assert_eq!(server.get("/workers/local").await.body["status"], "online");
    for action in ["drain", "undrain"] {
        server
            .call(
                Method::POST,
                &format!("/admin/workers/nobody/{action}"),
                None,
            )
            .await
            .assert_error(404, "not_found");
    }
    store.close().await;
    server.shutdown().await;
}

/// In a fleet (`worker.rpc.enabled`) the worker's capacity is its own `worker.max_sandboxes` and
/// it advertises where other nodes reach it; outside one, as before, neither.
#[tokio::test]
async fn a_fleet_node_advertises_its_url_and_its_own_capacity() {
    let node = TestServer::start_with(|c| {
        c.defaults.max_sandboxes = 7;
        c.worker.max_sandboxes = 5;
        c.worker.rpc.enabled = true;
        c.worker.rpc.token = svc_core::config::Secret::new("node-to-node-token");
        c.worker.rpc.listen = "127.0.0.1:0".to_owned();
        c.worker.advertise_url = "http://node-a.internal:7424".to_owned();
    })
    .await;
    let worker = node.get("/workers/local").await.body;
    assert_eq!(worker["url"], "http://node-a.internal:7424");
    assert_eq!(worker["capacity"]["max_sandboxes"], 5);
    node.shutdown().await;
    let single = TestServer::start_with(|c| {
        c.defaults.max_sandboxes = 7;
        c.worker.max_sandboxes = 5;
    })
    .await;
    let worker = single.get("/workers/local").await.body;
    assert_eq!(worker.get("url"), None);
    assert_eq!(worker["capacity"]["max_sandboxes"], 7);
    single.shutdown().await;
}
