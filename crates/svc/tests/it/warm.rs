//! Warm pools (decisions §17) on the mock provider, whose runtimes are directories with a JSON
//! record of their labels beside them: fill, claim, refill, the cap, template update and
//! delete, a restart with a full pool, concurrent claims, health replacement, and the
//! per-request identity of a claimed sandbox.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{wait_for, TestServer};

const WAIT: Duration = Duration::from_secs(20);

/// A server whose pools are checked every 100 ms.
pub(crate) async fn warm_server(cap: u32) -> TestServer {
    TestServer::start_with(|c| {
        c.defaults.max_warm_runtimes = cap;
        c.defaults.warm_check_interval = "100ms".parse().unwrap();
    })
    .await
}

/// The mock runtimes under `root`: ID → labels.
pub(crate) fn mock_runtimes(root: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let id = name.strip_suffix(".json")?.to_owned();
            let record: Value = serde_json::from_slice(&std::fs::read(entry.path()).ok()?).ok()?;
            let labels = serde_json::from_value(record["labels"].clone()).ok()?;
            Some((id, labels))
        })
        .collect()
}

/// The unclaimed warm runtimes of `template`: listed under the ID their labels name.
fn ready_runtimes(root: &Path, template: &str) -> BTreeSet<String> {
    mock_runtimes(root)
        .into_iter()
        .filter(|(id, labels)| {
            labels.get("dev.svc.warm").map(String::as_str) == Some("true")
                && labels.get("dev.svc.template").map(String::as_str) == Some(template)
                && labels.get("dev.svc.sandbox_id") == Some(id)
        })
        .map(|(id, _)| id)
        .collect()
}

