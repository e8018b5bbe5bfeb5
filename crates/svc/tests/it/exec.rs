//! Exec over HTTP: buffered and NDJSON, deadlines, limits, events, disconnects, logs.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use svc_core::GoDuration;

use crate::harness::{assert_schema, wait_for, TestServer};

async fn sandbox(server: &TestServer) -> String {
    server.spawn(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Reads an NDJSON response line by line.
struct Lines {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: Vec<u8>,
}

impl Lines {
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).expect("each line is JSON"));
            }
            match tokio::time::timeout(Duration::from_secs(20), self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buffer.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    async fn all(mut self) -> Vec<Value> {
        let mut lines = Vec::new();
        while let Some(line) = self.next().await {
            lines.push(line);
        }
        lines
    }
}

/// `ex-` and 16 lowercase hex characters (decisions §8).
pub(crate) fn is_exec_id(text: &str) -> bool {
    text.strip_prefix("ex-").is_some_and(|hex| {
        hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

async fn stream(server: &TestServer, id: &str, body: Value) -> Lines {
    let response = server
        .client
        .post(server.url(&format!("/sandboxes/{id}/exec")))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let exec_id = response.headers()["x-exec-id"].to_str().unwrap();
    assert!(is_exec_id(exec_id), "{exec_id}");
    Lines {
        stream: Box::pin(response.bytes_stream()),
        buffer: Vec::new(),
    }
}

fn joined(lines: &[Value], stream: &str) -> String {
    lines
        .iter()
        .filter(|l| l["stream"] == stream)
        .map(|l| l["data"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn buffered_exec_shell_and_argv() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let reply = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo out; echo err >&2; exit 3"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_schema("ExecResult", &reply.body);
    assert_eq!(reply.body["exit_code"], 3);
    assert_eq!(reply.body["stdout"], "out\n");
    assert_eq!(reply.body["stderr"], "err\n");
    assert_eq!(reply.body["timed_out"], false);
    assert!(GoDuration::parse(reply.body["duration"].as_str().unwrap()).is_ok());

    let argv = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo", "args": ["$HOME", "a  b"]}),
        )
        .await;
    assert_eq!(
        argv.body["stdout"], "$HOME a  b\n",
        "no shell expansion in argv mode"
    );

    server
        .post(
            &format!("/sandboxes/{id}/files"),
            json!({"path": "/w/d/f.txt", "content": "x"}),
        )
        .await;
    let env = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo $GREETING; ls", "env": {"GREETING": "hi there"}, "workdir": "/w/d"}),
        )
        .await;
    assert_eq!(env.body["stdout"], "hi there\nf.txt\n");

    let invalid = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "printf '\\377ok'"}),
        )
        .await;
    assert_eq!(
        invalid.body["stdout"], "\u{fffd}ok",
        "invalid UTF-8 becomes U+FFFD"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn spawn_env_reaches_every_exec() {
    let server = TestServer::start().await;
    let id = server
        .spawn(json!({"env": {"FROM_SPAWN": "yes", "OVERRIDE": "spawn"}}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let reply = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo $FROM_SPAWN $OVERRIDE", "env": {"OVERRIDE": "exec"}}),
        )
        .await;
    assert_eq!(reply.body["stdout"], "yes exec\n");
    server.shutdown().await;
}

#[tokio::test]
async fn buffered_deadline_keeps_what_was_captured() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut events = server
        .events("?types=exec.timeout,exec.completed", None)
        .await;
    let started = Instant::now();
    let reply = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "echo partial; sleep 30", "timeout": "3s"}),
        )
        .await;
    // The deadline ended it, not the 30 s sleep.
    assert!(started.elapsed() < Duration::from_secs(25));
    assert_eq!(reply.body["exit_code"], 124);
    assert_eq!(reply.body["timed_out"], true);
    assert_eq!(reply.body["stdout"], "partial\n");
    let event = events.next(Duration::from_secs(60)).await.unwrap();
    assert_eq!(event.data["type"], "exec.timeout");
    assert_eq!(event.data["data"]["operation"], "exec");
    assert_eq!(event.data["data"]["provider"], "mock");
    assert!(event.data["data"]["error"]
        .as_str()
        .unwrap()
        .contains("timed out"));
    server.shutdown().await;
}

