//! Parallel spawns and destroys leave a consistent store.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;

use crate::harness::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_parallel_spawns_and_destroys_stay_consistent() {
    let server = std::sync::Arc::new(TestServer::start().await);
    let spawns = (0..50).map(|i| {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(async move {
            server
                .spawn(json!({"owner_id": format!("user{}", i % 5)}))
                .await
        })
    });
    let spawned: Vec<String> = futures::future::join_all(spawns)
        .await
        .into_iter()
        .map(|r| r.unwrap()["id"].as_str().unwrap().to_owned())
        .collect();
    let unique: HashSet<_> = spawned.iter().cloned().collect();
    assert_eq!(unique.len(), 50, "every spawn got its own ID");
    let listed: HashSet<_> = server.listed_ids("").await.into_iter().collect();
    assert_eq!(
        listed, unique,
        "the list shows exactly the spawned sandboxes"
    );

    // Destroy half, each twice in parallel, while spawning ten more.
    let doomed: Vec<_> = spawned.iter().take(25).cloned().collect();
    let destroys = doomed
        .iter()
        .flat_map(|id| [id.clone(), id.clone()])
        .map(|id| {
            let server = std::sync::Arc::clone(&server);
            tokio::spawn(async move { server.delete(&format!("/sandboxes/{id}")).await.status })
        });
    let more = (0..10).map(|_| {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(async move {
            server.spawn(json!({})).await["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
    });
    let (statuses, extra) = tokio::join!(
        futures::future::join_all(destroys),
        futures::future::join_all(more)
    );
    assert!(statuses.into_iter().all(|s| s.unwrap() == 200));
    let extra: HashSet<_> = extra.into_iter().map(Result::unwrap).collect();

    let running: HashSet<_> = server.listed_ids("").await.into_iter().collect();
    let expected: HashSet<_> = spawned.iter().skip(25).cloned().chain(extra).collect();
    assert_eq!(running, expected);
    let destroyed: HashSet<_> = server
        .listed_ids("?state=destroyed")
        .await
        .into_iter()
        .collect();
    assert_eq!(destroyed, doomed.iter().cloned().collect());
    let all = server.listed_ids("?state=all").await;
    assert_eq!(all.len(), 60, "every sandbox is stored exactly once");
    // The provider agrees with the store: one runtime directory per running sandbox.
    let runtimes: HashSet<_> = std::fs::read_dir(server.mock_root())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(runtimes, running);
    let server = std::sync::Arc::into_inner(server).expect("no other references");
    server.shutdown().await;
}

/// 200 spawns at once against one limit: exactly `admitted` succeed, the rest are 429 naming
/// `reason`, and no refusal leaves a record.
async fn two_hundred_concurrent_spawns(
    adjust: impl FnOnce(&mut svc_core::config::Config),
    owner: fn(usize) -> String,
    admitted: usize,
    reason: &str,
) {
    let server = std::sync::Arc::new(TestServer::start_with(adjust).await);
    let mut events = server.events("?types=resource.limit", None).await;
    let spawns = (0..200).map(|i| {
        let server = std::sync::Arc::clone(&server);
        tokio::spawn(async move {
            server
                .post("/sandboxes", json!({"owner_id": owner(i)}))
                .await
        })
    });
    let replies: Vec<_> = futures::future::join_all(spawns)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let created = replies.iter().filter(|r| r.status == 201).count();
    let limited: Vec<_> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!(
        created, admitted,
        "exactly the limit is admitted ({reason})"
    );
    assert_eq!(
        limited.len(),
        200 - admitted,
        "every other spawn is refused"
    );
    for reply in &limited {
        let message = reply.assert_error(429, "resource_limit");
        assert!(message.contains(reason), "{message}");
    }
    assert_eq!(
        server.listed_ids("?state=all").await.len(),
        admitted,
        "no record for a refusal"
    );
    let limit = events
        .next(Duration::from_secs(5))
        .await
        .expect("resource.limit");
    assert_eq!(limit.data["data"]["reason"], reason);
    let server = std::sync::Arc::into_inner(server).expect("no other references");
    server.shutdown().await;
}

fn seven_owners(i: usize) -> String {
    format!("user{}", i % 7)
}

fn one_owner(_: usize) -> String {
    "solo".to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_spawns_against_a_global_capacity_of_one_and_five() {
    for limit in [1, 5] {
        two_hundred_concurrent_spawns(
            |c| c.defaults.max_sandboxes = limit,
            seven_owners,
            usize::try_from(limit).unwrap(),
            "max_sandboxes",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_spawns_of_one_owner_against_limits_of_one_and_five() {
    for limit in [1, 5] {
        two_hundred_concurrent_spawns(
            |c| c.defaults.max_sandboxes_per_owner = limit,
            one_owner,
            usize::try_from(limit).unwrap(),
            "max_owner_sandboxes",
        )
        .await;
    }
}
