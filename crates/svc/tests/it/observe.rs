//! Diagnostics and metrics over HTTP (interface "System"; decisions §13): every key of the
//! diagnostics and JSON metrics, values that move when work happens, the Prometheus text
//! exposition checked by `promtool`, and no secret in any of them, nor in events or logs.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use svc_core::config::SpawnOverflow;
use svc_core::GoDuration;

use crate::harness::TestServer;

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

#[track_caller]
fn has_keys(value: &Value, wanted: &[&str]) {
    for key in wanted {
        assert!(value.get(*key).is_some(), "{key} missing in {value}");
    }
}

const SCHEDULER_KEYS: [&str; 18] = [
    "spawn_overflow",
    "spawn_queue_depth",
    "max_spawn_queue",
    "spawn_queue_timeout",
    "admission_control",
    "spawn_queued_total",
    "spawn_dequeued_total",
    "spawn_queue_timeouts",
    "spawn_queue_wait_count",
    "spawn_queue_wait_total",
    "spawn_queue_wait_max",
    "spawn_queue_wait_avg",
    "spawn_queue_wait_total_ms",
    "spawn_queue_wait_max_ms",
    "spawn_queue_wait_avg_ms",
    "worker_id",
    "selected_worker_id",
    "eligible_workers",
];
const RATE_LIMIT_KEYS: [&str; 10] = [
    "enabled",
    "requests_per_minute",
    "burst",
    "key_by",
    "active_buckets",
    "allowed_total",
    "limited_total",
    "evicted_total",
    "bucket_ttl",
    "cleanup_interval",
];
const OPERATION_KEYS: [&str; 9] = [
    "operation",
    "provider",
    "success_total",
    "failure_total",
    "latency_count",
    "latency_total_ms",
    "latency_min_ms",
    "latency_max_ms",
    "latency_avg_ms",
];

fn operation<'a>(operations: &'a Value, name: &str) -> &'a Value {
    operations
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["operation"] == name && o["provider"] == "mock")
        .unwrap_or_else(|| panic!("no {name} in {operations}"))
}