#[tokio::test]
async fn default_and_maximum_exec_timeouts() {
    let server = TestServer::start_with(|c| {
        c.defaults.default_exec_timeout = GoDuration::from_millis(300);
        c.defaults.max_exec_timeout = GoDuration::from_secs(60);
    })
    .await;
    let id = sandbox(&server).await;
    let reply = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "sleep 30"}),
        )
        .await;
    assert_eq!(
        reply.body["timed_out"], true,
        "the default deadline applies"
    );
    let mut events = server.events("?types=exec.started", None).await;
    for stream in [false, true] {
        let message = server
            .post(
                &format!("/sandboxes/{id}/exec"),
                json!({"command": "true", "timeout": "2m", "stream": stream}),
            )
            .await
            .assert_error(429, "resource_limit");
        assert!(message.contains("max_exec_timeout"), "{message}");
    }
    assert!(
        events.next(Duration::from_millis(300)).await.is_none(),
        "nothing ran"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_flushes_chunks_as_they_arrive() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    // The command goes on only once the test has read its first chunk: so that chunk came
    // before the command ended, however slow the machine.
    let mut lines = stream(
        &server,
        &id,
        json!({
            "command": "echo first; while [ ! -e go ]; do sleep 0.05; done; sleep 1; echo second >&2; exit 7",
            "stream": true
        }),
    )
    .await;
    let first = lines.next().await.unwrap();
    assert_eq!(first, json!({"stream": "stdout", "data": "first\n"}));
    std::fs::write(server.mock_root().join(&id).join("go"), b"").unwrap();
    let rest = lines.all().await;
    assert_eq!(joined(&rest, "stderr"), "second\n");
    let exit = rest.last().unwrap();
    assert_eq!(exit["stream"], "exit");
    assert_eq!(exit["exit_code"], 7);
    assert!(
        GoDuration::parse(exit["duration"].as_str().unwrap())
            .unwrap()
            .as_std()
            >= Duration::from_secs(1)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_large_output_and_deadline() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let lines = stream(
        &server,
        &id,
        json!({"command": "head -c 20000000 /dev/zero | tr '\\0' a", "stream": true}),
    )
    .await;
    let lines = lines.all().await;
    assert_eq!(joined(&lines, "stdout").len(), 20_000_000);
    assert_eq!(lines.last().unwrap()["exit_code"], 0);

    let mut events = server.events("?types=exec.timeout", None).await;
    let lines = stream(
        &server,
        &id,
        json!({"command": "echo before; sleep 30", "timeout": "3s", "stream": true}),
    )
    .await;
    let lines = lines.all().await;
    assert_eq!(joined(&lines, "stdout"), "before\n");
    assert!(joined(&lines, "stderr").contains("timed out"), "{lines:?}");
    let exit = lines.last().unwrap();
    assert_eq!(exit["stream"], "exit");
    assert_eq!(exit["exit_code"], 124);
    let event = events.next(Duration::from_secs(60)).await.unwrap();
    assert_eq!(event.data["data"]["operation"], "exec_stream");
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_kills_the_command() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut events = server
        .events("?types=exec.timeout,exec.completed", None)
        .await;
    let mut lines = stream(
        &server,
        &id,
        json!({"command": "echo $$ > pid; echo started; sleep 30", "stream": true}),
    )
    .await;
    assert_eq!(lines.next().await.unwrap()["data"], "started\n");
    drop(lines);
    let pid = std::fs::read_to_string(server.mock_root().join(&id).join("pid")).unwrap();
    let pid = pid.trim().to_owned();
    wait_for(
        "the command to be killed",
        Duration::from_secs(60),
        || async { !std::path::Path::new(&format!("/proc/{pid}")).exists() },
    )
    .await;
    let event = events.next(Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        event.data["type"], "exec.completed",
        "no exec.timeout for a caller that left"
    );
    assert_eq!(event.data["data"]["cancelled"], true);
    server.shutdown().await;
}

#[tokio::test]
async fn exec_events_and_failures() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut events = server
        .events("?types=exec.started,exec.completed,exec.failed", None)
        .await;
    let result = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "exit 2"}),
        )
        .await
        .body;
    let exec_id = result["exec_id"].as_str().unwrap().to_owned();
    assert!(is_exec_id(&exec_id), "{result}");
    let started = events.next(Duration::from_secs(60)).await.unwrap();
    assert_eq!(started.data["type"], "exec.started");
    assert_eq!(started.data["sandbox_id"], id.as_str());
    assert_eq!(
        started.data["data"],
        json!({"exec_id": exec_id, "operation": "exec", "provider": "mock"})
    );
    let completed = events.next(Duration::from_secs(60)).await.unwrap();
    assert_eq!(completed.data["type"], "exec.completed");
    assert_eq!(completed.data["data"]["exec_id"], exec_id.as_str());
    assert_eq!(completed.data["data"]["exit_code"], 2);
    assert!(completed.data["data"]["duration"].is_string());

    let message = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "/no/such/program", "args": []}),
        )
        .await
        .assert_error(400, "bad_request");
    assert!(message.contains("/no/such/program"), "{message}");
    events.next(Duration::from_secs(60)).await.unwrap();
    let failed = events.next(Duration::from_secs(60)).await.unwrap();
    assert_eq!(failed.data["type"], "exec.failed");
    assert!(failed.data["data"]["error"].is_string());
    server.shutdown().await;
}

