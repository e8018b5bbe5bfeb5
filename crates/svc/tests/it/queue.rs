//! The spawn queue (`defaults.spawn_overflow: queue`; decisions §10): first in first out, woken
//! by every way capacity opens, bounded, timing out, and left at once by a client that goes.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use svc_core::config::SpawnOverflow;
use svc_core::GoDuration;
use tokio::task::JoinHandle;

use crate::harness::{Reply, SseClient, TestServer};

const WAIT: Duration = Duration::from_secs(30);

async fn queueing(adjust: impl FnOnce(&mut svc_core::config::Config)) -> Arc<TestServer> {
    Arc::new(
        TestServer::start_with(|c| {
            c.defaults.spawn_overflow = SpawnOverflow::Queue;
            c.defaults.spawn_queue_timeout = GoDuration::from_secs(20);
            c.defaults.max_sandboxes = 1;
            adjust(c);
        })
        .await,
    )
}

/// Starts a spawn that is expected to queue, and returns once `spawn.queued` says it did.
async fn queued_spawn(
    server: &Arc<TestServer>,
    events: &mut SseClient,
    owner: &str,
) -> JoinHandle<Reply> {
    let task = {
        let server = Arc::clone(server);
        let owner = owner.to_owned();
        tokio::spawn(async move {
            server
                .call_as(
                    &[("X-User-ID", owner.as_str())],
                    Method::POST,
                    "/sandboxes",
                    Some(json!({})),
                )
                .await
        })
    };
    let seen = events.until("spawn.queued", WAIT).await;
    assert_eq!(seen.last().unwrap().data["data"]["owner_id"], owner);
    task
}

async fn answered(task: JoinHandle<Reply>) -> Reply {
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the queued spawn was answered")
        .unwrap()
}

async fn still_waiting(task: &JoinHandle<Reply>) {
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!task.is_finished(), "the spawn should still be queued");
}

fn created(reply: &Reply) -> String {
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.body["id"].as_str().unwrap().to_owned()
}

async fn destroy(server: &TestServer, id: &str) {
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
}

