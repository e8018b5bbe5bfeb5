//! `GET /sandboxes/{id}/exec/ws`: interactive exec over a WebSocket (decisions §8). The first
//! client message is `start`; then `stdin`, `resize` and `signal` in any order. The server
//! sends `stdout`/`stderr`, then `exit`, and closes with 1000. A protocol error sends
//! `{"type":"error","message":...}` and closes; the message also carries the error `code` a
//! plain request would have answered (`bad_request` for a malformed message, `resource_limit`
//! for a timeout over the cap, ...). A socket that closes ends the command.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use svc_control::{
    ControlPlane, ExecCommand, ExecControls, ExecForm, ExecOutput, Principal, Signal, StdStream,
    TtySize,
};
use svc_core::exec::exit_code_on_wire;
use svc_core::GoDuration;
use tokio::sync::mpsc;

use super::{timeout_message, TextDecoder};

/// How long a client has to send `start`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_TTY: TtySize = TtySize { cols: 80, rows: 24 };

/// The first message.
#[derive(Debug, Deserialize)]
struct StartMessage {
    command: String,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    timeout: Option<GoDuration>,
    workdir: Option<String>,
    #[serde(default)]
    tty: bool,
    cols: Option<u16>,
    rows: Option<u16>,
}

/// Every client message.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ClientMessage {
    Start(StartMessage),
    Stdin {
        #[serde(default)]
        data: String,
        #[serde(default)]
        eof: bool,
    },
    Resize {
        cols: u16,
        rows: u16,
    },
    Signal {
        signal: String,
    },
}

enum StdinOp {
    Data(Bytes),
    Eof,
}

fn parse(message: &str) -> Result<ClientMessage, String> {
    serde_json::from_str(message).map_err(|e| format!("invalid message: {e}"))
}

async fn send_json(socket: &mut (impl SinkExt<Message> + Unpin), value: serde_json::Value) -> bool {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .is_ok()
}

/// A malformed or unexpected client message.
const PROTOCOL_ERROR: &str = "bad_request";

/// Sends an error message with its `code` and closes.
async fn fail(socket: &mut (impl SinkExt<Message> + Unpin), code: &str, message: &str) {
    send_json(
        socket,
        serde_json::json!({"type": "error", "code": code, "message": message}),
    )
    .await;
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code: axum::extract::ws::close_code::POLICY,
            reason: "protocol error".into(),
        })))
        .await;
}

/// Text of a client frame; anything but text is a protocol error.
fn frame_text(message: &Message) -> Result<Option<&str>, String> {
    match message {
        Message::Text(text) => Ok(Some(text.as_str())),
        Message::Ping(_) | Message::Pong(_) => Ok(None),
        Message::Close(_) => Err(String::new()),
        Message::Binary(_) => {
            Err("binary frames are not supported; send JSON text messages".into())
        }
    }
}