#[tokio::test]
async fn exec_bad_input() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let path = format!("/sandboxes/{id}/exec");
    let message = server
        .post(&path, json!({"command": ""}))
        .await
        .assert_error(400, "bad_request");
    assert!(message.contains("command"), "{message}");
    for body in [
        json!({}),
        json!({"command": "true", "timeout": "-1s"}),
        json!({"command": "true", "timeout": "soon"}),
        json!({"command": "true", "args": "x"}),
        json!({"command": "true", "workdir": "relative"}),
        json!({"command": "true", "workdir": "/missing"}),
        json!({"command": "echo a\u{0}b"}),
        json!({"command": "true", "env": {"A=B": "x"}}),
        json!({"command": "true", "env": {"": "x"}}),
    ] {
        server
            .post(&path, body)
            .await
            .assert_error(400, "bad_request");
    }
    server
        .post(
            "/sandboxes/sb-0123456789abcdef/exec",
            json!({"command": "true"}),
        )
        .await
        .assert_error(404, "not_found");
    server.delete(&format!("/sandboxes/{id}")).await;
    let message = server
        .post(&path, json!({"command": "true"}))
        .await
        .assert_error(409, "conflict");
    assert!(message.contains("destroyed"), "{message}");
    server
        .get(&format!("/sandboxes/{id}/logs"))
        .await
        .assert_error(409, "conflict");
    server.shutdown().await;
}

#[tokio::test]
async fn logs_show_recent_lines_in_order() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    for i in 0..5 {
        server
            .post(
                &format!("/sandboxes/{id}/exec"),
                json!({"command": format!("echo {i}")}),
            )
            .await;
    }
    let logs = server.get(&format!("/sandboxes/{id}/logs")).await;
    assert_eq!(logs.status, 200);
    let lines: Vec<&str> = logs
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    assert!(
        lines[0].contains("echo 0") && lines[4].contains("echo 4"),
        "{lines:?}"
    );
    let last_two = server.get(&format!("/sandboxes/{id}/logs?lines=2")).await;
    let last_two: Vec<&str> = last_two
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(last_two, lines[3..]);
    server
        .get(&format!("/sandboxes/{id}/logs?lines=-1"))
        .await
        .assert_error(400, "bad_request");
    server
        .get(&format!("/sandboxes/{id}/logs?lines=abc"))
        .await
        .assert_error(400, "bad_request");
    server.shutdown().await;
}

/// Every exec is recorded (decisions §8, "Exec jobs"): listed newest first with its status,
/// exit code and bytes per stream; a running one can be signalled and killed, an ended one
/// cannot (409), an unknown one is 404.
#[tokio::test]
async fn execs_are_recorded_and_running_ones_can_be_signalled_and_killed() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    assert_exec_records(&server, &id).await;
    server.shutdown().await;
}

