//! `svc exec ID -- CMD...`: runs a command as a streamed exec, writing its output as it arrives
//! and exiting with its exit code; `-i` / `-t` go over the WebSocket instead
//! ([`super::interactive`]).

use std::process::ExitCode;

use clap::Args;
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::output::{exit_code, write_chunk, NdjsonLines};
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
    let mut lines = NdjsonLines::new(response);
    while let Some(line) = lines.next().await {
        let line = line?;
        let stream = line["stream"].as_str().unwrap_or_default();
        if stream == "exit" {
            return Ok(exit_code(&line));
        }
        write_chunk(stream, line["data"].as_str().unwrap_or_default());
    }
    Err(ClientError::Transport(
        "the output ended before the command's exit".into(),
    ))
}