pub(crate) async fn session(
    plane: ControlPlane,
    principal: Principal,
    id: svc_core::SandboxId,
    exec_id: svc_core::ExecId,
    socket: WebSocket,
) {
    let (mut sink, mut source) = socket.split();
    let start = match tokio::time::timeout(START_TIMEOUT, source.next()).await {
        Ok(Some(Ok(message))) => match frame_text(&message) {
            Ok(Some(text)) => parse(text),
            Ok(None) => Err("the first message must be start".to_owned()),
            Err(reason) if reason.is_empty() => return,
            Err(reason) => Err(reason),
        },
        Ok(_) => return,
        Err(_) => Err("no start message within 30s".to_owned()),
    };
    let start = match start {
        Ok(ClientMessage::Start(start)) => start,
        Ok(_) => return fail(&mut sink, PROTOCOL_ERROR, "the first message must be start").await,
        Err(reason) => return fail(&mut sink, PROTOCOL_ERROR, &reason).await,
    };
    let tty = start.tty.then(|| TtySize {
        cols: start.cols.unwrap_or(DEFAULT_TTY.cols),
        rows: start.rows.unwrap_or(DEFAULT_TTY.rows),
    });
    let command = ExecCommand {
        command: start.command,
        args: start.args,
        env: start.env.unwrap_or_default(),
        workdir: start.workdir,
        timeout: start.timeout,
        tty,
        stdin: true,
        exec_id: Some(exec_id),
        background: false,
        keep_on_disconnect: false,
    };
    let mut running = match plane
        .start_exec(&principal, &id, command, ExecForm::Interactive)
        .await
    {
        Ok(running) => running,
        Err(err) => return fail(&mut sink, err.kind().code(), &err.public_message()).await,
    };
    let controls = running.controls();
    // Stdin is written by its own task, so a command that does not read cannot stall output.
    let (stdin_tx, stdin_rx) = mpsc::channel::<StdinOp>(64);
    let stdin_task = tokio::spawn(write_stdin(controls.clone(), stdin_rx));
    let mut decoder = TextDecoder::default();
    loop {
        tokio::select! {
            output = running.next() => match output {
                Some(ExecOutput::Chunk(chunk)) => {
                    let text = decoder.decode(chunk.stream, &chunk.data);
                    if !text.is_empty() && !send_output(&mut sink, chunk.stream, &text).await {
                        break;
                    }
                }
                Some(ExecOutput::Ended(ending)) => {
                    for (stream, rest) in decoder.finish() {
                        if !rest.is_empty() {
                            send_output(&mut sink, stream, &rest).await;
                        }
                    }
                    if ending.timed_out {
                        send_output(&mut sink, StdStream::Stderr, &timeout_message(ending.timeout)).await;
                    }
                    send_json(&mut sink, serde_json::json!({"type": "exit", "exit_code": exit_code_on_wire(ending.exit_code)})).await;
                    let _ = sink
                        .send(Message::Close(Some(CloseFrame {
                            code: axum::extract::ws::close_code::NORMAL,
                            reason: "exited".into(),
                        })))
                        .await;
                    break;
                }
                None => break,
            },
            message = source.next() => {
                let Some(Ok(message)) = message else {
                    break;
                };
                let text = match frame_text(&message) {
                    Ok(Some(text)) => text,
                    Ok(None) => continue,
                    Err(reason) if reason.is_empty() => break,
                    Err(reason) => {
                        fail(&mut sink, PROTOCOL_ERROR, &reason).await;
                        break;
                    }
                };
                if let Err(reason) = handle(parse(text), &controls, &stdin_tx).await {
                    fail(&mut sink, PROTOCOL_ERROR, &reason).await;
                    break;
                }
            }
        }
    }
    // Dropping `running` before its end kills the command (the socket went away).
    drop(running);
    drop(stdin_tx);
    let _ = stdin_task.await;
}

async fn send_output(
    sink: &mut (impl SinkExt<Message> + Unpin),
    stream: StdStream,
    text: &str,
) -> bool {
    let kind = match stream {
        StdStream::Stdout => "stdout",
        StdStream::Stderr => "stderr",
    };
    send_json(sink, serde_json::json!({"type": kind, "data": text})).await
}

async fn handle(
    message: Result<ClientMessage, String>,
    controls: &ExecControls,
    stdin: &mpsc::Sender<StdinOp>,
) -> Result<(), String> {
    match message? {
        ClientMessage::Start(_) => Err("the command is already started".into()),
        ClientMessage::Stdin { data, eof } => {
            if !data.is_empty() {
                let _ = stdin.send(StdinOp::Data(Bytes::from(data))).await;
            }
            if eof {
                let _ = stdin.send(StdinOp::Eof).await;
            }
            Ok(())
        }
        ClientMessage::Resize { cols, rows } => {
            if cols == 0 || rows == 0 {
                return Err("resize needs cols and rows of at least 1".into());
            }
            controls
                .resize(TtySize { cols, rows })
                .await
                .map_err(|e| e.public_message())
        }
        ClientMessage::Signal { signal } => {
            let parsed = Signal::parse(&signal).ok_or_else(|| {
                format!("unknown signal {signal:?} (allowed: SIGINT, SIGTERM, SIGKILL, SIGHUP)")
            })?;
            controls
                .signal(parsed)
                .await
                .map_err(|e| e.public_message())
        }
    }
}

async fn write_stdin(controls: ExecControls, mut ops: mpsc::Receiver<StdinOp>) {
    while let Some(op) = ops.recv().await {
        let result = match op {
            StdinOp::Data(data) => controls.write_stdin(data).await,
            StdinOp::Eof => controls.close_stdin().await,
        };
        if result.is_err() {
            // The command stopped reading (or ended); later input has nowhere to go.
            while ops.recv().await.is_some() {}
            return;
        }
    }
}