pub(crate) async fn assert_exec_records(server: &TestServer, id: &str) {
    let execs = format!("/sandboxes/{id}/execs");
    assert_eq!(server.get(&execs).await.body, json!([]));

    let done = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "printf abc; printf de >&2; exit 3"}),
        )
        .await
        .body;
    let done_id = done["exec_id"].as_str().unwrap().to_owned();
    let record = server.get(&format!("{execs}/{done_id}")).await;
    assert_eq!(record.status, 200, "{}", record.body);
    assert_schema("ExecRecord", &record.body);
    let record = record.body;
    assert_eq!(record["sandbox_id"], id);
    assert_eq!(record["command"], "printf abc; printf de >&2; exit 3");
    assert_eq!(record["args"], Value::Null);
    assert_eq!(record["background"], false);
    assert_eq!(record["status"], "exited");
    assert_eq!(record["exit_code"], 3);
    assert_eq!(
        (
            record["stdout_bytes"].clone(),
            record["stderr_bytes"].clone()
        ),
        (json!(3), json!(2))
    );
    assert!(record["started_at"].is_string() && record["ended_at"].is_string());
    for (method, path, body) in [
        (reqwest::Method::DELETE, format!("{execs}/{done_id}"), None),
        (
            reqwest::Method::POST,
            format!("{execs}/{done_id}/signal"),
            Some(json!({"signal": "SIGTERM"})),
        ),
        (
            reqwest::Method::POST,
            format!("{execs}/{done_id}/stdin"),
            Some(json!({"data": "x"})),
        ),
    ] {
        let message = server
            .call(method, &path, body)
            .await
            .assert_error(409, "conflict");
        assert!(
            message.contains(&done_id) && message.contains("exited"),
            "{message}"
        );
    }
    server
        .get(&format!("{execs}/ex-0000000000000000"))
        .await
        .assert_error(404, "not_found");
    server
        .get(&format!("{execs}/not-an-id"))
        .await
        .assert_error(404, "not_found");

    // A command that could not start, and one its deadline ended.
    let missing = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "/no/such/program", "args": ["a"]}),
        )
        .await;
    // Docker starts the exec and reports the runtime's 126/127 as the command's own exit.
    let missing_status = if missing.status == 400 {
        "failed"
    } else {
        let code = missing.body["exit_code"].as_i64();
        assert!(matches!(code, Some(126 | 127)), "{}", missing.body);
        "exited"
    };
    let slow = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "sleep 5", "timeout": "200ms"}),
        )
        .await
        .body;

    // A running command: signalled (it ends by itself, 128+15), then one killed.
    let signalled = stream(server, id, json!({"command": "sleep 30", "stream": true})).await;
    let listed = server.get(&execs).await.body;
    let running = &listed[0];
    assert_eq!(running["status"], "running", "{listed}");
    assert_eq!(running["exit_code"], Value::Null);
    assert_eq!(running["ended_at"], Value::Null);
    let running_id = running["exec_id"].as_str().unwrap().to_owned();
    let sent = server
        .post(
            &format!("{execs}/{running_id}/signal"),
            json!({"signal": "TERM"}),
        )
        .await;
    assert_eq!(
        (sent.status.as_u16(), sent.body["status"].clone()),
        (200, json!("signalled"))
    );
    let lines = signalled.all().await;
    assert_eq!(lines.last().unwrap()["exit_code"], 143, "{lines:?}");
    let ended = server.get(&format!("{execs}/{running_id}")).await.body;
    assert_eq!(
        (ended["status"].clone(), ended["exit_code"].clone()),
        (json!("exited"), json!(143))
    );

    let killed = stream(server, id, json!({"command": "sleep 30", "stream": true})).await;
    let kill_id = server.get(&execs).await.body[0]["exec_id"]
        .as_str()
        .unwrap()
        .to_owned();
    server
        .post(&format!("{execs}/{kill_id}/stdin"), json!({"data": "x"}))
        .await
        .assert_error(409, "conflict");
    server
        .post(
            &format!("{execs}/{kill_id}/signal"),
            json!({"signal": "SIGNOPE"}),
        )
        .await
        .assert_error(400, "bad_request");
    let deleted = server.delete(&format!("{execs}/{kill_id}")).await;
    assert_eq!(deleted.body, json!({"status": "killed"}));
    killed.all().await;
    wait_for(
        "the killed exec to be recorded",
        Duration::from_secs(60),
        || async { server.get(&format!("{execs}/{kill_id}")).await.body["status"] == "killed" },
    )
    .await;

    let statuses: Vec<Value> = server
        .get(&execs)
        .await
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        [
            json!("killed"),
            json!("exited"),
            json!("timed_out"),
            json!(missing_status),
            json!("exited")
        ],
        "newest first"
    );
    let slow_record = server
        .get(&format!("{execs}/{}", slow["exec_id"].as_str().unwrap()))
        .await
        .body;
    assert_eq!(slow_record["exit_code"], 124);
}