fn shut(server: Arc<TestServer>) -> TestServer {
    Arc::into_inner(server).expect("no other references")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_first_in_first_out_as_sandboxes_are_destroyed() {
    let server = queueing(|_| {}).await;
    let mut events = server
        .events("?types=spawn.queued,spawn.dequeued", None)
        .await;
    let holder = server.spawn(json!({})).await;
    // A TTL denial never queues, in queue mode too.
    let message = server
        .post("/sandboxes", json!({"ttl": "25h"}))
        .await
        .assert_error(429, "resource_limit");
    assert!(message.contains("max_ttl"), "{message}");
    let first = queued_spawn(&server, &mut events, "q1").await;
    let second = queued_spawn(&server, &mut events, "q2").await;
    let third = queued_spawn(&server, &mut events, "q3").await;
    // The admission check sees the full capacity and the room in the queue.
    let check = server.post("/sandboxes/admission", json!({})).await;
    assert_eq!(check.body["reason"], "max_sandboxes");
    assert_eq!(check.body["queueable"], true);
    destroy(&server, holder["id"].as_str().unwrap()).await;
    let reply = answered(first).await;
    let one = created(&reply);
    assert_eq!(reply.body["owner_id"], "q1");
    let dequeued = events.until("spawn.dequeued", WAIT).await;
    let data = &dequeued.last().unwrap().data["data"];
    assert_eq!(data["owner_id"], "q1");
    assert!(data["wait"].as_str().unwrap().ends_with('s'), "{data}");
    still_waiting(&second).await;
    still_waiting(&third).await;
    destroy(&server, &one).await;
    let two = created(&answered(second).await);
    still_waiting(&third).await;
    destroy(&server, &two).await;
    let reply = answered(third).await;
    created(&reply);
    assert_eq!(reply.body["owner_id"], "q3");
    assert_eq!(server.listed_ids("").await.len(), 1);
    shut(server).shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_prune_and_quota_changes_wake_the_queue() {
    // Expiry: the reaper destroys the holder once the clock passes its TTL.
    let server = queueing(|c| c.defaults.reap_interval = GoDuration::from_millis(50)).await;
    let mut events = server.events("?types=spawn.queued", None).await;
    server.spawn(json!({"ttl": "1m"})).await;
    let waiter = queued_spawn(&server, &mut events, "late").await;
    server.clock.advance(Duration::from_secs(61));
    created(&answered(waiter).await);
    shut(server).shutdown().await;

    // Prune: DELETE /sandboxes destroys the expired holder (the reaper is too slow to).
    let server = queueing(|c| c.defaults.reap_interval = GoDuration::from_secs(3600)).await;
    let mut events = server.events("?types=spawn.queued", None).await;
    server.spawn(json!({"ttl": "1m"})).await;
    let waiter = queued_spawn(&server, &mut events, "late").await;
    server.clock.advance(Duration::from_secs(61));
    still_waiting(&waiter).await;
    assert_eq!(server.delete("/sandboxes").await.body["pruned"], 1);
    created(&answered(waiter).await);
    shut(server).shutdown().await;

    // A quota change: the owner's own limit is raised.
    let server = queueing(|c| {
        c.defaults.max_sandboxes = 0;
        c.defaults.max_sandboxes_per_owner = 1;
    })
    .await;
    let mut events = server.events("?types=spawn.queued", None).await;
    server.spawn(json!({"owner_id": "grace"})).await;
    let waiter = queued_spawn(&server, &mut events, "grace").await;
    let saved = server
        .call(
            Method::PUT,
            "/quotas/grace",
            Some(json!({"max_sandboxes": 2})),
        )
        .await;
    assert_eq!(saved.status, 200);
    created(&answered(waiter).await);
    shut(server).shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_at_its_limit_does_not_hold_up_the_owners_behind_it() {
    let server = queueing(|c| {
        c.defaults.max_sandboxes = 2;
        c.defaults.max_sandboxes_per_owner = 1;
    })
    .await;
    let mut events = server.events("?types=spawn.queued", None).await;
    let held = server.spawn(json!({"owner_id": "heidi"})).await;
    server.spawn(json!({"owner_id": "ivan"})).await;
    let heidi = queued_spawn(&server, &mut events, "heidi").await;
    let judy = queued_spawn(&server, &mut events, "judy").await;
    // Ivan's slot is not Heidi's: capacity opens globally, Heidi stays at her own limit.
    let ivan = server.listed_ids("?owner_id=ivan").await;
    destroy(&server, &ivan[0]).await;
    let reply = answered(judy).await;
    assert_eq!(reply.body["owner_id"], "judy", "{}", reply.body);
    still_waiting(&heidi).await;
    destroy(&server, held["id"].as_str().unwrap()).await;
    let reply = answered(heidi).await;
    assert_eq!(reply.body["owner_id"], "heidi", "{}", reply.body);
    shut(server).shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_times_out_and_a_full_queue_refuses_at_once() {
    // A full queue refuses at once: checked while the waiter surely waits (a long timeout).
    let server = queueing(|c| c.defaults.max_spawn_queue = 1).await;
    let mut events = server
        .events("?types=spawn.queued,resource.limit", None)
        .await;
    let holder = server.spawn(json!({})).await;
    let waiter = queued_spawn(&server, &mut events, "kim").await;
    let started = std::time::Instant::now();
    let message = server
        .post("/sandboxes", json!({"owner_id": "leo"}))
        .await
        .assert_error(429, "resource_limit");
    // At once: well before the waiter's 20 s timeout would have said anything.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!waiter.is_finished(), "kim still waits");
    assert!(
        message.contains("max_spawn_queue") && message.contains("max_sandboxes"),
        "{message}"
    );
    let limit = events.until("resource.limit", WAIT).await;
    assert_eq!(limit.last().unwrap().data["data"]["owner_id"], "leo");
    let admission = server.post("/sandboxes/admission", json!({})).await;
    assert_eq!(admission.body["queueable"], false, "no room left");
    destroy(&server, holder["id"].as_str().unwrap()).await;
    let served = answered(waiter).await;
    assert_eq!(served.status, 201, "{}", served.body);
    shut(server).shutdown().await;

    // A waiter times out after spawn_queue_timeout.
    let server = queueing(|c| {
        c.defaults.spawn_queue_timeout = GoDuration::from_millis(600);
        c.defaults.max_spawn_queue = 1;
    })
    .await;
    let mut events = server
        .events("?types=spawn.queued,spawn.queue_timeout", None)
        .await;
    server.spawn(json!({})).await;
    let waiter = queued_spawn(&server, &mut events, "kim").await;
    let reply = answered(waiter).await;
    let message = reply.assert_error(429, "resource_limit");
    assert!(message.contains("spawn_queue_timeout"), "{message}");
    let timeout = events.until("spawn.queue_timeout", WAIT).await;
    let data = &timeout.last().unwrap().data["data"];
    assert_eq!(data["owner_id"], "kim");
    assert!(data["wait"].is_string(), "{data}");
    assert_eq!(server.listed_ids("?state=all").await.len(), 1);
    shut(server).shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_leaves_the_queue_at_once() {
    let server = queueing(|c| c.defaults.max_spawn_queue = 1).await;
    let mut events = server.events("?types=spawn.queued", None).await;
    let holder = server.spawn(json!({})).await;
    let gone = queued_spawn(&server, &mut events, "mallory").await;
    gone.abort();
    // Its place is free: another spawn may queue (the queue holds one).
    let stays = {
        let server = Arc::clone(&server);
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let admission = server.post("/sandboxes/admission", json!({})).await;
            if admission.body["queueable"] == Value::Bool(true) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the disconnected spawn kept its place"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        queued_spawn(&server, &mut events, "nina").await
    };
    destroy(&server, holder["id"].as_str().unwrap()).await;
    let reply = answered(stays).await;
    assert_eq!(reply.body["owner_id"], "nina");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let owners: Vec<String> = server
        .get("/sandboxes?state=all")
        .await
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["owner_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !owners.contains(&"mallory".to_owned()),
        "the spawn that left never ran: {owners:?}"
    );
    shut(server).shutdown().await;
}

#[tokio::test]
async fn reject_mode_never_queues() {
    let server = TestServer::start_with(|c| c.defaults.max_sandboxes = 1).await;
    server.spawn(json!({})).await;
    let admission = server.post("/sandboxes/admission", json!({})).await;
    assert_eq!(admission.body["queueable"], false);
    server
        .post("/sandboxes", json!({}))
        .await
        .assert_error(429, "resource_limit");
    server.shutdown().await;
}