/// A server with a capacity of one in queue mode and a tight rate limit, so every counter can
/// be moved by a test.
async fn busy_server() -> Arc<TestServer> {
    Arc::new(
        TestServer::start_with(|c| {
            c.defaults.spawn_overflow = SpawnOverflow::Queue;
            c.defaults.spawn_queue_timeout = GoDuration::from_secs(20);
            c.defaults.max_sandboxes = 1;
            c.rate_limit.enabled = true;
            c.rate_limit.requests_per_minute = 60;
            c.rate_limit.burst = 1000;
        })
        .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostics_have_every_key_and_move_with_work() {
    let server = busy_server().await;
    let before = server.get("/diagnostics").await;
    assert_eq!(before.status, 200, "{}", before.body);
    let d = &before.body;
    assert_eq!(
        keys(d),
        [
            "build",
            "events",
            "generated_at",
            "leases",
            "limits",
            "operations",
            "process",
            "providers",
            "quotas",
            "rate_limit",
            "redactions",
            "remediation",
            "sandboxes",
            "scheduler",
            "store",
            "workers"
        ]
    );
    assert_eq!(d["build"]["goos"], "linux");
    has_keys(&d["build"], &["version", "goarch"]);
    has_keys(&d["process"], &["uptime", "goroutines", "memory"]);
    assert!(d["process"]["goroutines"].as_u64().unwrap() > 0);
    assert!(d["process"]["memory"]["alloc"].as_u64().unwrap() > 1_000_000);
    has_keys(
        &d["process"]["memory"],
        &["alloc", "sys", "heap_alloc", "gc_cycles"],
    );
    assert_eq!(d["store"]["healthy"], true);
    assert!(
        d["store"]["latency_ms"].is_u64(),
        "store.latency_ms is whole milliseconds: {}",
        d["store"]
    );
    has_keys(
        &d["limits"],
        &[
            "max_sandboxes",
            "max_sandboxes_per_owner",
            "default_exec_timeout",
            "max_exec_timeout",
            "max_ttl",
            "spawn_overflow",
            "spawn_queue_timeout",
            "max_spawn_queue",
        ],
    );
    assert_eq!(d["limits"]["max_sandboxes"], 1);
    assert_eq!(d["limits"]["spawn_queue_timeout"], "20s");
    has_keys(&d["scheduler"], &SCHEDULER_KEYS);
    assert_eq!(d["scheduler"]["admission_control"], "worker_aware_local");
    has_keys(&d["rate_limit"], &RATE_LIMIT_KEYS);
    has_keys(&d["quotas"], &["total"]);
    assert_eq!(d["providers"][0]["name"], "mock");
    assert_eq!(
        keys(&d["workers"]),
        ["items", "online", "stale", "total", "unhealthy"]
    );
    assert_eq!(d["workers"]["online"], 1);
    assert_eq!(d["workers"]["items"][0]["id"], "local");
    assert_eq!(
        keys(&d["leases"]),
        ["active", "by_holder", "expired", "total"]
    );
    assert_eq!(
        keys(&d["sandboxes"]),
        ["active", "by_provider", "by_state", "by_worker", "total"]
    );
    assert_eq!(
        keys(&d["events"]),
        ["events_total", "history_size", "subscribers"]
    );
    assert!(d["operations"].is_array());
    for area in ["providers", "store", "scheduler", "workers"] {
        assert!(
            d["remediation"][area]
                .as_str()
                .unwrap()
                .starts_with("docs/"),
            "{area}"
        );
    }
    let redactions: Vec<&str> = d["redactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    for hidden in [
        "provider secrets",
        "registry credentials",
        "environment secrets",
        "API keys",
    ] {
        assert!(
            redactions.contains(&hidden),
            "{hidden} not in {redactions:?}"
        );
    }

    // Work: a spawn, an exec, a failed exec, a queued spawn, a rate-limited burst.
    let first = server.spawn(json!({})).await;
    let id = first["id"].as_str().unwrap().to_owned();
    let exec = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo hi"}),
        )
        .await;
    assert_eq!(exec.status, 200, "{}", exec.body);
    let missing = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "/no/such/program", "args": []}),
        )
        .await;
    assert!(missing.status.is_client_error(), "{}", missing.body);
    let queued = {
        let server = Arc::clone(&server);
        tokio::spawn(async move { server.post("/sandboxes", json!({})).await })
    };
    crate::harness::wait_for("a queued spawn", Duration::from_secs(30), || {
        let server = Arc::clone(&server);
        async move { server.get("/diagnostics").await.body["scheduler"]["spawn_queue_depth"] == 1 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    let second = queued.await.unwrap();
    assert_eq!(second.status, 201, "{}", second.body);
    let mut limited = 0;
    for _ in 0..3 {
        let reply = server
            .call_as(&[("X-User-ID", "burst")], Method::GET, "/health", None)
            .await;
        limited += u32::from(reply.status == 429);
    }
    // /health is never rate limited: only API routes count.
    assert_eq!(limited, 0);

    let after = server.get("/diagnostics").await.body;
    assert_eq!(after["sandboxes"]["active"], 1, "{}", after["sandboxes"]);
    assert_eq!(after["sandboxes"]["by_state"]["running"], 1);
    assert_eq!(after["sandboxes"]["by_state"]["destroyed"], 1);
    assert_eq!(after["sandboxes"]["by_provider"]["mock"], 1);
    assert_eq!(after["sandboxes"]["by_worker"]["local"], 1);
    assert_eq!(after["sandboxes"]["total"], 2);
    assert_eq!(after["leases"]["by_holder"]["local"], 1);
    assert_eq!(after["scheduler"]["spawn_queued_total"], 1);
    assert_eq!(after["scheduler"]["spawn_dequeued_total"], 1);
    assert_eq!(after["scheduler"]["spawn_queue_wait_count"], 1);
    assert!(
        after["scheduler"]["spawn_queue_wait_total_ms"]
            .as_u64()
            .unwrap()
            >= 20
    );
    assert!(
        after["events"]["events_total"].as_u64().unwrap()
            > before.body["events"]["events_total"].as_u64().unwrap() + 6
    );
    assert!(after["rate_limit"]["allowed_total"].as_u64().unwrap() > 5);
    let spawn = operation(&after["operations"], "spawn");
    for key in OPERATION_KEYS {
        assert!(spawn.get(key).is_some(), "{key} missing in {spawn}");
    }
    assert_eq!(spawn["success_total"], 2);
    assert_eq!(spawn["latency_count"], 2);
    assert!(spawn["latency_max_ms"].as_f64().unwrap() >= spawn["latency_min_ms"].as_f64().unwrap());
    let exec = operation(&after["operations"], "exec");
    assert_eq!(exec["success_total"], 1, "{exec}");
    assert_eq!(exec["failure_total"], 1, "{exec}");
    assert_eq!(
        operation(&after["operations"], "destroy")["success_total"],
        1
    );
    assert!(
        operation(&after["operations"], "health")["success_total"]
            .as_u64()
            .unwrap()
            >= 1
    );
}

#[tokio::test]
async fn rate_limit_hits_show_in_diagnostics_and_the_scrape() {
    let server = TestServer::start_with(|c| {
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_minute = 60;
        c.rate_limit.burst = 2;
    })
    .await;
    let mut limited = 0;
    for _ in 0..4 {
        let reply = server
            .call_as(&[("X-User-ID", "burst")], Method::GET, "/sandboxes", None)
            .await;
        limited += u64::from(reply.status == 429);
    }
    assert_eq!(limited, 2);
    let d = server
        .call_as(
            &[("X-User-ID", "reader")],
            Method::GET,
            "/diagnostics",
            None,
        )
        .await
        .body;
    assert_eq!(d["rate_limit"]["limited_total"], 2, "{}", d["rate_limit"]);
    assert_eq!(d["rate_limit"]["enabled"], true);
    let text = scrape(&server, "/metrics/scrape", &[("X-User-ID", "scraper")]).await;
    assert!(
        text.contains("\nsvc_rate_limit_blocked_total 2\n"),
        "{text}"
    );
}

async fn scrape(server: &TestServer, path: &str, headers: &[(&str, &str)]) -> String {
    let mut request = server.client.get(server.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    response.text().await.unwrap()
}

#[tokio::test]
async fn metrics_json_has_every_key() {
    let server = TestServer::start().await;
    server.spawn(json!({})).await;
    let m = server.get("/metrics").await.body;
    assert_eq!(
        keys(&m),
        [
            "events",
            "gc_cycles",
            "goroutines",
            "leases",
            "memory_alloc",
            "memory_heap_alloc",
            "memory_sys",
            "operations",
            "providers",
            "quotas",
            "rate_limit",
            "sandboxes",
            "scheduler",
            "uptime",
            "workers"
        ]
    );
    assert!(
        m["uptime"].as_f64().unwrap() >= 0.0,
        "uptime is seconds: {}",
        m["uptime"]
    );
    assert_eq!(keys(&m["providers"]), ["healthy", "items", "total"]);
    assert_eq!(
        keys(&m["providers"]["items"][0]),
        ["default", "healthy", "name"]
    );
    assert_eq!(m["providers"]["items"][0]["name"], "mock");
    assert_eq!(m["sandboxes"]["active"], 1);
    has_keys(&m["scheduler"], &SCHEDULER_KEYS);
    has_keys(&m["rate_limit"], &RATE_LIMIT_KEYS);
    for key in OPERATION_KEYS {
        assert!(m["operations"][0].get(key).is_some(), "{key}");
    }
    // The admin alias answers the same shape.
    assert_eq!(keys(&server.get("/admin/metrics").await.body), keys(&m));
    assert_eq!(
        keys(&server.get("/admin/diagnostics").await.body),
        keys(&server.get("/diagnostics").await.body)
    );
}

#[tokio::test]
async fn the_scrape_has_every_family_and_promtool_accepts_it() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({})).await;
    let id = sandbox["id"].as_str().unwrap();
    server
        .post(&format!("/sandboxes/{id}/exec"), json!({"command": "true"}))
        .await;
    let text = scrape(&server, "/metrics/scrape", &[]).await;
    assert_eq!(
        text,
        text.trim_end().to_owned() + "\n",
        "ends with one newline"
    );
    for (family, kind) in [
        ("svc_uptime_seconds", "gauge"),
        ("svc_provider_healthy", "gauge"),
        ("svc_spawn_queue_depth", "gauge"),
        ("svc_spawn_queue_wait_milliseconds", "summary"),
        ("svc_owner_quotas_total", "gauge"),
        ("svc_rate_limit_blocked_total", "counter"),
        ("svc_workers_total", "gauge"),
        ("svc_leases_total", "gauge"),
        ("svc_sandboxes_by_worker_total", "gauge"),
        ("svc_operation_success_total", "counter"),
        ("svc_operation_failure_total", "counter"),
        ("svc_http_requests_total", "counter"),
        ("svc_http_request_duration_seconds", "histogram"),
    ] {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "no HELP for {family}"
        );
        assert!(
            text.contains(&format!("# TYPE {family} {kind}\n")),
            "no TYPE {kind} for {family}"
        );
    }
    for line in [
        "svc_provider_healthy{default=\"true\",provider=\"mock\"} 1",
        "svc_spawn_queue_wait_milliseconds_count 0",
        "svc_workers_total{status=\"total\"} 1",
        "svc_workers_total{status=\"online\"} 1",
        "svc_workers_total{status=\"stale\"} 0",
        "svc_workers_total{status=\"unhealthy\"} 0",
        "svc_leases_total{status=\"active\"} 1",
        "svc_leases_total{status=\"expired\"} 0",
        "svc_leases_total{status=\"total\"} 1",
        "svc_sandboxes_by_worker_total{worker=\"local\"} 1",
        "svc_operation_success_total{operation=\"spawn\",provider=\"mock\"} 1",
        "svc_operation_success_total{operation=\"exec\",provider=\"mock\"} 1",
        "svc_operation_failure_total{operation=\"spawn\",provider=\"mock\"} 0",
        "svc_http_requests_total{method=\"POST\",route=\"/api/v1/sandboxes\",status=\"201\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(text.contains(
        "svc_http_request_duration_seconds_bucket{method=\"POST\",route=\"/api/v1/sandboxes/{id}/exec\",le=\"+Inf\"} 1"
    ));
    // Unknown paths are one label, whatever was asked.
    server.get("/no/such/route/1").await;
    server.get("/no/such/route/2").await;
    let text = scrape(&server, "/admin/metrics/scrape", &[]).await;
    assert!(
        text.contains("route=\"unmatched\",status=\"404\"} 2"),
        "{text}"
    );
    promtool_accepts(&text);
}