/// Reads one exec's output from `offsets` until `limit` bytes of data arrived (then lets go, as
/// a client whose connection drops) or the exit line; returns the data per stream, the new
/// offsets and whether the exit was seen.
pub(crate) async fn read_output(
    server: &TestServer,
    id: &str,
    exec_id: &str,
    offsets: [u64; 2],
    limit: usize,
) -> ([Vec<u8>; 2], [u64; 2], Option<Value>) {
    let response = server
        .client
        .get(server.url(&format!(
            "/sandboxes/{id}/execs/{exec_id}/output?stdout_offset={}&stderr_offset={}",
            offsets[0], offsets[1]
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut lines = Lines {
        stream: Box::pin(response.bytes_stream()),
        buffer: Vec::new(),
    };
    let mut data = [Vec::new(), Vec::new()];
    let mut offsets = offsets;
    let mut received = 0;
    while let Some(line) = lines.next().await {
        let index = match line["stream"].as_str().unwrap() {
            "stdout" => 0,
            "stderr" => 1,
            _ => return (data, offsets, Some(line)),
        };
        assert!(line.get("lost").is_none(), "nothing is lost here: {line}");
        let text = line["data"].as_str().unwrap();
        assert_eq!(
            line["offset"], offsets[index],
            "no byte lost or repeated: {line}"
        );
        data[index].extend_from_slice(text.as_bytes());
        offsets[index] += text.len() as u64;
        received += text.len();
        if received >= limit {
            break;
        }
    }
    (data, offsets, None)
}

/// A client that keeps losing its connection reassembles a running command's exact output by
/// reconnecting with the offsets it last saw (decisions §8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_replays_by_offset_across_reconnects() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let script = "i=0; while [ $i -lt 400 ]; do echo \"out $i héllo\"; echo \"err $i\" >&2; i=$((i+1)); [ $((i % 50)) = 0 ] && sleep 0.05; done";
    let expected = |stream: &str| -> String {
        (0..400)
            .map(|i| match stream {
                "out" => format!("out {i} héllo\n"),
                _ => format!("err {i}\n"),
            })
            .collect()
    };
    for limit in [1usize, 100, 4096] {
        // The command runs as a streamed exec whose own client stays connected.
        let running = stream(&server, &id, json!({"command": script, "stream": true})).await;
        let own = tokio::spawn(running.all());
        let exec_id = server.get(&format!("/sandboxes/{id}/execs")).await.body[0]["exec_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut offsets = [0, 0];
        let mut data = [Vec::new(), Vec::new()];
        let mut reconnects = 0;
        let exit = loop {
            let (got, next, exit) = read_output(&server, &id, &exec_id, offsets, limit).await;
            for (all, part) in data.iter_mut().zip(got) {
                all.extend_from_slice(&part);
            }
            offsets = next;
            if let Some(exit) = exit {
                break exit;
            }
            reconnects += 1;
        };
        assert_eq!(exit["exit_code"], 0, "{exit}");
        assert_eq!(
            String::from_utf8(data[0].clone()).unwrap(),
            expected("out"),
            "limit {limit}"
        );
        assert_eq!(
            String::from_utf8(data[1].clone()).unwrap(),
            expected("err"),
            "limit {limit}"
        );
        assert!(reconnects > 0, "limit {limit}: the client did reconnect");
        own.await.unwrap();
    }
    server.shutdown().await;
}

/// Bytes the ring no longer holds are reported as `lost`, then the data goes on from the
/// oldest byte kept; `follow=false` on a running exec answers what is there and ends.
#[tokio::test]
async fn output_beyond_the_ring_is_reported_lost() {
    let server = TestServer::start_with(|c| c.exec.output_buffer_bytes = 1000).await;
    let id = sandbox(&server).await;
    assert_lost_output(&server, &id).await;
    server.shutdown().await;
}

pub(crate) async fn assert_lost_output(server: &TestServer, id: &str) {
    let result = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "i=0; while [ $i -lt 1000 ]; do echo \"line $i\"; i=$((i+1)); done"}),
        )
        .await
        .body;
    let exec_id = result["exec_id"].as_str().unwrap();
    let total = result["stdout"].as_str().unwrap().len() as u64;
    let response = server
        .client
        .get(server.url(&format!(
            "/sandboxes/{id}/execs/{exec_id}/output?follow=false"
        )))
        .send()
        .await
        .unwrap();
    let lines = Lines {
        stream: Box::pin(response.bytes_stream()),
        buffer: Vec::new(),
    }
    .all()
    .await;
    assert_eq!(lines[0]["stream"], "stdout");
    let lost = lines[0]["lost"].as_u64().unwrap();
    assert!(lost > 0 && lost <= total - 1000, "lost {lost} of {total}");
    assert_eq!(
        lines[1]["offset"], lost,
        "data goes on from the oldest byte kept"
    );
    let kept: usize = lines
        .iter()
        .filter(|l| l["stream"] == "stdout" && l["data"].is_string())
        .map(|l| l["data"].as_str().unwrap().len())
        .sum();
    assert_eq!(lost + kept as u64, total);
    assert!(result["stdout"]
        .as_str()
        .unwrap()
        .ends_with(lines[lines.len() - 2]["data"].as_str().unwrap()));
    assert_eq!(lines.last().unwrap()["stream"], "exit");

    let running = stream(
        server,
        id,
        json!({"command": "echo started; sleep 30", "stream": true}),
    )
    .await;
    let listed = server.get(&format!("/sandboxes/{id}/execs")).await.body;
    let running_id = listed[0]["exec_id"].as_str().unwrap().to_owned();
    wait_for("the first line", Duration::from_secs(60), || async {
        server
            .get(&format!("/sandboxes/{id}/execs/{running_id}"))
            .await
            .body["stdout_bytes"]
            == 8
    })
    .await;
    let now = server
        .client
        .get(server.url(&format!(
            "/sandboxes/{id}/execs/{running_id}/output?follow=false"
        )))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        now,
        "{\"stream\":\"stdout\",\"data\":\"started\\n\",\"offset\":0}\n"
    );
    drop(running);
    server
        .get(&format!("/sandboxes/{id}/execs/ex-0000000000000000/output"))
        .await
        .assert_error(404, "not_found");
}

