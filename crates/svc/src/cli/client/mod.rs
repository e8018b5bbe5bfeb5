//! The command-line client (decisions §19): the `svc` binary talking to a running server over
//! HTTP. Where to reach it and how to sign in come from global flags or `SVC_URL`,
//! `SVC_API_KEY`, `SVC_TOKEN` (flags win); answers print as tables, or with `--json` as the
//! server's JSON as it answered; a refused request prints the server's code and message.

mod build;
pub(crate) mod cp;
pub(crate) mod events;
pub(crate) mod exec;
mod interactive;
pub(crate) mod mcp;
mod output;
pub(crate) mod quota;
pub(crate) mod sandbox;
pub(crate) mod template;
mod terminal;
pub(crate) mod worker;

use std::process::ExitCode;

use clap::Args;
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub(crate) use cp::CpArgs;
pub(crate) use events::EventsArgs;
pub(crate) use exec::ExecArgs;
pub(crate) use quota::QuotaCommand;
pub(crate) use sandbox::SandboxCommand;
pub(crate) use template::TemplateCommand;
pub(crate) use worker::WorkerCommand;

/// The default server.
const DEFAULT_URL: &str = "http://127.0.0.1:7423";

/// Flags every client command takes, before or after the subcommand.
#[derive(Debug, Clone, Args)]
pub(crate) struct ClientArgs {
    /// The server (default http://127.0.0.1:7423).
    #[arg(long, env = "SVC_URL", global = true, value_name = "URL")]
    url: Option<String>,
    /// An API key, sent as X-API-Key.
    #[arg(long, env = "SVC_API_KEY", global = true, hide_env_values = true)]
    api_key: Option<String>,
    /// A bearer token (OIDC), sent as Authorization: Bearer.
    #[arg(long, env = "SVC_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// Prints the server's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

/// Why a client command failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    /// The server refused, with its error body.
    #[error("{code}: {message}")]
    Refused { code: String, message: String },
    /// The server could not be reached or answered something unreadable.
    #[error("{0}")]
    Transport(String),
}

impl From<reqwest::Error> for ClientError {
    fn from(err: reqwest::Error) -> Self {
        let mut text = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        ClientError::Transport(text)
    }
}

/// A connection to the server.
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    args: ClientArgs,
}

impl Api {
    fn new(args: ClientArgs) -> Result<Self, ClientError> {
        let base = args
            .url
            .clone()
            .unwrap_or_else(|| DEFAULT_URL.to_owned())
            .trim_end_matches('/')
            .to_owned();
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        Ok(Api { http, base, args })
    }

    pub(crate) fn json(&self) -> bool {
        self.args.json
    }

    /// The address of `/api/v1{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    /// The credential headers, as `(name, value)`.
    pub(crate) fn credentials(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::new();
        if let Some(key) = &self.args.api_key {
            headers.push(("X-API-Key", key.clone()));
        }
        if let Some(token) = &self.args.token {
            headers.push(("Authorization", format!("Bearer {token}")));
        }
        headers
    }

    /// A request to `/api/v1{path}` with the credentials.
    pub(crate) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, self.url(path));
        for (name, value) in self.credentials() {
            request = request.header(name, value);
        }
        request
    }

    /// Sends `request`; a refusal becomes [`ClientError::Refused`].
    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let response = request.send().await?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(refusal(response).await)
    }

    /// Sends `request` and reads its JSON answer.
    pub(crate) async fn call(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Value, ClientError> {
        let response = self.send(request).await?;
        if response.status() == StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        response
            .json()
            .await
            .map_err(|e| ClientError::Transport(format!("reading the answer: {e}")))
    }

    /// Every item of a list route: each page, following `X-Next-Cursor` until an answer has
    /// none (the server answers at most 1000 a page).
    pub(crate) async fn list_all(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Value, ClientError> {
        let mut query = query.to_vec();
        let mut listed = Vec::new();
        loop {
            let response = self
                .send(self.request(Method::GET, path).query(&query))
                .await?;
            let cursor = response
                .headers()
                .get("x-next-cursor")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let page: Vec<Value> = response
                .json()
                .await
                .map_err(|e| ClientError::Transport(format!("reading the answer: {e}")))?;
            listed.extend(page);
            let Some(cursor) = cursor else {
                return Ok(Value::Array(listed));
            };
            query.retain(|(key, _)| *key != "cursor");
            query.push(("cursor", cursor));
        }
    }
}

/// The server's `{code, message}`, or what the answer was when it is not one.
async fn refusal(response: reqwest::Response) -> ClientError {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    refusal_of(status, &text)
}

/// The refusal a `status` answer with body `text` stands for.
pub(crate) fn refusal_of(status: StatusCode, text: &str) -> ClientError {
    match serde_json::from_str::<Value>(text) {
        Ok(body) if body["code"].is_string() => ClientError::Refused {
            code: body["code"].as_str().unwrap_or_default().to_owned(),
            message: body["message"].as_str().unwrap_or_default().to_owned(),
        },
        _ => ClientError::Refused {
            code: status.as_u16().to_string(),
            message: text.trim().to_owned(),
        },
    }
}

/// Prints `value` as the server answered it.
pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// A field as a table cell (`-` for null).
pub(crate) fn cell(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// Prints an answer (an object, or an array of them): with `--json` as the server gave it,
/// otherwise as a table of `columns` (`(header, field)`).
pub(crate) fn print_answer(api: &Api, answer: &Value, columns: &[(&str, &str)]) {
    if api.json() {
        return print_json(answer);
    }
    let row = |item: &Value| -> Vec<String> {
        columns
            .iter()
            .map(|(_, field)| cell(&item[*field]))
            .collect()
    };
    let rows: Vec<Vec<String>> = match answer {
        Value::Array(items) => items.iter().map(row).collect(),
        one => vec![row(one)],
    };
    let headers: Vec<&str> = columns.iter().map(|(header, _)| *header).collect();
    print_table(&headers, &rows);
}

/// `KEY=VALUE` items as a JSON object, naming the flag on a malformed one.
pub(crate) fn pairs(
    flag: &str,
    items: &[String],
) -> Result<serde_json::Map<String, Value>, ClientError> {
    items
        .iter()
        .map(|item| {
            item.split_once('=')
                .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                .ok_or_else(|| {
                    ClientError::Transport(format!("--{flag} {item}: expected KEY=VALUE"))
                })
        })
        .collect()
}

/// Prints rows under `headers`, columns padded to their widest cell.
pub(crate) fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// Runs a client command on a small runtime; errors print as `svc: CODE: MESSAGE`.
pub(crate) fn run<F, Fut>(args: ClientArgs, command: F) -> ExitCode
where
    F: FnOnce(Api) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode, ClientError>>,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("svc: starting the async runtime failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async move {
        let api = Api::new(args)?;
        command(api).await
    });
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("svc: {err}");
            ExitCode::FAILURE
        }
    }
}