pub(crate) async fn warm_ready(server: &TestServer, template: &str) -> u64 {
    let reply = server.get(&format!("/templates/{template}")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["warm_ready"].as_u64().unwrap()
}

pub(crate) async fn wait_ready(server: &TestServer, template: &str, count: u64) {
    wait_for(
        &format!("{count} warm runtimes of {template}"),
        WAIT,
        || async { warm_ready(server, template).await == count },
    )
    .await;
}

async fn scrape(server: &TestServer) -> String {
    server
        .client
        .get(server.url("/metrics/scrape"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of one sample line of the exposition, 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn create_template(server: &TestServer, body: Value) {
    let created = server.post("/templates", body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["warm_ready"], 0);
}

#[tokio::test]
async fn a_spawn_claims_a_warm_runtime_with_its_own_identity_and_the_pool_refills() {
    let server = warm_server(20).await;
    create_template(
        &server,
        json!({"name": "w", "warm_pool": 2, "metadata": {"from": "template"}}),
    )
    .await;
    assert_eq!(server.get("/templates/w").await.body["warm_pool"], 2);
    wait_ready(&server, "w", 2).await;
    let root = server.mock_root();
    let warm = ready_runtimes(&root, "w");
    assert_eq!(warm.len(), 2, "{:?}", mock_runtimes(&root));
    assert!(
        server.listed_ids("").await.is_empty(),
        "warm runtimes are not sandboxes"
    );

    let spawned = server
        .call_as(
            &[("X-User-ID", "alice")],
            Method::POST,
            "/sandboxes",
            Some(json!({"template": "w", "env": {"GREETING": "hello"}, "metadata": {"req": "1"}, "ttl": "5m"})),
        )
        .await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    let sandbox = &spawned.body;
    let id = sandbox["id"].as_str().unwrap();
    assert!(!warm.contains(id), "the sandbox has its own ID");
    assert_eq!(sandbox["state"], "running");
    assert_eq!(sandbox["owner_id"], "alice");
    assert_eq!(sandbox["tenant_id"], "default");
    assert_eq!(sandbox["template"], "w");
    assert_eq!(sandbox["metadata"], json!({"from": "template", "req": "1"}));
    let created =
        chrono::DateTime::parse_from_rfc3339(sandbox["created_at"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(sandbox["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(
        (expires - created).num_seconds(),
        300,
        "the TTL counts from the spawn"
    );

    // The runtime is one of the warm ones, now under the sandbox's ID.
    let runtimes = mock_runtimes(&root);
    let labels = &runtimes[id];
    assert_eq!(labels["dev.svc.warm"], "true");
    assert!(warm.contains(&labels["dev.svc.sandbox_id"]), "{labels:?}");
    assert!(!runtimes.contains_key(&labels["dev.svc.sandbox_id"]));

    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo $GREETING; pwd"}),
        )
        .await;
    assert_eq!(exec.status, 200, "{}", exec.body);
    assert!(
        exec.body["stdout"].as_str().unwrap().starts_with("hello\n"),
        "{}",
        exec.body
    );

    // The sandbox counts toward its owner's quota; the warm runtimes never did.
    let usage = server.get("/quotas/alice/usage").await;
    assert_eq!(usage.body["active_sandboxes"], 1, "{}", usage.body);
    let workers = server.get("/workers").await;
    assert_eq!(workers.status, 200);

    wait_ready(&server, "w", 2).await;
    let refilled = ready_runtimes(&root, "w");
    assert_eq!(refilled.len(), 2);
    assert!(!refilled.contains(&labels["dev.svc.sandbox_id"]));

    let metrics = scrape(&server).await;
    assert_eq!(
        sample(&metrics, "svc_warm_pool_ready{template=\"w\"}"),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "svc_warm_pool_hits_total{template=\"w\"}"),
        1.0
    );
    assert_eq!(
        sample(&metrics, "svc_warm_pool_misses_total{template=\"w\"}"),
        0.0
    );

    // Destroying the sandbox removes its runtime; the pool stays as it is.
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    assert!(!mock_runtimes(&root).contains_key(id));
    assert_eq!(ready_runtimes(&root, "w"), refilled);
}

#[tokio::test]
async fn template_spawn_route_and_plain_spawns_of_the_same_spec_use_the_pool() {
    let server = warm_server(20).await;
    create_template(
        &server,
        json!({"name": "w", "image": "img:1", "warm_pool": 1}),
    )
    .await;
    wait_ready(&server, "w", 1).await;
    let warm = ready_runtimes(&server.mock_root(), "w");

    let spawned = server
        .post("/templates/w/spawn", json!({"env": {"A": "1"}}))
        .await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    let id = spawned.body["id"].as_str().unwrap().to_owned();
    let labels = &mock_runtimes(&server.mock_root())[&id];
    assert!(warm.contains(&labels["dev.svc.sandbox_id"]));
    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo $A"}),
        )
        .await;
    assert_eq!(exec.body["stdout"], "1\n");

    wait_ready(&server, "w", 1).await;
    let warm = ready_runtimes(&server.mock_root(), "w");
    // A plain spawn resolving to the pool's provider, image and size takes from it.
    let plain = server.spawn(json!({"image": "img:1"})).await;
    let labels = &mock_runtimes(&server.mock_root())[plain["id"].as_str().unwrap()];
    assert!(warm.contains(&labels["dev.svc.sandbox_id"]), "{labels:?}");
    // Another size or a network of its own starts cold.
    let other = server
        .spawn(json!({"image": "img:1", "memory_mb": 64}))
        .await;
    let labels = &mock_runtimes(&server.mock_root())[other["id"].as_str().unwrap()];
    assert!(!labels.contains_key("dev.svc.warm"), "{labels:?}");

    let metrics = scrape(&server).await;
    assert_eq!(
        sample(&metrics, "svc_warm_pool_hits_total{template=\"w\"}"),
        2.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn an_empty_pool_spawns_cold_and_counts_a_miss() {
    let server = warm_server(0).await;
    create_template(&server, json!({"name": "w", "warm_pool": 2})).await;
    create_template(&server, json!({"name": "cold"})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        warm_ready(&server, "w").await,
        0,
        "the cap of 0 keeps nothing warm"
    );
    assert!(mock_runtimes(&server.mock_root()).is_empty());
    let spawned = server.post("/templates/w/spawn", json!({})).await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    assert_eq!(
        server.post("/templates/cold/spawn", json!({})).await.status,
        201
    );
    let metrics = scrape(&server).await;
    assert_eq!(
        sample(&metrics, "svc_warm_pool_misses_total{template=\"w\"}"),
        1.0,
        "{metrics}"
    );
    assert!(
        !metrics.contains("template=\"cold\""),
        "no pool, no miss: {metrics}"
    );
}

#[tokio::test]
async fn pools_share_the_cap_round_robin() {
    let server = warm_server(3).await;
    create_template(
        &server,
        json!({"name": "b", "image": "b:1", "warm_pool": 3}),
    )
    .await;
    wait_ready(&server, "b", 3).await;
    create_template(
        &server,
        json!({"name": "a", "image": "a:1", "warm_pool": 3}),
    )
    .await;
    // Round robin in name order: a, b, a. Whichever template came first, the later one gets
    // its share once the cap is reached.
    wait_for("the cap shared", WAIT, || async {
        warm_ready(&server, "a").await == 2
            && warm_ready(&server, "b").await == 1
            && mock_runtimes(&server.mock_root()).len() == 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(mock_runtimes(&server.mock_root()).len(), 3, "the cap holds");
}

#[tokio::test]
async fn template_update_replaces_and_delete_removes_the_warm_runtimes() {
    let server = warm_server(20).await;
    create_template(
        &server,
        json!({"name": "w", "image": "old:1", "warm_pool": 2}),
    )
    .await;
    wait_ready(&server, "w", 2).await;
    let root = server.mock_root();
    let old = ready_runtimes(&root, "w");

    let updated = server
        .call(
            Method::PUT,
            "/templates/w",
            Some(json!({"image": "new:1", "warm_pool": 2})),
        )
        .await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    wait_for("the pool replaced", WAIT, || async {
        let now = ready_runtimes(&root, "w");
        now.len() == 2 && now.is_disjoint(&old) && mock_runtimes(&root).len() == 2
    })
    .await;
    let runtimes = mock_runtimes(&root);
    for labels in runtimes.values() {
        assert_eq!(
            labels["dev.svc.warm_spec"], "mock|new:1|512|1",
            "{labels:?}"
        );
    }
    wait_ready(&server, "w", 2).await;

    // Shrinking gives back the surplus.
    let shrunk = server
        .call(
            Method::PUT,
            "/templates/w",
            Some(json!({"image": "new:1", "warm_pool": 1})),
        )
        .await;
    assert_eq!(shrunk.status, 200);
    wait_for("the pool shrunk", WAIT, || async {
        mock_runtimes(&root).len() == 1
    })
    .await;

    assert_eq!(server.delete("/templates/w").await.status, 200);
    wait_for("the pool removed", WAIT, || async {
        mock_runtimes(&root).is_empty()
    })
    .await;
    assert_eq!(server.get("/templates/w").await.status, 404);
}

#[tokio::test]
async fn a_restart_adopts_a_full_pool_without_leak_or_duplicate() {
    let server = warm_server(20).await;
    create_template(&server, json!({"name": "w", "warm_pool": 2})).await;
    wait_ready(&server, "w", 2).await;
    let root = server.mock_root();
    let before = ready_runtimes(&root, "w");
    let server = server.restart().await;
    wait_ready(&server, "w", 2).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        ready_runtimes(&root, "w"),
        before,
        "the same runtimes, adopted"
    );
    assert_eq!(mock_runtimes(&root).len(), 2, "nothing started twice");
    assert!(
        server.listed_ids("").await.is_empty(),
        "not adopted as sandboxes"
    );
    // And they are claimed as before.
    let spawned = server.post("/templates/w/spawn", json!({})).await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    let labels = &mock_runtimes(&root)[spawned.body["id"].as_str().unwrap()];
    assert!(before.contains(&labels["dev.svc.sandbox_id"]));
}

#[tokio::test]
async fn a_restart_removes_the_runtimes_no_pool_wants() {
    let server = warm_server(20).await;
    create_template(&server, json!({"name": "w", "warm_pool": 2})).await;
    create_template(
        &server,
        json!({"name": "gone", "image": "g:1", "warm_pool": 1}),
    )
    .await;
    wait_ready(&server, "w", 2).await;
    wait_ready(&server, "gone", 1).await;
    let root = server.mock_root();
    let kept = ready_runtimes(&root, "w");
    // Down, the cap becomes 1 and template `gone` is deleted (by another replica, say).
    let mut server = server;
    server.config.defaults.max_warm_runtimes = 1;
    server.config.defaults.warm_check_interval = "1h".parse().unwrap();
    assert_eq!(server.delete("/templates/gone").await.status, 200);
    let server = server.restart().await;
    wait_for("one warm runtime left", WAIT, || async {
        mock_runtimes(&root).len() == 1
    })
    .await;
    wait_ready(&server, "w", 1).await;
    let left = ready_runtimes(&root, "w");
    assert!(
        left.is_subset(&kept),
        "an adopted one, not a new one: {left:?}"
    );
}

#[tokio::test]
async fn concurrent_claims_never_share_a_runtime() {
    let server = warm_server(20).await;
    create_template(&server, json!({"name": "w", "warm_pool": 5})).await;
    wait_ready(&server, "w", 5).await;
    let spawns = (0..8).map(|i| {
        let server = &server;
        async move {
            server
                .post("/templates/w/spawn", json!({"env": {"N": i.to_string()}}))
                .await
        }
    });
    let replies = futures::future::join_all(spawns).await;
    let root = server.mock_root();
    let runtimes = mock_runtimes(&root);
    let mut claimed = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply.status, 201, "{}", reply.body);
        let id = reply.body["id"].as_str().unwrap().to_owned();
        let labels = &runtimes[&id];
        if labels.contains_key("dev.svc.warm") {
            assert!(
                claimed.insert(labels["dev.svc.sandbox_id"].clone()),
                "a warm runtime handed out twice: {labels:?}"
            );
        }
        let exec = server
            .post(
                &format!("/sandboxes/{id}/exec"),
                json!({"command": "echo $N"}),
            )
            .await;
        assert_eq!(exec.body["stdout"], format!("{i}\n"));
        ids.insert(id);
    }
    assert_eq!(ids.len(), 8);
    assert!(
        claimed.len() >= 5,
        "the five ready runtimes were used: {claimed:?}"
    );
    let metrics = scrape(&server).await;
    let hits = sample(&metrics, "svc_warm_pool_hits_total{template=\"w\"}");
    let misses = sample(&metrics, "svc_warm_pool_misses_total{template=\"w\"}");
    assert_eq!(hits as usize, claimed.len(), "{metrics}");
    assert_eq!(hits + misses, 8.0, "{metrics}");
}

#[tokio::test]
async fn a_warm_runtime_that_fails_its_health_check_is_replaced() {
    let server = warm_server(20).await;
    create_template(&server, json!({"name": "w", "warm_pool": 1})).await;
    wait_ready(&server, "w", 1).await;
    let root = server.mock_root();
    let first = ready_runtimes(&root, "w").into_iter().next().unwrap();
    std::fs::remove_dir_all(root.join(&first)).unwrap();
    wait_for("a replacement", WAIT, || async {
        let now = ready_runtimes(&root, "w");
        now.len() == 1 && !now.contains(&first) && !mock_runtimes(&root).contains_key(&first)
    })
    .await;
    wait_ready(&server, "w", 1).await;
}

#[tokio::test]
async fn warm_pool_is_refused_where_no_runtime_can_be_kept() {
    let server = TestServer::start_with(|c| {
        c.pool.enabled = true;
        c.pool.provider = "mock".into();
    })
    .await;
    let refused = server
        .post("/templates", json!({"name": "w", "warm_pool": 1}))
        .await;
    let message = refused.assert_error(400, "bad_request");
    assert!(message.contains("warm_pool"), "{message}");
    let negative = warm_server(1)
        .await
        .post("/templates", json!({"name": "w", "warm_pool": -1}))
        .await;
    negative.assert_error(400, "bad_request");
}