/// The output of an exec, whole, once it has ended (`follow=false` after waiting).
async fn ended_output(server: &TestServer, id: &str, exec_id: &str) -> String {
    wait_for("the exec to end", Duration::from_secs(60), || async {
        server
            .get(&format!("/sandboxes/{id}/execs/{exec_id}"))
            .await
            .body["status"]
            != "running"
    })
    .await;
    let (data, _, exit) = read_output(server, id, exec_id, [0, 0], usize::MAX).await;
    assert!(exit.is_some(), "an ended exec's replay ends with its exit");
    String::from_utf8(data[0].clone()).unwrap()
}

/// Starts a background exec; its ID.
async fn background(server: &TestServer, id: &str, body: Value) -> String {
    let reply = server.post(&format!("/sandboxes/{id}/exec"), body).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    reply.body["exec_id"].as_str().unwrap().to_owned()
}

/// `background: true` answers 202 at once and the command runs on, with stdin, signals and
/// kill through the exec routes; a streamed exec with `on_disconnect: continue` outlives its
/// client (decisions §8).
#[tokio::test]
async fn background_execs_and_streams_that_continue_outlive_their_clients() {
    let server = TestServer::start_with(|c| {
        c.defaults.default_exec_timeout = GoDuration::from_millis(300);
    })
    .await;
    let id = sandbox(&server).await;
    assert_background_execs(&server, &id).await;
    server.shutdown().await;
}

