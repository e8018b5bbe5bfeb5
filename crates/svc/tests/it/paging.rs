//! Paging of the list routes other than `/sandboxes` (decisions §7; `/sandboxes` is in
//! `lifecycle.rs`): `limit`, `cursor` from `X-Next-Cursor`, no skip or repeat while items come
//! and go between pages, and 400 for a cursor of another route or filter.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};

/// Every page of `path` (which has its query started with `?`), in order: the `key` field of
/// each item. `between` runs after each page.
pub(crate) async fn pages(
    server: &TestServer,
    path: &str,
    key: &str,
    mut between: impl FnMut(usize) -> Vec<(Method, String, Option<Value>)>,
) -> (Vec<String>, usize) {
    let mut seen = Vec::new();
    let mut next = path.to_owned();
    let mut count = 0;
    loop {
        let page = server.get(&next).await;
        assert_eq!(page.status, 200, "{next}: {}", page.body);
        count += 1;
        seen.extend(
            page.body
                .as_array()
                .unwrap()
                .iter()
                .map(|item| item[key].as_str().unwrap().to_owned()),
        );
        for (method, change, body) in between(count) {
            let reply = server.call(method, &change, body).await;
            assert!(reply.status.is_success(), "{change}: {}", reply.body);
        }
        let Some(cursor) = page.headers.get("x-next-cursor") else {
            break;
        };
        next = format!("{path}&cursor={}", cursor.to_str().unwrap());
    }
    (seen, count)
}

fn cursor(reply: &Reply) -> String {
    reply.headers["x-next-cursor"].to_str().unwrap().to_owned()
}

/// Templates by name and quotas by owner, 2 a page: names added and removed between pages
/// shift nothing; every remaining one comes exactly once.
#[tokio::test]
async fn templates_and_quotas_page_by_name_under_changes() {
    let server = TestServer::start().await;
    for name in ["t1", "t2", "t3", "t4", "t5"] {
        let made = server.post("/templates", json!({"name": name})).await;
        assert_eq!(made.status, 201, "{}", made.body);
    }
    let (names, count) = pages(&server, "/templates?limit=2", "name", |page| {
        if page != 1 {
            return Vec::new();
        }
        vec![
            (Method::DELETE, "/templates/t5".into(), None),
            (
                Method::POST,
                "/templates".into(),
                Some(json!({"name": "t0"})),
            ),
            (
                Method::POST,
                "/templates".into(),
                Some(json!({"name": "t6"})),
            ),
        ]
    })
    .await;
    // t0 sorts before the first page's end, so it is not on a later page; t5 is gone.
    assert_eq!(names, ["t1", "t2", "t3", "t4", "t6"]);
    assert_eq!(count, 3);

    let limits = json!({"max_sandboxes": 3});
    for owner in ["o1", "o2", "o3", "o4", "o5"] {
        let path = format!("/quotas/{owner}");
        let saved = server.call(Method::PUT, &path, Some(limits.clone())).await;
        assert_eq!(saved.status, 200, "{}", saved.body);
    }
    let (owners, _) = pages(&server, "/quotas?limit=2", "owner_id", |page| {
        if page == 1 {
            vec![(Method::DELETE, "/quotas/o3".into(), None)]
        } else {
            Vec::new()
        }
    })
    .await;
    assert_eq!(owners, ["o1", "o2", "o4", "o5"]);
    let (admin_owners, _) = pages(&server, "/admin/quotas?limit=3", "owner_id", |_| vec![]).await;
    assert_eq!(
        admin_owners,
        ["o1", "o2", "o4", "o5"],
        "the admin alias pages alike"
    );

    // A cursor belongs to its route: each other list refuses it, naming the cursor.
    let first = server.get("/templates?limit=1").await;
    let templates_cursor = cursor(&first);
    for route in ["/quotas", "/workers", "/sandboxes", "/admin/audit"] {
        let refused = server
            .get(&format!("{route}?cursor={templates_cursor}"))
            .await;
        let message = refused.assert_error(400, "bad_request");
        assert!(message.contains("cursor"), "{route}: {message}");
    }
    for query in ["limit=0", "limit=1001", "cursor=garbage"] {
        for route in ["/templates", "/quotas", "/workers"] {
            let refused = server.get(&format!("{route}?{query}")).await;
            refused.assert_error(400, "bad_request");
        }
    }
    server.shutdown().await;
}

/// A sandbox's execs, newest first, 2 a page; a cursor of one sandbox's execs is refused for
/// another's.
#[tokio::test]
async fn execs_page_newest_first() {
    let server = TestServer::start().await;
    let id = server.spawn(json!({"provider": "mock"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for i in 0..5 {
        let body = json!({"command": format!("echo {i}"), "background": true});
        let started = server.post(&format!("/sandboxes/{id}/exec"), body).await;
        assert_eq!(started.status, 202, "{}", started.body);
    }
    let all: Vec<String> = server
        .get(&format!("/sandboxes/{id}/execs"))
        .await
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["exec_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(all.len(), 5);
    let path = format!("/sandboxes/{id}/execs?limit=2");
    let (paged, count) = pages(&server, &path, "exec_id", |_| vec![]).await;
    assert_eq!(paged, all, "the same order, each once");
    assert_eq!(count, 3);

    let other = server.spawn(json!({"provider": "mock"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = server.get(&path).await;
    let refused = server
        .get(&format!(
            "/sandboxes/{other}/execs?limit=2&cursor={}",
            cursor(&first)
        ))
        .await;
    refused.assert_error(400, "bad_request");
    server.shutdown().await;
}

/// The audit log pages newest first, in JSON and in CSV, and a cursor keeps its filters.
#[tokio::test]
async fn audit_pages_newest_first_with_its_filters() {
    let server = TestServer::start().await;
    for i in 0..7 {
        let path = format!("/quotas/owner-{i}");
        let body = Some(json!({"max_sandboxes": i + 1}));
        let saved = server.call(Method::PUT, &path, body).await;
        assert_eq!(saved.status, 200, "{}", saved.body);
    }
    let all: Vec<String> = server
        .get("/admin/audit?limit=1000")
        .await
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(all.len() >= 7, "{all:?}");
    let (paged, count) = pages(&server, "/admin/audit?limit=3", "id", |page| {
        // Written after the first page: newer than its cursor, so on no later page.
        if page == 1 {
            vec![(
                Method::PUT,
                "/quotas/late".into(),
                Some(json!({"max_sandboxes": 1})),
            )]
        } else {
            Vec::new()
        }
    })
    .await;
    assert_eq!(paged, all, "newest first, each once");
    assert_eq!(count, all.len().div_ceil(3));

    let csv = server.get("/admin/audit?limit=2&format=csv").await;
    assert_eq!(csv.status, 200);
    let csv_cursor = cursor(&csv);
    let json_next = server
        .get(&format!("/admin/audit?limit=2&cursor={csv_cursor}"))
        .await;
    assert_eq!(
        json_next.status, 200,
        "a page may be asked in either format"
    );
    let refused = server
        .get(&format!("/admin/audit?limit=2&actor=x&cursor={csv_cursor}"))
        .await;
    let message = refused.assert_error(400, "bad_request");
    assert!(message.contains("cursor"), "{message}");
    server.shutdown().await;
}
