//! Interactive exec over a real WebSocket.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

use crate::harness::{wait_for, TestServer};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(server: &TestServer, id: &str) -> Socket {
    connect_naming_the_exec(server, id).await.0
}

/// The socket, and the exec ID the upgrade's answer names (`X-Exec-ID`).
async fn connect_naming_the_exec(server: &TestServer, id: &str) -> (Socket, String) {
    let url = format!(
        "{}/sandboxes/{id}/exec/ws",
        server.url("").replace("http://", "ws://")
    );
    let (socket, response) = tokio_tungstenite::connect_async(url)
        .await
        .expect("upgrade");
    assert_eq!(response.status(), 101);
    let exec_id = response.headers()["x-exec-id"].to_str().unwrap().to_owned();
    assert!(crate::exec::is_exec_id(&exec_id), "{exec_id}");
    (socket, exec_id)
}

async fn send(socket: &mut Socket, value: Value) {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .unwrap();
}

/// Everything the server sends until it closes: messages and the close code.
async fn drain(socket: &mut Socket) -> (Vec<Value>, Option<CloseCode>) {
    let mut messages = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), socket.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => {
                messages.push(serde_json::from_str(&text).unwrap());
            }
            Ok(Some(Ok(Message::Close(frame)))) => return (messages, frame.map(|f| f.code)),
            Ok(Some(Ok(_))) => {}
            _ => return (messages, None),
        }
    }
}

fn text_of(messages: &[Value], kind: &str) -> String {
    messages
        .iter()
        .filter(|m| m["type"] == kind)
        .map(|m| m["data"].as_str().unwrap())
        .collect()
}

