//! Several replicas on one PostgreSQL database (interface Events 5; decisions §12), each a real
//! server on its own port with its own worker ID, in a schema of the test database made for the
//! test. Skipped (loudly) without `SVC_TEST_POSTGRES_DSN`, except in CI.

use std::time::Duration;

use serde_json::json;
use svc_core::config::{Config, DatabaseDriver, Secret};

use crate::harness::TestServer;

/// The test database, or `None` (after saying so) when there is none and none is required.
fn postgres_dsn() -> Option<String> {
    match std::env::var("SVC_TEST_POSTGRES_DSN") {
        Ok(dsn) if !dsn.is_empty() => Some(dsn),
        _ => {
            assert!(
                std::env::var_os("SVC_TEST_REQUIRE_POSTGRES").is_none()
                    && std::env::var_os("CI").is_none(),
                "SVC_TEST_POSTGRES_DSN is required here (scripts/test.sh starts PostgreSQL)"
            );
            eprintln!("SKIPPED: no PostgreSQL (SVC_TEST_POSTGRES_DSN is not set); the replica tests did not run");
            None
        }
    }
}

/// A fresh schema of the test database, dropped when the value is.
struct Schema {
    dsn: String,
    name: String,
}

impl Schema {
    async fn create(dsn: &str) -> Schema {
        let name = format!("svc_it_{}", hex_id());
        let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
            .await
            .expect("connecting to the test database");
        tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .unwrap();
        Schema {
            dsn: dsn.to_owned(),
            name,
        }
    }

    /// The DSN whose connections work in this schema.
    fn dsn(&self) -> String {
        let separator = if self.dsn.contains('?') { '&' } else { '?' };
        format!(
            "{}{separator}options=-c%20search_path%3D{}",
            self.dsn, self.name
        )
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (dsn, name) = (self.dsn.clone(), self.name.clone());
        // Dropped from a thread of its own: the test's runtime may be shutting down.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok((client, connection)) =
                    tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await
                {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                        .await;
                }
            });
        })
        .join();
    }
}

fn hex_id() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    // An ID no other test picks, not a time anyone reads.
    #[allow(clippy::disallowed_methods)]
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{:x}{:x}", nanos, std::process::id())
}