pub(crate) async fn assert_background_execs(server: &TestServer, id: &str) {
    let execs = format!("/sandboxes/{id}/execs");
    // It cannot end before the test writes its stdin, so the 202 "running" answer came at
    // once; then it runs longer than the default deadline: background execs have none.
    let reply = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "read go; sleep 0.6; echo done", "background": true}),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.body["status"], "running");
    let exec_id = reply.body["exec_id"].as_str().unwrap().to_owned();
    assert!(is_exec_id(&exec_id));
    let record = server.get(&format!("{execs}/{exec_id}")).await.body;
    assert_eq!(
        (record["background"].clone(), record["status"].clone()),
        (json!(true), json!("running"))
    );
    let sent = server
        .post(
            &format!("{execs}/{exec_id}/stdin"),
            json!({"data": "\n", "eof": true}),
        )
        .await;
    assert_eq!(sent.body, json!({"status": "sent"}));
    assert_eq!(ended_output(server, id, &exec_id).await, "done\n");
    let record = server.get(&format!("{execs}/{exec_id}")).await.body;
    assert_eq!(
        (record["status"].clone(), record["exit_code"].clone()),
        (json!("exited"), json!(0))
    );

    // Its stdin is open: the stdin route feeds it.
    let reading = background(
        server,
        id,
        json!({"command": "read line; echo \"got $line\"", "background": true}),
    )
    .await;
    let sent = server
        .post(
            &format!("{execs}/{reading}/stdin"),
            json!({"data": "hello\n", "eof": true}),
        )
        .await;
    assert_eq!(sent.body, json!({"status": "sent"}));
    assert_eq!(ended_output(server, id, &reading).await, "got hello\n");

    // An explicit deadline still applies; a kill ends one that would run for long.
    let capped = background(
        server,
        id,
        json!({"command": "sleep 30", "background": true, "timeout": "200ms"}),
    )
    .await;
    let long = background(
        server,
        id,
        json!({"command": "sleep 30", "background": true}),
    )
    .await;
    assert_eq!(
        server.delete(&format!("{execs}/{long}")).await.body,
        json!({"status": "killed"})
    );
    ended_output(server, id, &long).await;
    ended_output(server, id, &capped).await;
    assert_eq!(
        server.get(&format!("{execs}/{long}")).await.body["status"],
        "killed"
    );
    let capped = server.get(&format!("{execs}/{capped}")).await.body;
    assert_eq!(
        (capped["status"].clone(), capped["exit_code"].clone()),
        (json!("timed_out"), json!(124))
    );

    // A streamed exec whose client leaves: killed by default, run on with `continue`.
    for (on_disconnect, command, status, output) in [
        ("kill", "sleep 30; echo after", "killed", ""),
        ("continue", "sleep 0.2; echo after", "exited", "after\n"),
    ] {
        let body = json!({
            "command": command,
            "stream": true,
            "on_disconnect": on_disconnect,
            "timeout": "5s",
        });
        let response = server
            .client
            .post(server.url(&format!("/sandboxes/{id}/exec")))
            .json(&body)
            .send()
            .await
            .unwrap();
        let exec_id = response.headers()["x-exec-id"].to_str().unwrap().to_owned();
        drop(response);
        assert_eq!(
            ended_output(server, id, &exec_id).await,
            output,
            "{on_disconnect}"
        );
        assert_eq!(
            server.get(&format!("{execs}/{exec_id}")).await.body["status"],
            status,
            "{on_disconnect}"
        );
    }
    server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "true", "background": true, "stream": true}),
        )
        .await
        .assert_error(400, "bad_request");
}

/// `mib` MiB of known pseudo-random printable text (base64 letters, a newline every 100), so
/// its UTF-8 rendering is the bytes themselves.
fn known_text(seed: u64, mib: usize) -> Vec<u8> {
    const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(mib << 20);
    while out.len() < mib << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        for byte in state.to_le_bytes() {
            out.push(if out.len() % 100 == 99 {
                b'\n'
            } else {
                LETTERS[usize::from(byte & 63)]
            });
        }
    }
    out.truncate(mib << 20);
    out
}