async fn sandbox(server: &TestServer) -> String {
    server.spawn(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn the_upgrade_names_the_exec_its_events_carry() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut events = server
        .events("?types=exec.started,exec.completed", None)
        .await;
    let (mut socket, exec_id) = connect_naming_the_exec(&server, &id).await;
    send(&mut socket, json!({"type": "start", "command": "true"})).await;
    let (_, close) = drain(&mut socket).await;
    assert_eq!(close, Some(CloseCode::Normal));
    for kind in ["exec.started", "exec.completed"] {
        let event = events.next(Duration::from_secs(5)).await.unwrap();
        assert_eq!(event.data["type"], kind);
        assert_eq!(event.data["data"]["exec_id"], exec_id.as_str(), "{kind}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn runs_a_command_and_closes_normally() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut socket = connect(&server, &id).await;
    send(
        &mut socket,
        json!({"type": "start", "command": "echo hi; echo err >&2; exit 3"}),
    )
    .await;
    let (messages, close) = drain(&mut socket).await;
    assert_eq!(text_of(&messages, "stdout"), "hi\n");
    assert_eq!(text_of(&messages, "stderr"), "err\n");
    assert_eq!(
        messages.last().unwrap(),
        &json!({"type": "exit", "exit_code": 3})
    );
    assert_eq!(close, Some(CloseCode::Normal));
    server.shutdown().await;
}

#[tokio::test]
async fn stdin_and_eof() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut socket = connect(&server, &id).await;
    send(
        &mut socket,
        json!({"type": "start", "command": "cat", "env": {"X": "1"}}),
    )
    .await;
    send(&mut socket, json!({"type": "stdin", "data": "abc "})).await;
    send(
        &mut socket,
        json!({"type": "stdin", "data": "def", "eof": true}),
    )
    .await;
    let (messages, _) = drain(&mut socket).await;
    assert_eq!(text_of(&messages, "stdout"), "abc def");
    assert_eq!(messages.last().unwrap()["exit_code"], 0);
    server.shutdown().await;
}

#[tokio::test]
async fn tty_with_resize() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut socket = connect(&server, &id).await;
    send(&mut socket, json!({"type": "start", "command": "stty size; read line; stty size", "tty": true, "cols": 80, "rows": 24})).await;
    // Resize only once the first size is printed: sent earlier, it could land before the
    // shell's first `stty size` and the test would race the terminal.
    let mut messages = Vec::new();
    while !text_of(&messages, "stdout").contains("24 80") {
        match tokio::time::timeout(Duration::from_secs(20), socket.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => {
                messages.push(serde_json::from_str(&text).unwrap());
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("no first size: {other:?} after {messages:?}"),
        }
    }
    send(
        &mut socket,
        json!({"type": "resize", "cols": 132, "rows": 50}),
    )
    .await;
    send(&mut socket, json!({"type": "stdin", "data": "go\n"})).await;
    let (rest, close) = drain(&mut socket).await;
    messages.extend(rest);
    let output = text_of(&messages, "stdout");
    assert!(output.contains("24 80"), "{output:?}");
    assert!(output.contains("50 132"), "{output:?}");
    assert!(
        text_of(&messages, "stderr").is_empty(),
        "a TTY merges stderr into stdout"
    );
    assert_eq!(close, Some(CloseCode::Normal));
    server.shutdown().await;
}

#[tokio::test]
async fn signals_end_the_command_with_128_plus_n() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    for (name, code) in [
        ("SIGINT", 130),
        ("TERM", 143),
        ("sigkill", 137),
        ("HUP", 129),
    ] {
        let mut socket = connect(&server, &id).await;
        // `exec`: a shell between fork and wait defers SIGINT until its child ends, as shells
        // do; the test signals the command itself.
        send(
            &mut socket,
            json!({"type": "start", "command": "echo ready; exec sleep 30"}),
        )
        .await;
        let ready = socket.next().await.unwrap().unwrap();
        assert!(ready.to_text().unwrap().contains("ready"));
        send(&mut socket, json!({"type": "signal", "signal": name})).await;
        let (messages, _) = drain(&mut socket).await;
        let last = messages
            .last()
            .unwrap_or_else(|| panic!("{name}: no messages after the signal"));
        assert_eq!(last["exit_code"], code, "{name}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn deadline_sends_a_timeout_chunk_and_124() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut socket = connect(&server, &id).await;
    send(
        &mut socket,
        json!({"type": "start", "command": "sleep 30", "timeout": "300ms"}),
    )
    .await;
    let (messages, _) = drain(&mut socket).await;
    assert!(text_of(&messages, "stderr").contains("timed out"));
    assert_eq!(messages.last().unwrap()["exit_code"], 124);
    server.shutdown().await;
}

#[tokio::test]
async fn protocol_errors_send_error_and_close() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let cases: Vec<(Vec<Message>, &str)> = vec![
        (
            vec![Message::Text(
                json!({"type": "resize", "cols": 10, "rows": 10})
                    .to_string()
                    .into(),
            )],
            "start",
        ),
        (vec![Message::Text("not json".into())], "invalid message"),
        (
            vec![Message::Text(
                json!({"type": "start", "command": ""}).to_string().into(),
            )],
            "command",
        ),
        (vec![Message::Binary(vec![1, 2, 3].into())], "binary"),
        (
            vec![
                Message::Text(
                    json!({"type": "start", "command": "sleep 30"})
                        .to_string()
                        .into(),
                ),
                Message::Text(
                    json!({"type": "signal", "signal": "SIGUSR9"})
                        .to_string()
                        .into(),
                ),
            ],
            "unknown signal",
        ),
        (
            vec![
                Message::Text(
                    json!({"type": "start", "command": "sleep 30"})
                        .to_string()
                        .into(),
                ),
                Message::Text(json!({"type": "dance"}).to_string().into()),
            ],
            "invalid message",
        ),
    ];
    for (messages, mention) in cases {
        let mut socket = connect(&server, &id).await;
        for message in messages {
            socket.send(message).await.unwrap();
        }
        let (received, close) = drain(&mut socket).await;
        let error = received
            .iter()
            .find(|m| m["type"] == "error")
            .unwrap_or_else(|| panic!("no error for {mention}: {received:?}"));
        assert!(
            error["message"].as_str().unwrap().contains(mention),
            "{error}"
        );
        assert_eq!(error["code"], "bad_request", "{error}");
        assert!(close.is_some(), "the server closes after an error");
    }
    // A refusal of the exec itself carries the code a plain exec would answer with.
    let mut socket = connect(&server, &id).await;
    send(
        &mut socket,
        json!({"type": "start", "command": "true", "timeout": "48h"}),
    )
    .await;
    let (received, close) = drain(&mut socket).await;
    let error = received.iter().find(|m| m["type"] == "error").unwrap();
    assert_eq!(error["code"], "resource_limit", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_exec_timeout"),
        "{error}"
    );
    assert!(close.is_some());
    // A plain GET without the upgrade is a JSON 400.
    server
        .get(&format!("/sandboxes/{id}/exec/ws"))
        .await
        .assert_error(400, "bad_request");
    // An unknown or destroyed sandbox is refused before the upgrade.
    let url = format!(
        "{}/sandboxes/sb-0123456789abcdef/exec/ws",
        server.url("").replace("http://", "ws://")
    );
    assert!(tokio_tungstenite::connect_async(url).await.is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn closing_the_socket_ends_the_command() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let mut socket = connect(&server, &id).await;
    send(
        &mut socket,
        json!({"type": "start", "command": "echo $$ > wspid; echo ready; sleep 30"}),
    )
    .await;
    let ready = socket.next().await.unwrap().unwrap();
    assert!(ready.to_text().unwrap().contains("ready"));
    socket.close(None).await.unwrap();
    drop(socket);
    let pid = std::fs::read_to_string(server.mock_root().join(&id).join("wspid")).unwrap();
    let pid = pid.trim().to_owned();
    wait_for("the command to end", Duration::from_secs(10), || async {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    })
    .await;
    server.shutdown().await;
}

/// A browser's WebSocket cannot send headers: its credential comes as a subprotocol offered
/// beside `svc`, which the server answers with (decisions §21, for the console's terminal).
#[tokio::test]
async fn a_credential_offered_as_a_subprotocol_opens_the_socket() {
    use base64::Engine;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    const KEY: &str = "ws-subprotocol-key/+";
    let server = TestServer::start_with(|c| {
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(KEY);
    })
    .await;
    let spawned: Value = server
        .client
        .post(server.url("/sandboxes"))
        .header("X-API-Key", KEY)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = spawned["id"].as_str().unwrap();
    let url = format!(
        "{}/sandboxes/{id}/exec/ws",
        server.url("").replace("http://", "ws://")
    );
    let offer = |key: &str| {
        let mut request = url.as_str().into_client_request().unwrap();
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key);
        request.headers_mut().insert(
            "sec-websocket-protocol",
            format!("svc, svc.api-key.{encoded}").parse().unwrap(),
        );
        request
    };
    let (mut socket, response) = tokio_tungstenite::connect_async(offer(KEY))
        .await
        .expect("the subprotocol's key is accepted");
    assert_eq!(response.headers()["sec-websocket-protocol"], "svc");
    send(
        &mut socket,
        json!({"type": "start", "command": "echo $((6*7))"}),
    )
    .await;
    let (messages, _) = drain(&mut socket).await;
    assert_eq!(text_of(&messages, "stdout"), "42\n");
    for refused in [
        tokio_tungstenite::connect_async(offer("wrong")).await,
        tokio_tungstenite::connect_async(url.as_str()).await,
    ] {
        match refused {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status(), 401);
            }
            other => panic!("expected a 401, got {:?}", other.map(|(_, r)| r.status())),
        }
    }
    server.shutdown().await;
}
