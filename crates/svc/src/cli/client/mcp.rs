//! `svc mcp` (decisions §19): a Model Context Protocol server on stdio, on the official `rmcp`
//! crate, that gives an agent sandboxes through the same HTTP API (and credentials) as the rest
//! of the client: create, list and destroy sandboxes, run commands with bounded output, and
//! read, write and list files. Stdout carries the protocol, so nothing else may print there.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use reqwest::{Method, StatusCode};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::schemars::JsonSchema;
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::output::NdjsonLines;
use super::{Api, ClientError};

/// Output kept per stream of a command when the call names no limit.
const DEFAULT_OUTPUT_BYTES: usize = 64 << 10;
/// The most a call may ask for, per stream: a tool result goes into a model's context.
const MAX_OUTPUT_BYTES: usize = 1 << 20;

pub(crate) async fn run(api: Api) -> Result<ExitCode, ClientError> {
    let server = Sandboxes {
        api: Arc::new(api),
        tool_router: Sandboxes::tool_router(),
    };
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ClientError::Transport(format!("mcp: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| ClientError::Transport(format!("mcp: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Clone)]
struct Sandboxes {
    api: Arc<Api>,
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct CreateParams {
    /// Template to start from.
    template: Option<String>,
    /// Image (default: the server's).
    image: Option<String>,
    /// Provider: docker, firecracker, qemu or mock (default: the server's).
    provider: Option<String>,
    /// Time to live, such as `30m` or `2h` (default: the server's).
    ttl: Option<String>,
    /// Environment variables of every command.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Labels to find the sandbox by.
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct ListParams {
    /// `running` (default), `destroyed`, `error`, `creating` or `all`.
    state: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct SandboxParams {
    /// Sandbox ID (`sb-...`).
    id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct RunParams {
    /// Sandbox ID (`sb-...`).
    id: String,
    /// A shell command line, run with `/bin/sh -c`.
    command: String,
    /// Working directory.
    workdir: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Deadline such as `30s` (default: the server's); the command is killed at it.
    timeout: Option<String>,
    /// Bytes of stdout and of stderr to return (default 65536, at most 1048576); longer output
    /// keeps its beginning and its end.
    max_output_bytes: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct ReadParams {
    /// Sandbox ID (`sb-...`).
    id: String,
    /// Absolute path of the file.
    path: String,
    /// Bytes to return from the start (default 65536, at most 1048576).
    max_bytes: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct WriteParams {
    /// Sandbox ID (`sb-...`).
    id: String,
    /// Absolute path of the file; parent directories are created.
    path: String,
    /// The file's whole new content, as text.
    content: String,
    /// Permission bits in octal, such as `0755` (default `0644`).
    mode: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct ListFilesParams {
    /// Sandbox ID (`sb-...`).
    id: String,
    /// Absolute path of the directory (default `/`).
    path: Option<String>,
}

/// A tool's answer: structured JSON, or the server's refusal as a tool error the model can read.
type Answer = Result<CallToolResult, String>;

fn failed(err: impl Into<ClientError>) -> String {
    err.into().to_string()
}

fn string_map(map: BTreeMap<String, String>) -> Value {
    Value::Object(
        map.into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

#[tool_router]
impl Sandboxes {
    #[tool(
        description = "Creates a sandbox (an isolated computer) and returns it; its `id` \
                          names it in the other tools."
    )]
    async fn create_sandbox(&self, Parameters(params): Parameters<CreateParams>) -> Answer {
        let mut body = Map::new();
        for (key, value) in [
            ("template", params.template),
            ("image", params.image),
            ("provider", params.provider),
            ("ttl", params.ttl),
        ] {
            if let Some(value) = value {
                body.insert(key.into(), json!(value));
            }
        }
        if !params.env.is_empty() {
            body.insert("env".into(), string_map(params.env));
        }
        if !params.metadata.is_empty() {
            body.insert("metadata".into(), string_map(params.metadata));
        }
        let request = self.api.request(Method::POST, "/sandboxes").json(&body);
        let sandbox = self.api.call(request).await.map_err(failed)?;
        Ok(CallToolResult::structured(sandbox))
    }

    #[tool(description = "Lists sandboxes (running ones unless a state is named).")]
    async fn list_sandboxes(&self, Parameters(params): Parameters<ListParams>) -> Answer {
        let mut request = self.api.request(Method::GET, "/sandboxes");
        if let Some(state) = &params.state {
            request = request.query(&[("state", state)]);
        }
        let list = self.api.call(request).await.map_err(failed)?;
        Ok(CallToolResult::structured(json!({ "sandboxes": list })))
    }

    #[tool(description = "Destroys a sandbox and everything in it.")]
    async fn destroy_sandbox(&self, Parameters(params): Parameters<SandboxParams>) -> Answer {
        let request = self
            .api
            .request(Method::DELETE, &format!("/sandboxes/{}", params.id));
        let answer = self.api.call(request).await.map_err(failed)?;
        Ok(CallToolResult::structured(answer))
    }

    #[tool(
        description = "Runs a shell command in a sandbox and returns its exit code, stdout \
                          and stderr (long output keeps its beginning and end)."
    )]
    async fn run_command(&self, Parameters(params): Parameters<RunParams>) -> Answer {
        let limit = params
            .max_output_bytes
            .unwrap_or(DEFAULT_OUTPUT_BYTES)
            .min(MAX_OUTPUT_BYTES);
        let mut body = json!({"command": params.command, "stream": true});
        if let Some(workdir) = params.workdir {
            body["workdir"] = json!(workdir);
        }
        if let Some(timeout) = params.timeout {
            body["timeout"] = json!(timeout);
        }
        if !params.env.is_empty() {
            body["env"] = string_map(params.env);
        }
        let request = self
            .api
            .request(Method::POST, &format!("/sandboxes/{}/exec", params.id))
            .json(&body);
        let response = self.api.send(request).await.map_err(failed)?;
        // Streamed, so that output past the limit is dropped as it comes, not held.
        let (mut stdout, mut stderr) = (Capped::new(limit), Capped::new(limit));
        let mut exit = None;
        let mut lines = NdjsonLines::new(response);
        while let Some(line) = lines.next().await {
            let line = line.map_err(failed)?;
            let data = line["data"].as_str().unwrap_or_default();
            match line["stream"].as_str() {
                Some("stdout") => stdout.push(data),
                Some("stderr") => stderr.push(data),
                Some("exit") => exit = Some(line),
                _ => {}
            }
        }
        let exit = exit.ok_or("the output ended before the command's exit")?;
        let exit_code = exit["exit_code"].as_i64().unwrap_or(-1);
        Ok(CallToolResult::structured(json!({
            "exit_code": exit_code,
            "timed_out": exit_code == 124 && stderr.said("timed out"),
            "stdout": stdout.text(),
            "stderr": stderr.text(),
            "truncated": stdout.dropped > 0 || stderr.dropped > 0,
            "duration": exit["duration"],
        })))
    }

    #[tool(description = "Reads a file of a sandbox as text (invalid UTF-8 shows as U+FFFD).")]
    async fn read_file(&self, Parameters(params): Parameters<ReadParams>) -> Answer {
        let limit = params
            .max_bytes
            .unwrap_or(DEFAULT_OUTPUT_BYTES)
            .clamp(1, MAX_OUTPUT_BYTES);
        let request = self
            .api
            .request(Method::GET, &format!("/sandboxes/{}/files", params.id))
            .query(&[("path", &params.path)])
            .header(reqwest::header::RANGE, format!("bytes=0-{}", limit - 1));
        let response = match self.api.send(request).await {
            Ok(response) => response,
            // An empty file has no byte 0 to start a range at.
            Err(ClientError::Refused { code, .. }) if code == "range_not_satisfiable" => {
                return Ok(CallToolResult::structured(
                    json!({"path": params.path, "content": "", "size": 0, "truncated": false}),
                ))
            }
            Err(err) => return Err(err.to_string()),
        };
        let size = match response.status() {
            StatusCode::PARTIAL_CONTENT => response
                .headers()
                .get(reqwest::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.rsplit('/').next())
                .and_then(|v| v.parse::<u64>().ok()),
            _ => response.content_length(),
        };
        let bytes = response.bytes().await.map_err(failed)?;
        let truncated = size.is_some_and(|size| size > bytes.len() as u64);
        Ok(CallToolResult::structured(json!({
            "path": params.path,
            "content": String::from_utf8_lossy(&bytes),
            "size": size,
            "truncated": truncated,
        })))
    }

    #[tool(description = "Writes a text file in a sandbox, replacing it whole.")]
    async fn write_file(&self, Parameters(params): Parameters<WriteParams>) -> Answer {
        let mode = params.mode.unwrap_or_else(|| "0644".to_owned());
        let request = self
            .api
            .request(Method::PUT, &format!("/sandboxes/{}/files", params.id))
            .query(&[("path", &params.path), ("mode", &mode)])
            .body(params.content);
        let answer = self.api.call(request).await.map_err(failed)?;
        Ok(CallToolResult::structured(answer))
    }

    #[tool(
        description = "Lists a directory of a sandbox: name, path, size, is_dir, mode and \
                          mod_time of each entry."
    )]
    async fn list_files(&self, Parameters(params): Parameters<ListFilesParams>) -> Answer {
        let path = params.path.unwrap_or_else(|| "/".to_owned());
        let request = self
            .api
            .request(Method::GET, &format!("/sandboxes/{}/files/list", params.id))
            .query(&[("path", &path)]);
        let entries = self.api.call(request).await.map_err(failed)?;
        Ok(CallToolResult::structured(json!({ "entries": entries })))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Sandboxes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("svc", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Sandboxes of an svc server: create one, run shell commands and move files in \
                 it, and destroy it when done.",
            )
    }
}

/// A stream's output bounded to `limit` bytes: its first half and its last half, and how much
/// fell between them.
struct Capped {
    limit: usize,
    head: String,
    tail: String,
    dropped: usize,
}

impl Capped {
    fn new(limit: usize) -> Capped {
        Capped {
            limit,
            head: String::new(),
            tail: String::new(),
            dropped: 0,
        }
    }

    fn push(&mut self, data: &str) {
        let head_room = (self.limit / 2).saturating_sub(self.head.len());
        let cut = floor_boundary(data, head_room);
        self.head.push_str(&data[..cut]);
        self.tail.push_str(&data[cut..]);
        let keep = self.limit - self.limit / 2;
        if self.tail.len() > keep.saturating_mul(2).max(4096) {
            self.trim_tail(keep);
        }
    }

    fn trim_tail(&mut self, keep: usize) {
        if self.tail.len() > keep {
            let mut start = self.tail.len() - keep;
            while !self.tail.is_char_boundary(start) {
                start += 1;
            }
            self.dropped += start;
            self.tail.drain(..start);
        }
    }

    fn said(&self, text: &str) -> bool {
        self.head.contains(text) || self.tail.contains(text)
    }

    fn text(&mut self) -> String {
        self.trim_tail(self.limit - self.limit / 2);
        if self.dropped == 0 {
            return format!("{}{}", self.head, self.tail);
        }
        format!(
            "{}\n[... {} bytes cut ...]\n{}",
            self.head, self.dropped, self.tail
        )
    }
}

/// The largest char boundary of `text` at or below `at`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::Capped;

    #[test]
    fn capped_output_keeps_its_beginning_and_end() {
        let mut out = Capped::new(10);
        for _ in 0..1000 {
            out.push("0123456789");
        }
        assert_eq!(out.text(), "01234\n[... 9990 bytes cut ...]\n56789");
        let mut short = Capped::new(10);
        short.push("héllo");
        assert_eq!(short.text(), "héllo");
        assert_eq!(short.dropped, 0);
    }
}
