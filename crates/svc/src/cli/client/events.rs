//! `svc events`: follows the server's event stream (SSE) until interrupted, one line per event.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;

use super::{cell, Api, ClientError};

#[derive(Debug, Args)]
pub(crate) struct EventsArgs {
    /// Only these event types (comma-separated, e.g. `sandbox.created,exec.completed`).
    #[arg(long)]
    types: Option<String>,
    /// Only this sandbox's events.
    #[arg(long)]
    sandbox: Option<String>,
}

/// One event as a line: its JSON with `--json`, else time, type, sandbox and data.
fn print_event(api: &Api, data: &str) {
    let line = match serde_json::from_str::<Value>(data) {
        Ok(event) if !api.json() => format!(
            "{}  {}  {}  {}",
            cell(&event["timestamp"]),
            cell(&event["type"]),
            cell(&event["sandbox_id"]),
            cell(&event["data"])
        ),
        _ => data.to_owned(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

pub(crate) async fn run(api: Api, args: EventsArgs) -> Result<ExitCode, ClientError> {
    let mut query = Vec::new();
    if let Some(types) = &args.types {
        query.push(("types", types.as_str()));
    }
    if let Some(sandbox) = &args.sandbox {
        query.push(("sandbox_id", sandbox.as_str()));
    }
    let response = api
        .send(api.request(Method::GET, "/events").query(&query))
        .await?;
    let mut stream = response.bytes_stream();
    let mut pending = String::new();
    let mut data = String::new();
    while let Some(chunk) = stream.next().await {
        pending.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !data.is_empty() {
                    print_event(&api, &data);
                    data.clear();
                }
            } else if let Some(value) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value.strip_prefix(' ').unwrap_or(value));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