fn replica(config: &mut Config, dsn: &str, worker: &str) {
    config.database.driver = DatabaseDriver::Postgres;
    config.database.dsn = Secret::new(dsn);
    config.worker.id = worker.to_owned();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_delivers_each_event_exactly_once() {
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    let dsn = schema.dsn();
    let mut replicas = Vec::new();
    for worker in ["a", "b", "c"] {
        replicas.push(TestServer::start_with(|c| replica(c, &dsn, worker)).await);
    }
    let mut streams = Vec::new();
    for server in &replicas {
        streams.push(server.events("?types=sandbox.created", None).await);
    }
    // A spawn on each replica in turn reaches every subscriber once, with one event ID.
    for origin in 0..replicas.len() {
        let sandbox = replicas[origin].spawn(json!({})).await;
        let id = sandbox["id"].as_str().unwrap();
        let mut event_ids = Vec::new();
        for (i, stream) in streams.iter_mut().enumerate() {
            let message = stream
                .next(Duration::from_secs(30))
                .await
                .unwrap_or_else(|| {
                    panic!("replica {i} never got sandbox.created of replica {origin}")
                });
            assert_eq!(message.data["sandbox_id"], id, "replica {i}");
            assert_eq!(message.data["data"]["worker_id"], ["a", "b", "c"][origin]);
            event_ids.push(message.data["id"].as_str().unwrap().to_owned());
        }
        assert!(
            event_ids.iter().all(|e| *e == event_ids[0]),
            "{event_ids:?}"
        );
    }
    // And nothing twice.
    for (i, stream) in streams.iter_mut().enumerate() {
        if let Some(extra) = stream.next(Duration::from_millis(1500)).await {
            panic!("replica {i} got a second event: {:?}", extra.data);
        }
    }
    // History (for Last-Event-ID replays) holds the foreign events too, once each.
    let diagnostics = replicas[2].get("/diagnostics").await.body;
    assert!(diagnostics["events"]["events_total"].as_u64().unwrap() >= 6);
    // The DSN's credentials appear in no diagnostics or metrics.
    let credentials = dsn.split('@').next().unwrap().to_owned();
    let metrics = replicas[2]
        .client
        .get(replicas[2].url("/metrics/scrape"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (what, text) in [
        ("diagnostics", diagnostics.to_string()),
        ("metrics", metrics),
    ] {
        assert!(!text.contains(&credentials), "{what} show the DSN");
        assert!(!text.contains("@127.0.0.1"), "{what} show the DSN");
    }
    for server in replicas {
        server.shutdown().await;
    }
    drop(schema);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_beyond_notifys_8000_bytes_crosses_replicas_whole() {
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    let dsn = schema.dsn();
    let a = TestServer::start_with(|c| replica(c, &dsn, "a")).await;
    let b = TestServer::start_with(|c| replica(c, &dsn, "b")).await;
    let mut stream = b.events("?types=operation.failed", None).await;
    // NOTIFY refuses payloads of 8000 bytes or more; this event is 30 000 and multi-byte.
    let error = "défaillance ".repeat(2500);
    a.plane().events().publish(
        None,
        svc_core::event::EventPayload::OperationFailed(svc_core::event::FailureEventData {
            operation: "exec".into(),
            provider: "mock".into(),
            error: error.clone(),
        }),
    );
    let message = stream
        .next(Duration::from_secs(30))
        .await
        .expect("the large event reached replica b");
    assert_eq!(message.data["data"]["error"], error.as_str());
    assert!(
        stream.next(Duration::from_millis(1000)).await.is_none(),
        "delivered once"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_sandbox_is_destroyed_once_across_replicas() {
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    // One mock directory for all three, as one Docker engine would be: every reaper can reach
    // every runtime, so they all race for every expired sandbox.
    let shared = tempfile::tempdir().unwrap();
    let root = shared.path().to_path_buf();
    let root = &root;
    let replicas = three_replicas(&schema, |c| {
        c.defaults.reap_interval = svc_core::GoDuration::from_millis(50);
        c.providers.mock.root_dir = root.clone();
    })
    .await;
    let mut streams = Vec::new();
    for server in &replicas {
        streams.push(server.events("?types=sandbox.destroyed", None).await);
    }
    let mut ids = Vec::new();
    for n in 0..6 {
        let sandbox = replicas[n % 3].spawn(json!({"ttl": "1m"})).await;
        ids.push(sandbox["id"].as_str().unwrap().to_owned());
    }
    // Past every sandbox's expiry and every lease's, on every replica's clock.
    for server in &replicas {
        server.clock.advance(Duration::from_secs(120));
    }
    for (i, stream) in streams.iter_mut().enumerate() {
        let mut seen: Vec<String> = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while seen.len() < ids.len() {
            let remaining = deadline.saturating_duration_since(std::time::Instant::now());
            let message = stream
                .next(remaining)
                .await
                .unwrap_or_else(|| panic!("replica {i} saw only {seen:?} of {ids:?} destroyed"));
            assert_eq!(
                message.data["data"]["reason"], "expired",
                "{:?}",
                message.data
            );
            seen.push(message.data["sandbox_id"].as_str().unwrap().to_owned());
        }
        if let Some(extra) = stream.next(Duration::from_millis(1500)).await {
            panic!(
                "replica {i} got a destroy beyond {seen:?}: {:?}",
                extra.data
            );
        }
        seen.sort();
        let mut expected = ids.clone();
        expected.sort();
        assert_eq!(
            seen, expected,
            "replica {i}: each sandbox destroyed exactly once"
        );
    }
    for id in &ids {
        assert!(!root.join(id).exists(), "{id}'s runtime was removed");
    }
}

/// Three replicas started on a fresh schema, each configured by `adjust` too.
async fn three_replicas(
    schema: &Schema,
    adjust: impl Fn(&mut Config) + Copy,
) -> Vec<std::sync::Arc<TestServer>> {
    let dsn = schema.dsn();
    let mut replicas = Vec::new();
    for worker in ["a", "b", "c"] {
        let server = TestServer::start_with(|c| {
            replica(c, &dsn, worker);
            adjust(c);
        })
        .await;
        replicas.push(std::sync::Arc::new(server));
    }
    replicas
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_spawns_over_three_replicas_never_over_admit() {
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    let replicas = three_replicas(&schema, |c| {
        c.defaults.max_sandboxes = 20;
        c.defaults.max_sandboxes_per_owner = 0;
    })
    .await;
    let spawns: Vec<_> = (0..300)
        .map(|n| {
            let server = std::sync::Arc::clone(&replicas[n % 3]);
            tokio::spawn(async move { server.post("/sandboxes", json!({})).await.status.as_u16() })
        })
        .collect();
    let mut admitted = 0;
    for spawn in spawns {
        match spawn.await.unwrap() {
            201 => admitted += 1,
            429 => {}
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(
        admitted, 20,
        "the replicas together admitted {admitted} of max_sandboxes 20"
    );
    for server in &replicas {
        let active = server.get("/diagnostics").await.body["sandboxes"]["active"].clone();
        assert_eq!(active, 20);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_freed_on_one_replica_wakes_a_spawn_queued_on_another() {
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    let replicas = three_replicas(&schema, |c| {
        c.defaults.max_sandboxes = 1;
        c.defaults.spawn_overflow = svc_core::config::SpawnOverflow::Queue;
        c.defaults.spawn_queue_timeout = svc_core::GoDuration::from_secs(30);
    })
    .await;
    let holder = replicas[0].spawn(json!({})).await;
    let holder_id = holder["id"].as_str().unwrap().to_owned();
    let mut queued_events = replicas[1].events("?types=spawn.queued", None).await;
    let waiting = {
        let server = std::sync::Arc::clone(&replicas[1]);
        tokio::spawn(async move { server.post("/sandboxes", json!({})).await })
    };
    assert!(
        queued_events.next(Duration::from_secs(30)).await.is_some(),
        "the spawn on b did not queue"
    );
    assert_eq!(
        replicas[0]
            .delete(&format!("/sandboxes/{holder_id}"))
            .await
            .status,
        200
    );
    // Woken by the relayed event (or the queue head's re-check each second): a spawn still
    // queued at its 30 s timeout is refused, not created.
    let answered = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the queued spawn on b was woken")
        .unwrap();
    assert_eq!(answered.status, 201, "{}", answered.body);
}

/// `svc db ...` with the server's settings in the environment; (exit code, stdout, stderr).
fn db_command(args: &[&str], env: &[(&str, &str)], dir: &std::path::Path) -> (i32, String, String) {
    let mut command = crate::cli::svc();
    command.arg("db").args(args).current_dir(dir);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_backup_and_rehearse() {
    let dir = tempfile::tempdir().unwrap();
    // Refused, with the reason, on SQLite.
    let (code, _, stderr) = db_command(&["pg-rehearse"], &[], dir.path());
    assert_eq!(code, 1);
    assert!(stderr.contains("database.driver"), "{stderr}");
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    // Another application's schema in the same database: not svc's to back up.
    let neighbour = Schema::create(&dsn).await;
    let dsn = schema.dsn();
    let store = svc_store::postgres::PgStore::connect(&dsn, 2)
        .await
        .unwrap();
    svc_store::Store::close(&store).await;
    let env = [
        ("SVC_DATABASE__DRIVER", "postgres"),
        ("SVC_DATABASE__DSN", dsn.as_str()),
    ];

    let (code, stdout, stderr) = db_command(&["pg-rehearse"], &env, dir.path());
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("ok: the schema is current"), "{stdout}");

    let backup = dir.path().join("svc.dump");
    let backup_arg = backup.to_str().unwrap();
    let (code, stdout, stderr) = db_command(&["pg-backup", backup_arg], &env, dir.path());
    assert_eq!(code, 0, "{stdout}{stderr}");
    let listing = std::process::Command::new("pg_restore")
        .arg("--list")
        .arg(&backup)
        .output()
        .expect("pg_restore runs");
    assert!(listing.status.success());
    let listing = String::from_utf8_lossy(&listing.stdout);
    for table in ["sandboxes", "leases", "events", "schema_migrations"] {
        assert!(
            listing.contains(&format!("TABLE {} {table}", schema.name)),
            "{table}: {listing}"
        );
    }
    assert!(!listing.contains(&neighbour.name), "{listing}");
    // Never overwrites.
    let (code, _, stderr) = db_command(&["pg-backup", backup_arg], &env, dir.path());
    assert_eq!(code, 1);
    assert!(stderr.contains("never overwrites"), "{stderr}");
    // A wrong password fails without showing it; a missing pg_dump is named.
    let wrong = dsn.replacen(
        &format!(
            ":{}@",
            dsn.split(':').nth(2).unwrap().split('@').next().unwrap()
        ),
        ":not-the-password-7f2c@",
        1,
    );
    assert!(wrong.contains("not-the-password-7f2c"));
    let other = dir.path().join("other.dump");
    let (code, _, stderr) = db_command(
        &["pg-backup", other.to_str().unwrap()],
        &[
            ("SVC_DATABASE__DRIVER", "postgres"),
            ("SVC_DATABASE__DSN", wrong.as_str()),
        ],
        dir.path(),
    );
    assert_eq!(code, 1);
    assert!(!stderr.contains("not-the-password-7f2c"), "{stderr}");
    assert!(!other.exists());
    let (code, _, stderr) = db_command(
        &["pg-backup", other.to_str().unwrap()],
        &[env[0], env[1], ("PATH", "/nonexistent")],
        dir.path(),
    );
    assert_eq!(code, 1);
    assert!(stderr.contains("pg_dump is not installed"), "{stderr}");

    // A database missing a table fails the rehearsal, naming it.
    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute("DROP TABLE events").await.unwrap();
    let (code, stdout, stderr) = db_command(&["pg-rehearse"], &env, dir.path());
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("missing: table events"), "{stdout}");
    assert!(stderr.contains("an upgrade would fail"), "{stderr}");
}

#[tokio::test]
async fn a_wrong_dsn_password_is_never_shown() {
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let password = dsn
        .split(':')
        .nth(2)
        .unwrap()
        .split('@')
        .next()
        .unwrap()
        .to_owned();
    let wrong = dsn.replacen(&format!(":{password}@"), ":wrong-pass-51e9@", 1);
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.providers.mock.root_dir = dir.path().join("mock");
    config.providers.docker.enabled = false;
    replica(&mut config, &wrong, "a");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let Err(err) = svc::start(config, listener).await else {
        panic!("started with a wrong password");
    };
    let message = format!("{err:#} {err:?}");
    assert!(message.contains("database.dsn"), "{message}");
    assert!(!message.contains("wrong-pass-51e9"), "{message}");
}

/// Two replicas on `dsn` with an event stream each: a sandbox created before `disrupt` and one
/// created after it (retried while the store answers 503) each reach every stream exactly once.
async fn events_survive<F: std::future::Future<Output = ()>>(dsn: &str, disrupt: F) {
    let mut replicas = Vec::new();
    for worker in ["a", "b"] {
        replicas.push(TestServer::start_with(|c| replica(c, dsn, worker)).await);
    }
    let mut streams = Vec::new();
    for server in &replicas {
        streams.push(server.events("?types=sandbox.created", None).await);
    }
    let first = replicas[0].spawn(json!({})).await;
    for stream in &mut streams {
        let message = stream
            .next(Duration::from_secs(30))
            .await
            .expect("first event");
        assert_eq!(message.data["sandbox_id"], first["id"]);
    }
    disrupt.await;
    // The next requests may meet dead pooled connections (or a database still starting): the
    // pool drops them and the store answers again within a few tries.
    let mut second = None;
    for _ in 0..80 {
        let reply = replicas[1].post("/sandboxes", json!({})).await;
        if reply.status == 201 {
            second = Some(reply.body);
            break;
        }
        assert_eq!(reply.status, 503, "{}", reply.body);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let second = second.expect("replica b serves again after the disruption");
    for (i, stream) in streams.iter_mut().enumerate() {
        let message = stream
            .next(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("replica {i} never got the event after the disruption"));
        assert_eq!(message.data["sandbox_id"], second["id"], "replica {i}");
    }
    for (i, stream) in streams.iter_mut().enumerate() {
        if let Some(extra) = stream.next(Duration::from_millis(1500)).await {
            panic!("replica {i} got an event twice: {:?}", extra.data);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_recover_when_their_connections_are_cut() {
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    // Every connection of this test's replicas carries the schema's name, so the test can cut
    // exactly those, as a database restart would.
    let tagged = format!("{}&application_name={}", schema.dsn(), schema.name);
    events_survive(&tagged, async {
        let (admin, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let cut: i64 = admin
            .query_one(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                &[&schema.name],
            )
            .await
            .unwrap()
            .get(0);
        assert!(cut >= 2, "the replicas' connections ({cut}) were cut");
    })
    .await;
}

/// The cluster this test may restart (scripts/postgres-test-env.sh makes one of its own, so
/// no other test is disturbed): its DSN and `pg_ctlcluster`'s version and name.
fn restartable_postgres() -> Option<(String, Vec<String>)> {
    let dsn = std::env::var("SVC_TEST_POSTGRES_RESTART_DSN").unwrap_or_default();
    let cluster = std::env::var("SVC_TEST_POSTGRES_RESTART_CLUSTER").unwrap_or_default();
    if dsn.is_empty() || cluster.is_empty() {
        assert!(
            std::env::var_os("SVC_TEST_REQUIRE_POSTGRES").is_none()
                && std::env::var_os("CI").is_none(),
            "SVC_TEST_POSTGRES_RESTART_DSN and SVC_TEST_POSTGRES_RESTART_CLUSTER are required here \
             (scripts/test.sh makes the cluster)"
        );
        eprintln!("SKIPPED: no restartable PostgreSQL cluster (SVC_TEST_POSTGRES_RESTART_DSN); the restart test did not run");
        return None;
    }
    Some((dsn, cluster.split_whitespace().map(str::to_owned).collect()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_recover_when_postgres_restarts() {
    let Some((dsn, cluster)) = restartable_postgres() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    events_survive(&schema.dsn(), async {
        let status = tokio::process::Command::new("pg_ctlcluster")
            .args(&cluster)
            .args(["restart", "-m", "fast"])
            .status()
            .await
            .expect("running pg_ctlcluster");
        assert!(
            status.success(),
            "pg_ctlcluster {cluster:?} restart: {status}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_leases_expire_and_its_sandboxes_are_settled() {
    let Some(dsn) = postgres_dsn() else {
        return;
    };
    let schema = Schema::create(&dsn).await;
    let dsn = schema.dsn();
    // Both replicas share one directory, so one's mock runtimes are the other's too (like two
    // replicas on one Docker engine).
    let dir = tempfile::tempdir().unwrap();
    let start = |worker: &str| {
        let port = crate::cli::free_port();
        let child = crate::cli::serve_in(dir.path(), port)
            .env("SVC_DATABASE__DRIVER", "postgres")
            .env("SVC_DATABASE__DSN", &dsn)
            .env("SVC_WORKER__ID", worker)
            // Leases long enough that A's outlives the requests made right after its kill.
            .env("SVC_WORKER__LEASE_TTL", "10s")
            .env("SVC_WORKER__HEARTBEAT_INTERVAL", "1s")
            .env("SVC_WORKER__STALE_AFTER", "10s")
            .spawn()
            .unwrap();
        crate::cli::wait_until_serving(port);
        (child, format!("http://127.0.0.1:{port}/api/v1"))
    };
    let (mut a, a_url) = start("a");
    let (b, b_url) = start("b");
    let (c, c_url) = start("c");
    let client = reqwest::Client::new();
    let spawn_on_a = || async {
        let body: serde_json::Value = client
            .post(format!("{a_url}/sandboxes"))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body["id"].as_str().unwrap().to_owned()
    };
    let id = spawn_on_a().await;
    assert!(
        dir.path().join("mock").join(&id).exists(),
        "A made the runtime"
    );
    // Two more of A's sandboxes: one whose runtime outlives A, one whose runtime is lost with it.
    let (kept, lost) = (spawn_on_a().await, spawn_on_a().await);
    a.kill().unwrap();
    a.wait().unwrap();
    std::fs::remove_dir_all(dir.path().join("mock").join(&lost)).unwrap();
    std::fs::remove_file(dir.path().join("mock").join(format!("{lost}.json"))).unwrap();
    // B keeps serving; while A's lease lasts, A's sandbox is not B's to destroy.
    let got = client
        .get(format!("{b_url}/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    let early = client
        .delete(format!("{b_url}/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    let status = early.status().as_u16();
    if status == 409 {
        let body: serde_json::Value = early.json().await.unwrap();
        assert_eq!(body["code"], "lease_conflict", "{body}");
    } else {
        panic!("destroy during A's lease answered {status}");
    }
    // B's event stream, to count how many times the sandbox ends.
    let events = client
        .get(format!("{b_url}/events?types=sandbox.destroyed"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    // After the lease expired, B and C race to take it over: the sandbox goes once, runtime
    // included.
    crate::harness::wait_for("A's lease to expire", Duration::from_secs(60), || {
        let client = client.clone();
        let urls = [
            format!("{b_url}/sandboxes/{id}"),
            format!("{c_url}/sandboxes/{id}"),
        ];
        async move {
            let (b, c) = tokio::join!(
                client.delete(&urls[0]).send(),
                client.delete(&urls[1]).send()
            );
            b.unwrap().status() == 200 || c.unwrap().status() == 200
        }
    })
    .await;
    let mut stream = events.bytes_stream();
    let mut seen = String::new();
    let ended_once = format!("\"sandbox_id\":\"{id}\"");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !seen.contains(&ended_once) {
        let chunk = tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut stream))
            .await
            .unwrap_or_else(|_| panic!("no sandbox.destroyed for {id} in time: {seen}"))
            .expect("B's event stream ended")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // A little longer, to catch a second one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(Ok(chunk))) =
        tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut stream)).await
    {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(
        seen.matches(&ended_once).count(),
        1,
        "the sandbox must end exactly once: {seen}"
    );
    let ended: serde_json::Value = client
        .get(format!("{b_url}/sandboxes/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ended["state"], "destroyed", "{ended}");
    assert!(
        !dir.path().join("mock").join(&id).exists(),
        "the runtime was removed"
    );
    // A's other sandboxes are settled by whichever replica gets their lease: the running one
    // is taken over (and serves through its new worker), the lost one ends as vanished.
    let record = |id: String| {
        let (client, url) = (client.clone(), format!("{b_url}/sandboxes/{id}"));
        async move {
            client
                .get(url)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    crate::harness::wait_for(
        "A's sandboxes to be settled",
        Duration::from_secs(60),
        || {
            let (kept, lost) = (record(kept.clone()), record(lost.clone()));
            async move {
                let (kept, lost) = tokio::join!(kept, lost);
                kept["worker_id"] != "a" && lost["state"] == "destroyed"
            }
        },
    )
    .await;
    let taken = record(kept.clone()).await;
    assert_eq!(taken["state"], "running", "{taken}");
    let owner = taken["worker_id"].as_str().unwrap().to_owned();
    assert!(owner == "b" || owner == "c", "{taken}");
    let vanished = record(lost.clone()).await;
    assert_eq!(vanished["state_reason"], "runtime_vanished", "{vanished}");
    let owner_url = if owner == "b" { &b_url } else { &c_url };
    let exec: serde_json::Value = client
        .post(format!("{owner_url}/sandboxes/{kept}/exec"))
        .json(&json!({"command": "echo still here"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(exec["stdout"], "still here\n", "{exec}");
    let other_url = if owner == "b" { &c_url } else { &b_url };
    let fenced = client
        .delete(format!("{other_url}/sandboxes/{kept}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        fenced.status(),
        409,
        "the new owner renews the lease it took over"
    );
    // And A shows as stale.
    crate::harness::wait_for("A to go stale", Duration::from_secs(60), || {
        let (client, url) = (client.clone(), format!("{b_url}/workers/a"));
        async move {
            let worker: serde_json::Value =
                client.get(url).send().await.unwrap().json().await.unwrap();
            worker["stale"] == true
        }
    })
    .await;
    crate::cli::stop(c);
    let output = crate::cli::stop(b);
    let log = String::from_utf8_lossy(&output.stderr);
    let password = dsn.split(':').nth(2).unwrap().split('@').next().unwrap();
    assert!(
        !log.contains(&format!(":{password}@")),
        "the DSN reached the log"
    );
}
