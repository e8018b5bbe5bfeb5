//! `process.Process` on svc's exec jobs: a process is a background exec, its PID derived from
//! the exec's ID (so it survives restarts and is the same on every replica), its output the
//! exec's replay buffer followed live. `Start` and `Connect` stream events (start, then data,
//! then end); closing such a stream leaves the process running, as envd does.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use svc_control::{ExecCommand, ExecReplay, StdStream, TtySize};
use svc_core::exec::{exit_code_on_wire, ExecRecord, ExecStatus};
use svc_core::{ExecId, GoDuration};

use crate::caller::{E2b, SandboxCaller};
use crate::connect::{self, RpcError};

/// How often an idle stream says it is alive unless the client asks otherwise.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(50);

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ProcessConfig {
    cmd: String,
    args: Vec<String>,
    envs: BTreeMap<String, String>,
    cwd: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Pty {
    size: Option<PtySize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PtySize {
    cols: u16,
    rows: u16,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StartRequest {
    process: ProcessConfig,
    pty: Option<Pty>,
    stdin: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Selector {
    pid: Option<u32>,
    tag: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Selected {
    process: Selector,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Input {
    stdin: Option<String>,
    pty: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SendInputRequest {
    process: Selector,
    input: Input,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SendSignalRequest {
    process: Selector,
    signal: Value,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UpdateRequest {
    process: Selector,
    pty: Option<Pty>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StreamInputData {
    input: Input,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StreamInputRequest {
    start: Option<Selected>,
    data: Option<StreamInputData>,
}

/// The PID a process is known by: 31 bits of its exec ID, never 0.
fn pid_of(exec_id: &ExecId) -> u32 {
    let hex = exec_id.as_str().get(3..11).unwrap_or_default();
    (u32::from_str_radix(hex, 16).unwrap_or(1) & 0x7fff_ffff).max(1)
}

/// How often an idle stream must say it is alive (`Keepalive-Ping-Interval`, seconds).
pub(crate) fn keepalive(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|secs| *secs > 0)
        .map_or(DEFAULT_KEEPALIVE, Duration::from_secs)
}

/// `POST /process.Process/{method}`.
pub(crate) async fn call(
    State(e2b): State<E2b>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let streaming = matches!(method.as_str(), "Start" | "Connect" | "StreamInput");
    let caller = match e2b.sandbox_caller(&headers).await {
        Ok(caller) => caller,
        Err(err) if streaming => return connect::stream_error(&err.into()),
        Err(err) => return RpcError::from(err).into_response(),
    };
    let keepalive = keepalive(&headers);
    let timeout = headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(GoDuration::from_millis);
    match method.as_str() {
        "Start" => match connect::first_message::<StartRequest>(body).await {
            Ok(request) => match start(&e2b, &caller, request, timeout).await {
                Ok((pid, exec_id, tty)) => {
                    let events = follow(&e2b, &caller, exec_id, pid, [0, 0], tty, keepalive).await;
                    events.map_or_else(|err| connect::stream_error(&err), connect::stream)
                }
                Err(err) => connect::stream_error(&err),
            },
            Err(err) => connect::stream_error(&err),
        },
        "Connect" => match connect::first_message::<Selected>(body).await {
            Ok(request) => match find(&e2b, &caller, &request.process, true).await {
                Ok(record) => {
                    let offsets = [record.stdout_bytes, record.stderr_bytes];
                    let pid = pid_of(&record.exec_id);
                    let tty = e2b.is_terminal(&caller.sandbox, &record.exec_id);
                    let events =
                        follow(&e2b, &caller, record.exec_id, pid, offsets, tty, keepalive).await;
                    events.map_or_else(|err| connect::stream_error(&err), connect::stream)
                }
                Err(err) => connect::stream_error(&err),
            },
            Err(err) => connect::stream_error(&err),
        },
        "StreamInput" => match stream_input(&e2b, &caller, body).await {
            Ok(()) => connect::stream(futures::stream::iter([Ok::<_, RpcError>(json!({}))])),
            Err(err) => connect::stream_error(&err),
        },
        _ => {
            connect::unary(body, |body| async move {
                unary(&e2b, &caller, &method, &body).await
            })
            .await
        }
    }
}

async fn unary(
    e2b: &E2b,
    caller: &SandboxCaller,
    method: &str,
    body: &[u8],
) -> Result<Value, RpcError> {
    let plane = &e2b.plane;
    let (principal, sandbox) = (&caller.principal, &caller.sandbox);
    match method {
        "List" => {
            let execs = plane.list_execs(principal, sandbox).await?;
            let processes: Vec<Value> = execs
                .iter()
                .filter(|record| record.status == ExecStatus::Running)
                .map(process_info)
                .collect();
            Ok(json!({"processes": processes}))
        }
        "SendInput" => {
            let request: SendInputRequest = connect::request(body)?;
            let record = find(e2b, caller, &request.process, true).await?;
            let data = input_bytes(&request.input)?;
            plane
                .exec_stdin(principal, sandbox, &record.exec_id, &data, false)
                .await?;
            Ok(json!({}))
        }
        "CloseStdin" => {
            let request: Selected = connect::request(body)?;
            let record = find(e2b, caller, &request.process, true).await?;
            plane
                .exec_stdin(principal, sandbox, &record.exec_id, b"", true)
                .await?;
            Ok(json!({}))
        }
        "SendSignal" => {
            let request: SendSignalRequest = connect::request(body)?;
            let record = find(e2b, caller, &request.process, true).await?;
            let exec_id = &record.exec_id;
            match &request.signal {
                Value::String(s) if s == "SIGNAL_SIGKILL" => {
                    plane.kill_exec(principal, sandbox, exec_id).await?;
                }
                Value::Number(n) if n.as_u64() == Some(9) => {
                    plane.kill_exec(principal, sandbox, exec_id).await?;
                }
                Value::String(s) if s == "SIGNAL_SIGTERM" => {
                    plane
                        .signal_exec(principal, sandbox, exec_id, "SIGTERM")
                        .await?;
                }
                Value::Number(n) if n.as_u64() == Some(15) => {
                    plane
                        .signal_exec(principal, sandbox, exec_id, "SIGTERM")
                        .await?;
                }
                other => return Err(RpcError::invalid(format!("unknown signal {other}"))),
            }
            Ok(json!({}))
        }
        "Update" => {
            let request: UpdateRequest = connect::request(body)?;
            let record = find(e2b, caller, &request.process, true).await?;
            if let Some(size) = request.pty.and_then(|p| p.size) {
                let size = TtySize {
                    cols: size.cols,
                    rows: size.rows,
                };
                plane
                    .resize_exec(principal, sandbox, &record.exec_id, size)
                    .await?;
            }
            Ok(json!({}))
        }
        other => Err(RpcError::new(
            "unimplemented",
            format!("process.Process/{other} is not a method svc serves"),
        )),
    }
}

/// `StreamInput`: a `start` naming the process, then its input, written as it arrives.
async fn stream_input(e2b: &E2b, caller: &SandboxCaller, body: Body) -> Result<(), RpcError> {
    let mut messages = std::pin::pin!(connect::messages::<StreamInputRequest>(body));
    let mut exec_id = None;
    while let Some(message) = messages.next().await {
        let message = message?;
        if let Some(start) = message.start {
            exec_id = Some(find(e2b, caller, &start.process, true).await?.exec_id);
        }
        if let Some(data) = message.data {
            let exec_id = exec_id
                .as_ref()
                .ok_or_else(|| RpcError::invalid("input before the start message"))?;
            let bytes = input_bytes(&data.input)?;
            e2b.plane
                .exec_stdin(&caller.principal, &caller.sandbox, exec_id, &bytes, false)
                .await?;
        }
    }
    Ok(())
}

fn input_bytes(input: &Input) -> Result<Vec<u8>, RpcError> {
    let encoded = input
        .stdin
        .as_deref()
        .or(input.pty.as_deref())
        .unwrap_or("");
    BASE64
        .decode(encoded)
        .map_err(|e| RpcError::invalid(format!("input is not base64: {e}")))
}

fn process_info(record: &ExecRecord) -> Value {
    let (cmd, args) = match &record.args {
        Some(args) => (record.command.clone(), args.clone()),
        None => (
            "/bin/sh".to_owned(),
            vec!["-c".to_owned(), record.command.clone()],
        ),
    };
    json!({"config": {"cmd": cmd, "args": args, "envs": {}}, "pid": pid_of(&record.exec_id)})
}

/// The exec a selector names (a running one when `running`).
async fn find(
    e2b: &E2b,
    caller: &SandboxCaller,
    selector: &Selector,
    running: bool,
) -> Result<ExecRecord, RpcError> {
    let Some(pid) = selector.pid else {
        let what = selector.tag.as_deref().unwrap_or("none");
        return Err(RpcError::new(
            "not_found",
            format!("process with tag {what} not found (svc selects processes by pid)"),
        ));
    };
    let execs = e2b
        .plane
        .list_execs(&caller.principal, &caller.sandbox)
        .await?;
    execs
        .into_iter()
        .find(|record| {
            pid_of(&record.exec_id) == pid && (!running || record.status == ExecStatus::Running)
        })
        .ok_or_else(|| RpcError::new("not_found", format!("process with pid {pid} not found")))
}

/// Starts the process as a background exec: its PID, exec ID and whether it has a terminal.
async fn start(
    e2b: &E2b,
    caller: &SandboxCaller,
    request: StartRequest,
    timeout: Option<GoDuration>,
) -> Result<(u32, ExecId, bool), RpcError> {
    let ProcessConfig {
        mut cmd,
        mut args,
        envs,
        cwd,
    } = request.process;
    // The SDKs run commands as `/bin/bash -l -c CMD`; a sandbox without bash runs `/bin/sh`.
    if cmd == "/bin/bash" && !e2b.has_bash(caller).await {
        cmd = "/bin/sh".to_owned();
        args.retain(|arg| arg != "-l");
    }
    let tty = request.pty.and_then(|pty| pty.size).map(|size| TtySize {
        cols: size.cols.max(1),
        rows: size.rows.max(1),
    });
    let command = ExecCommand {
        command: cmd,
        args: Some(args),
        env: envs,
        workdir: cwd.map(|cwd| caller.resolve(&cwd, None)),
        // envd ends a process at its call's deadline; so does svc.
        timeout,
        tty,
        stdin: request.stdin.unwrap_or(true),
        ..ExecCommand::default()
    };
    let exec_id = e2b
        .plane
        .exec_background(&caller.principal, &caller.sandbox, command)
        .await?;
    if tty.is_some() {
        e2b.remember_terminal(&caller.sandbox, &exec_id);
    }
    Ok((pid_of(&exec_id), exec_id, tty.is_some()))
}

/// The events of a process from `offsets` on: `start`, its output, `end`; `keepalive` when
/// nothing happened for `keepalive`.
async fn follow(
    e2b: &E2b,
    caller: &SandboxCaller,
    exec_id: ExecId,
    pid: u32,
    offsets: [u64; 2],
    tty: bool,
    keepalive: Duration,
) -> Result<impl Stream<Item = Result<Value, RpcError>> + Send + 'static, RpcError> {
    let replay = e2b
        .plane
        .exec_output(&caller.principal, &caller.sandbox, &exec_id, offsets, true)
        .await?;
    let started = futures::stream::iter([Ok(json!({"event": {"start": {"pid": pid}}}))]);
    let events = futures::stream::unfold(replay, move |mut replay| async move {
        loop {
            let item = match tokio::time::timeout(keepalive, replay.next()).await {
                Err(_) => return Some((Ok(json!({"event": {"keepalive": {}}})), replay)),
                Ok(None) => return None,
                Ok(Some(item)) => item,
            };
            let event = match item {
                ExecReplay::Lost { .. } => continue,
                ExecReplay::Data { stream, data, .. } => {
                    let key = match (tty, stream) {
                        (true, _) => "pty",
                        (false, StdStream::Stdout) => "stdout",
                        (false, StdStream::Stderr) => "stderr",
                    };
                    json!({"event": {"data": {key: BASE64.encode(&data)}}})
                }
                ExecReplay::Exit { exit_code, .. } => {
                    let exit_code = exit_code_on_wire(exit_code);
                    json!({"event": {"end": {
                    "exitCode": exit_code,
                    "exited": true,
                    "status": format!("exit status {exit_code}"),
                    }}})
                }
            };
            return Some((Ok(event), replay));
        }
    });
    Ok(started.chain(events))
}