/// A background command writing 25 MiB of known text on each stream (50 MiB in all) keeps
/// running without any client; a client that drops its connection after every `k` bytes and
/// reconnects with the offsets it last saw reassembles both streams exactly, for several `k`
/// (decisions §8). Needs `exec.output_buffer_bytes` of at least 25 MiB.
pub(crate) async fn assert_reconnects_reassemble(server: &TestServer, id: &str, dir: &str) {
    let (out, err) = (known_text(1, 25), known_text(2, 25));
    for (name, content) in [("out.txt", &out), ("err.txt", &err)] {
        let put = server
            .client
            .put(server.url(&format!("/sandboxes/{id}/files?path={dir}/{name}")))
            .body(content.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 200);
    }
    for k in [65_537usize, 1 << 20, 9 << 20] {
        let exec_id = background(
            server,
            id,
            json!({"command": "cat out.txt & cat err.txt >&2; wait", "workdir": dir, "background": true}),
        )
        .await;
        let mut offsets = [0, 0];
        let mut data = [Vec::new(), Vec::new()];
        let mut reconnects = 0;
        let exit = loop {
            let (got, next, exit) = read_output(server, id, &exec_id, offsets, k).await;
            for (all, part) in data.iter_mut().zip(got) {
                all.extend_from_slice(&part);
            }
            offsets = next;
            if let Some(exit) = exit {
                break exit;
            }
            reconnects += 1;
        };
        assert_eq!(exit["exit_code"], 0, "{exit}");
        assert!(
            data[0] == out,
            "k {k}: stdout differs ({} bytes)",
            data[0].len()
        );
        assert!(
            data[1] == err,
            "k {k}: stderr differs ({} bytes)",
            data[1].len()
        );
        // Every read lets go after k bytes (or the chunk that passes k).
        assert!(reconnects >= 4, "k {k}: {reconnects} reconnects");
        let record = server
            .get(&format!("/sandboxes/{id}/execs/{exec_id}"))
            .await
            .body;
        assert_eq!(
            (
                record["stdout_bytes"].as_u64(),
                record["stderr_bytes"].as_u64()
            ),
            (Some(25 << 20), Some(25 << 20))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_mib_reassemble_across_reconnects() {
    let server = TestServer::start_with(|c| c.exec.output_buffer_bytes = 32 << 20).await;
    let id = sandbox(&server).await;
    assert_reconnects_reassemble(&server, &id, "/data").await;
    server.shutdown().await;
}

/// Exec records survive a restart (decisions §8): ended ones as they were (their output
/// reported lost), and a running mock exec, whose process cannot outlive svc, marked rather
/// than dropped; the routes that act on running execs answer 409 for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_records_survive_a_restart() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let execs = format!("/sandboxes/{id}/execs");
    let ended = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "printf abc; exit 3"}),
        )
        .await
        .body["exec_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let running = background(
        &server,
        &id,
        json!({"command": "sleep 1000", "background": true}),
    )
    .await;
    let before = server.get(&execs).await.body;
    let server = server.restart().await;
    let after = server.get(&execs).await.body;
    assert_eq!(after.as_array().unwrap().len(), 2, "{after}");
    assert_eq!(after[1], before[1], "an ended record comes back as it was");
    let lost = &after[0];
    assert_eq!(lost["exec_id"], running.as_str());
    assert_eq!(lost["status"], "killed", "{lost}");
    assert!(lost["ended_at"].is_string());
    assert!(
        lost["detail"].as_str().unwrap().contains("restarted"),
        "{lost}"
    );
    assert!(
        before[0].get("detail").is_none(),
        "no detail while nothing is lost"
    );
    let replay = server
        .client
        .get(server.url(&format!("{execs}/{ended}/output?follow=false")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines: Vec<Value> = replay
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0], json!({"stream": "stdout", "lost": 3}));
    assert_eq!(lines[1]["exit_code"], 3);
    server
        .delete(&format!("{execs}/{running}"))
        .await
        .assert_error(409, "conflict");
    // New execs are listed first, and everything survives a second restart.
    let newer = server
        .post(&format!("/sandboxes/{id}/exec"), json!({"command": "true"}))
        .await;
    assert_eq!(newer.status, 200);
    let listed = server.get(&execs).await.body;
    let server = server.restart().await;
    assert_eq!(server.get(&execs).await.body, listed);
    assert_eq!(listed[0]["exec_id"], newer.body["exec_id"]);
    server.delete(&format!("/sandboxes/{id}")).await;
    server.shutdown().await;
}