/// `promtool check metrics`: no problem but the naming lints interface.md's names force.
fn promtool_accepts(text: &str) {
    use std::io::Write;
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var_os("SVC_TEST_REQUIRE_PROMTOOL").is_none()
                && std::env::var_os("CI").is_none(),
            "promtool is required here (scripts/test.sh installs Debian's prometheus package)"
        );
        eprintln!("SKIPPED: promtool is not installed; the exposition was not linted (run scripts/test.sh)");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let forced = [
        "svc_leases_total non-counter metrics should not have \"_total\" suffix",
        "svc_owner_quotas_total non-counter metrics should not have \"_total\" suffix",
        "svc_sandboxes_by_worker_total non-counter metrics should not have \"_total\" suffix",
        "svc_workers_total non-counter metrics should not have \"_total\" suffix",
        "svc_spawn_queue_wait_milliseconds use base unit \"seconds\" instead of \"milliseconds\"",
    ];
    for problem in report.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            forced.contains(&problem.trim()),
            "promtool: {problem}\n{report}"
        );
    }
}

/// Secrets configured and used, then looked for everywhere an operator or a client can read:
/// diagnostics, JSON and text metrics (plain and admin), the event history, and the server's
/// own debug log. Owner IDs are secret to diagnostics, metrics and logs; events carry them by
/// design (decisions §12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_diagnostics_metrics_events_or_logs() {
    const API_KEY: &str = "redact-api-key-5f1c0a9e7d3b2a41";
    const ADMIN_KEY: &str = "redact-admin-key-0c8e6b4a2f9d7351";
    const SHARED_WORKER_TOKEN: &str = "redact-shared-worker-token-91ab";
    const STATIC_WORKER_TOKEN: &str = "redact-static-worker-token-77cd";
    const SIGNING_KEY: &str = "redact-signing-key-3e5a7c9b1d2f4680";
    const DSN_PASSWORD: &str = "redact-dsn-password-4b6d";
    const OWNER: &str = "redact-owner-8c2e";
    const WRONG_KEY: &str = "redact-wrong-key-6a1f";
    let dir = tempfile::tempdir().unwrap();
    let port = crate::cli::free_port();
    let child = crate::cli::serve_in(dir.path(), port)
        .env("SVC_LOGGING__LEVEL", "debug")
        .env("SVC_AUTH__ENABLED", "true")
        .env("SVC_AUTH__API_KEY", API_KEY)
        .env("SVC_AUTH__ADMIN_API_KEY", ADMIN_KEY)
        .env("SVC_AUTH__WORKER_TOKEN", SHARED_WORKER_TOKEN)
        .env("SVC_AUTH__WORKER_TOKENS__W1", STATIC_WORKER_TOKEN)
        .env("SVC_AUTH__WORKER_SIGNING_KEY", SIGNING_KEY)
        .env(
            "SVC_DATABASE__DSN",
            format!("postgres://svc:{DSN_PASSWORD}@db.internal/svc"),
        )
        .spawn()
        .unwrap();
    crate::cli::wait_until_serving(port);
    let base = format!("http://127.0.0.1:{port}/api/v1");
    let client = reqwest::Client::new();
    let send = |method: Method, path: &str, headers: &[(&str, &str)], body: Option<Value>| {
        let mut request = client.request(method, format!("{base}{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }
    };
    let admin = [("X-Admin-API-Key", ADMIN_KEY)];
    let as_owner = [("X-API-Key", API_KEY), ("X-User-ID", OWNER)];

    // Use every secret.
    let (status, body) = send(Method::POST, "/sandboxes", &as_owner, Some(json!({}))).await;
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = send(
        Method::POST,
        &format!("/sandboxes/{id}/exec"),
        &as_owner,
        Some(json!({"command": "echo hi"})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = send(
        Method::PUT,
        &format!("/quotas/{OWNER}"),
        &admin,
        Some(json!({"max_sandboxes": 3})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, body) = send(
        Method::POST,
        "/admin/worker-tokens",
        &admin,
        Some(json!({"worker_id": "w1"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let minted = serde_json::from_str::<Value>(&body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let beat = json!({"hostname": "w1-host", "status": "online", "providers": ["mock"],
                      "capabilities": ["spawn"], "capacity": {"max_sandboxes": 2}});
    for token in [STATIC_WORKER_TOKEN, SHARED_WORKER_TOKEN, minted.as_str()] {
        let (status, body) = send(
            Method::POST,
            "/worker/w1/heartbeat",
            &[("X-Worker-ID", "w1"), ("X-Worker-Token", token)],
            Some(beat.clone()),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    for headers in [
        [("X-API-Key", WRONG_KEY)],
        [("X-Admin-API-Key", WRONG_KEY)],
        [("Authorization", "Bearer redact-wrong-key-6a1f.x.y")],
    ] {
        let (status, body) = send(Method::GET, "/sandboxes", &headers, None).await;
        assert_eq!(status, 401, "{body}");
        assert!(!body.contains(WRONG_KEY));
    }
    let (status, _) = send(
        Method::POST,
        "/worker/w1/heartbeat",
        &[("X-Worker-ID", "w1"), ("X-Worker-Token", WRONG_KEY)],
        Some(beat),
    )
    .await;
    assert_eq!(status, 401);

    // Read everything an operator can.
    let mut readings = Vec::new();
    for path in [
        "/diagnostics",
        "/metrics",
        "/metrics/scrape",
        "/admin/diagnostics",
        "/admin/metrics",
        "/admin/metrics/scrape",
        "/workers",
        "/providers",
        "/quotas/summary",
    ] {
        let (status, body) = send(Method::GET, path, &admin, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        readings.push((path, body));
    }
    // The whole event history: a replay from an ID no longer (never) held, read up to the
    // event of one more quota change made once the stream is open.
    let marker = "events-marker-owner-2d7b";
    let events = {
        let response = client
            .get(format!("{base}/events"))
            .header("X-Admin-API-Key", ADMIN_KEY)
            .header("Last-Event-ID", "ev-none")
            .send()
            .await
            .unwrap();
        let (status, _) = send(
            Method::PUT,
            &format!("/quotas/{marker}"),
            &admin,
            Some(json!({"max_sandboxes": 1})),
        )
        .await;
        assert_eq!(status, 200);
        let mut stream = response.bytes_stream();
        let mut text = String::new();
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !text.contains(marker) {
            let chunk = tokio::time::timeout_at(deadline, stream.next())
                .await
                .unwrap_or_else(|_| panic!("no quota.saved for {marker} in time: {text}"))
                .expect("the event stream ended")
                .unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text
    };
    assert!(events.contains("sandbox.created"), "{events}");
    // OWNER's from the history, besides the marker's.
    assert!(events.matches("quota.saved").count() >= 2, "{events}");
    let output = crate::cli::stop(child);
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        log.contains("DEBUG") || log.contains("debug"),
        "debug logging was on"
    );

    let secrets = [
        API_KEY,
        ADMIN_KEY,
        SHARED_WORKER_TOKEN,
        STATIC_WORKER_TOKEN,
        SIGNING_KEY,
        DSN_PASSWORD,
        WRONG_KEY,
        minted.as_str(),
    ];
    for (what, text) in readings
        .iter()
        .map(|(p, b)| (*p, b.as_str()))
        .chain([("events", events.as_str()), ("log", log.as_str())])
    {
        for secret in secrets {
            assert!(!text.contains(secret), "{what} shows the secret {secret}");
        }
        if what != "events" {
            let shown: Vec<&str> = text.lines().filter(|l| l.contains(OWNER)).collect();
            assert!(shown.is_empty(), "{what} shows the owner ID: {shown:#?}");
        }
    }
    // The signed token's signature part is never logged either.
    let signature = minted.rsplit('.').next().unwrap();
    assert!(!log.contains(signature));
}

/// The alert rules of docs/operations.md load in Prometheus (`promtool check rules`).
#[test]
fn the_documented_alert_rules_are_valid() {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"),
    )
    .unwrap();
    let rules = guide
        .split("```yaml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap())
        .find(|block| block.starts_with("groups:"))
        .expect("an alert rules block in docs/operations.md");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), rules).unwrap();
    let Ok(output) = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(file.path())
        .output()
    else {
        assert!(
            std::env::var_os("SVC_TEST_REQUIRE_PROMTOOL").is_none()
                && std::env::var_os("CI").is_none(),
            "promtool is required here (scripts/test.sh installs Debian's prometheus package)"
        );
        eprintln!("SKIPPED: promtool is not installed; the alert rules were not checked");
        return;
    };
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("8 rules found"));
}
