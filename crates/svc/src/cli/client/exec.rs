//! `svc exec ID -- CMD...`: runs a command as a streamed exec, writing its output as it arrives
//! and exiting with its exit code; `-i` / `-t` go over the WebSocket instead
//! ([`super::interactive`]).

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use futures::StreamExt;
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::{pairs, Api, ClientError};

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// Keeps stdin open and sends it to the command.
    #[arg(short = 'i', long)]
    interactive: bool,
    /// Runs the command under a pseudo-terminal (with -i: an interactive shell).
    #[arg(short = 't', long)]
    tty: bool,
    /// Sandbox ID.
    id: String,
    /// Environment variable `KEY=VALUE` (repeatable).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Working directory inside the sandbox.
    #[arg(long, short = 'w')]
    workdir: Option<String>,
    /// Deadline (`30s`, `5m`; default: the server's).
    #[arg(long)]
    timeout: Option<String>,
    /// The command: one word runs through `/bin/sh -c`, several run as a program and its
    /// arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The exec body for `args`, without the transport's own fields.
fn body(args: &ExecArgs) -> Result<Value, ClientError> {
    let mut body = Map::new();
    let (command, rest) = args
        .command
        .split_first()
        .ok_or_else(|| ClientError::Transport("a command is required after --".into()))?;
    body.insert("command".into(), json!(command));
    if !rest.is_empty() {
        body.insert("args".into(), json!(rest));
    }
    if !args.env.is_empty() {
        body.insert("env".into(), Value::Object(pairs("env", &args.env)?));
    }
    if let Some(workdir) = &args.workdir {
        body.insert("workdir".into(), json!(workdir));
    }
    if let Some(timeout) = &args.timeout {
        body.insert("timeout".into(), json!(timeout));
    }
    Ok(Value::Object(body))
}

/// Writes one NDJSON line's output; the exit code when it is the exit line.
fn handle(line: &[u8]) -> Result<Option<i32>, ClientError> {
    let value: Value = serde_json::from_slice(line)
        .map_err(|e| ClientError::Transport(format!("reading the output: {e}")))?;
    let data = value["data"].as_str().unwrap_or_default().as_bytes();
    match value["stream"].as_str() {
        Some("stdout") => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(data).and_then(|()| out.flush());
        }
        Some("stderr") => {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(data).and_then(|()| err.flush());
        }
        Some("exit") => {
            let code = value["exit_code"].as_i64().unwrap_or(1);
            return Ok(Some(i32::try_from(code).unwrap_or(1)));
        }
        _ => {}
    }
    Ok(None)
}

pub(crate) async fn run(api: Api, args: ExecArgs) -> Result<ExitCode, ClientError> {
    let mut body = body(&args)?;
    if args.interactive || args.tty {
        return super::interactive::run(&api, &args.id, body, args.interactive, args.tty).await;
    }
    body["stream"] = json!(true);
    let response = api
        .send(
            api.request(Method::POST, &format!("/sandboxes/{}/exec", args.id))
                .json(&body),
        )
        .await?;
    let mut stream = response.bytes_stream();
    let mut pending = Vec::new();
    while let Some(chunk) = stream.next().await {
        pending.extend_from_slice(&chunk?);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            if let Some(code) = handle(&line)? {
                // Exit codes outside 0..=255 (none the server sends) wrap like a shell's.
                return Ok(ExitCode::from((code & 0xff) as u8));
            }
        }
    }
    Err(ClientError::Transport(
        "the output ended before the command's exit".into(),
    ))
}
