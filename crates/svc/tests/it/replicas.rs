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
                .next(Duration::from_secs(10))
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
    for server in replicas {
        server.shutdown().await;
    }
    drop(schema);
}
