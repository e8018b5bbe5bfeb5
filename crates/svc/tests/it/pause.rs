//! Pause and resume (decisions §7): a paused sandbox's processes stop, exec and files answer
//! 409, it does not expire and its expiry moves on resume; shared by the mock tests here and
//! the docker tests.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use svc_core::GoDuration;

use crate::harness::{wait_for, TestServer};

/// Bytes a background exec has written to stdout so far.
async fn stdout_bytes(server: &TestServer, id: &str, exec_id: &str) -> u64 {
    let record = server
        .get(&format!("/sandboxes/{id}/execs/{exec_id}"))
        .await;
    assert_eq!(record.status, 200, "{}", record.body);
    record.body["stdout_bytes"].as_u64().unwrap()
}

/// Waits until the counter's output passes `bytes`.
async fn grows_past(server: &TestServer, id: &str, exec_id: &str, bytes: u64) {
    wait_for("the counter to print", Duration::from_secs(20), || async {
        stdout_bytes(server, id, exec_id).await > bytes
    })
    .await;
}

/// Pause stops a running counter (its output stops growing) and an exec under way, resume
/// continues both; exec and files are 409 while paused; both calls are idempotent, listed by
/// state and announced by events.
pub(crate) async fn assert_pause_and_resume(server: &TestServer, id: &str) {
    let mut events = server
        .events(
            &format!("?types=sandbox.paused,sandbox.resumed&sandbox_id={id}"),
            None,
        )
        .await;
    let counter = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            // Each line is the machine's uptime when the counter ran: a pause shows as a gap
            // in its own timeline, whenever the server happens to read the lines.
            json!({"command": "while true; do read up rest < /proc/uptime; echo $up; sleep 0.05; done",
                   "background": true}),
        )
        .await;
    assert_eq!(counter.status, 202, "{}", counter.body);
    let counter = counter.body["exec_id"].as_str().unwrap().to_owned();
    grows_past(server, id, &counter, 0).await;
    // A streamed exec whose second line comes after the pause.
    let streamed = server
        .client
        .post(server.url(&format!("/sandboxes/{id}/exec")))
        .json(&json!({"command": "echo before; sleep 1; echo after", "stream": true}))
        .send()
        .await
        .unwrap();
    let mut body = streamed.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("before"),
        "{first:?}"
    );

    let paused = server
        .post(&format!("/sandboxes/{id}/pause"), json!({}))
        .await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(paused.body["state"], "paused");
    assert!(paused.body["paused_at"].is_string(), "{}", paused.body);
    let frozen_at = stdout_bytes(server, id, &counter).await;
    // Paused for at least this long (a lower bound; a busy machine only makes it longer).
    tokio::time::sleep(PAUSED_FOR).await;
    let again = server
        .post(&format!("/sandboxes/{id}/pause"), json!({}))
        .await;
    assert_eq!(
        (again.status.as_u16(), &again.body["state"]),
        (200, &json!("paused"))
    );
    let refused = server
        .post(&format!("/sandboxes/{id}/exec"), json!({"command": "true"}))
        .await;
    let message = refused.assert_error(409, "conflict");
    assert!(message.contains("paused"), "{message}");
    server
        .get(&format!("/sandboxes/{id}/files/list?path=/"))
        .await
        .assert_error(409, "conflict");
    let paused_ids = server.listed_ids("?state=paused").await;
    assert!(paused_ids.contains(&id.to_owned()), "{paused_ids:?}");
    assert!(server.listed_ids("").await.contains(&id.to_owned()));

    let resumed = server
        .post(&format!("/sandboxes/{id}/resume"), json!({}))
        .await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    assert_eq!(resumed.body["state"], "running");
    assert!(resumed.body.get("paused_at").is_none(), "{}", resumed.body);
    grows_past(server, id, &counter, frozen_at).await;
    let rest: Vec<u8> = body.map(|chunk| chunk.unwrap().to_vec()).concat().await;
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.contains("after") && rest.contains("\"exit_code\":0"),
        "{rest}"
    );
    let again = server
        .post(&format!("/sandboxes/{id}/resume"), json!({}))
        .await;
    assert_eq!(
        (again.status.as_u16(), &again.body["state"]),
        (200, &json!("running"))
    );
    let types: Vec<Value> = [
        events.next(Duration::from_secs(10)).await,
        events.next(Duration::from_secs(10)).await,
    ]
    .into_iter()
    .map(|m| m.expect("an event").data["type"].clone())
    .collect();
    assert_eq!(types, [json!("sandbox.paused"), json!("sandbox.resumed")]);
    assert!(
        events.next(Duration::from_millis(300)).await.is_none(),
        "idempotent calls publish nothing"
    );
    let killed = server
        .delete(&format!("/sandboxes/{id}/execs/{counter}"))
        .await;
    assert_eq!(killed.status, 200, "{}", killed.body);
    // The counter stood still while paused: its timeline has a gap as long as the pause, which
    // a counter that went on printing (every 50 ms) would not have.
    let (data, _, exit) = crate::exec::read_output(server, id, &counter, [0, 0], usize::MAX).await;
    assert!(
        exit.is_some(),
        "the killed counter's output ends with its exit"
    );
    let times: Vec<f64> = String::from_utf8_lossy(&data[0])
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect();
    let longest = times
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .fold(0.0_f64, f64::max);
    assert!(
        longest >= PAUSED_FOR.as_secs_f64() - 0.1,
        "a paused sandbox's counter went on printing: its longest gap was {longest:.2} s \
         ({} lines)",
        times.len()
    );
}

/// How long the sandbox stays paused in [`assert_pause_and_resume`], at least.
const PAUSED_FOR: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_processes_and_resume_continues_them() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({})).await;
    assert_pause_and_resume(&server, sandbox["id"].as_str().unwrap()).await;
    server.shutdown().await;
}

/// A paused sandbox does not expire; resume moves `expires_at` by the time spent paused, which
/// does not count toward the maximum lifetime either; a paused sandbox can be destroyed.
#[tokio::test]
async fn expiry_waits_while_paused() {
    let server = TestServer::start_with(|c| {
        c.defaults.reap_interval = GoDuration::from_millis(50);
        c.defaults.max_ttl = GoDuration::from_secs(3600);
    })
    .await;
    let sandbox = server.spawn(json!({"ttl": "10m"})).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let expires = sandbox["expires_at"].as_str().unwrap().to_owned();
    let path = format!("/sandboxes/{id}");
    assert_eq!(
        server
            .post(&format!("{path}/pause"), json!({}))
            .await
            .status,
        200
    );
    server.clock.advance(Duration::from_secs(3000));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        server.get(&path).await.body["state"],
        "paused",
        "the reaper took a paused sandbox"
    );
    assert_eq!(server.delete("/sandboxes").await.body["pruned"], 0);
    let resumed = server.post(&format!("{path}/resume"), json!({})).await;
    let moved = |at: &str| chrono::DateTime::parse_from_rfc3339(at).unwrap();
    assert_eq!(
        moved(resumed.body["expires_at"].as_str().unwrap()) - moved(&expires),
        chrono::Duration::seconds(3000)
    );
    // 3000 s paused do not count: 50 min from now is within the hour from creation.
    let extended = server
        .post(&format!("{path}/extend"), json!({"ttl": "50m"}))
        .await;
    assert_eq!(extended.status, 200, "{}", extended.body);
    server
        .post(&format!("{path}/extend"), json!({"ttl": "61m"}))
        .await
        .assert_error(429, "resource_limit");
    assert_eq!(
        server
            .post(&format!("{path}/pause"), json!({}))
            .await
            .status,
        200
    );
    assert_eq!(server.delete(&path).await.status, 200);
    let gone = server.post(&format!("{path}/resume"), json!({})).await;
    gone.assert_error(409, "conflict");
    server.shutdown().await;
}
