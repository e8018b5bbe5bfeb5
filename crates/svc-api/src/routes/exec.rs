//! `POST /sandboxes/{id}/exec` (buffered, or NDJSON with `stream: true`) and
//! `GET /sandboxes/{id}/logs`.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use svc_control::{
    ControlPlane, ExecCommand, ExecForm, ExecOutput, RunningExec, StdStream, Utf8Chunker,
};
use svc_core::exec::{ExecRequest, ExecResult};
use svc_core::{Error, GoDuration};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// Most log lines one request may ask for.
const MAX_LOG_LINES: usize = 100_000;

pub(crate) fn exec_command(request: ExecRequest) -> ExecCommand {
    ExecCommand {
        command: request.command,
        args: request.args,
        env: request.env.unwrap_or_default(),
        workdir: request.workdir,
        timeout: request.timeout,
        tty: None,
        stdin: false,
    }
}

/// The message of the final stderr chunk after a deadline.
pub(crate) fn timeout_message(timeout: Option<std::time::Duration>) -> String {
    format!(
        "command timed out after {}\n",
        GoDuration::new(timeout.unwrap_or_default())
    )
}

/// Decodes chunks per stream without splitting characters.
#[derive(Default)]
pub(crate) struct TextDecoder {
    stdout: Utf8Chunker,
    stderr: Utf8Chunker,
}

impl TextDecoder {
    pub(crate) fn decode(&mut self, stream: StdStream, bytes: &[u8]) -> String {
        match stream {
            StdStream::Stdout => self.stdout.push(bytes),
            StdStream::Stderr => self.stderr.push(bytes),
        }
    }

    /// Remaining text of each stream at the end.
    pub(crate) fn finish(&mut self) -> [(StdStream, String); 2] {
        [
            (StdStream::Stdout, self.stdout.finish()),
            (StdStream::Stderr, self.stderr.finish()),
        ]
    }
}

fn stream_name(stream: StdStream) -> &'static str {
    match stream {
        StdStream::Stdout => "stdout",
        StdStream::Stderr => "stderr",
    }
}

/// One NDJSON line; fields in wire order.
#[derive(serde::Serialize)]
struct NdjsonLine<'a> {
    stream: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration: Option<String>,
}

fn ndjson_line(line: &NdjsonLine<'_>) -> Bytes {
    let mut bytes = serde_json::to_vec(line).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn chunk_line(stream: StdStream, text: &str) -> Bytes {
    ndjson_line(&NdjsonLine {
        stream: stream_name(stream),
        data: Some(text),
        exit_code: None,
        duration: None,
    })
}

/// The NDJSON body: output lines as they arrive, then the exit line. Dropping it (a client
/// that disconnected) drops the `RunningExec`, which kills the command.
fn ndjson_body(running: RunningExec) -> Body {
    struct State {
        running: RunningExec,
        decoder: TextDecoder,
        pending: std::collections::VecDeque<Bytes>,
        done: bool,
    }
    let state = State {
        running,
        decoder: TextDecoder::default(),
        pending: std::collections::VecDeque::new(),
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(line) = state.pending.pop_front() {
                return Some((Ok::<_, std::io::Error>(line), state));
            }
            if state.done {
                return None;
            }
            match state.running.next().await? {
                ExecOutput::Chunk(chunk) => {
                    let text = state.decoder.decode(chunk.stream, &chunk.data);
                    if !text.is_empty() {
                        return Some((Ok(chunk_line(chunk.stream, &text)), state));
                    }
                }
                ExecOutput::Ended(ending) => {
                    for (stream, rest) in state.decoder.finish() {
                        if !rest.is_empty() {
                            state.pending.push_back(chunk_line(stream, &rest));
                        }
                    }
                    if ending.timed_out {
                        state.pending.push_back(chunk_line(
                            StdStream::Stderr,
                            &timeout_message(ending.timeout),
                        ));
                    }
                    state.pending.push_back(ndjson_line(&NdjsonLine {
                        stream: "exit",
                        data: None,
                        exit_code: Some(ending.exit_code),
                        duration: Some(GoDuration::new(ending.duration).to_string()),
                    }));
                    state.done = true;
                }
            }
        }
    });
    Body::from_stream(stream)
}

/// Runs a command. Without `stream`, waits and returns the result; with `stream: true`,
/// answers `application/x-ndjson`: `{"stream":"stdout"|"stderr","data":...}` lines as output
/// arrives, then `{"stream":"exit","exit_code":N,"duration":...}`.
#[utoipa::path(post, path = "/sandboxes/{id}/exec", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID")),
    request_body = ExecRequest,
    responses(
        (status = 200, description = "Buffered result, or an NDJSON stream when `stream` is true",
            content((ExecResult = "application/json"), (String = "application/x-ndjson"))),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "Sandbox destroyed", body = ErrorBody),
        (status = 429, description = "Timeout over the maximum", body = ErrorBody)))]
async fn exec(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<ExecRequest>,
) -> Result<Response, ApiError> {
    let stream = request.stream;
    let command = exec_command(request);
    if !stream {
        let result = plane.exec_buffered(&principal, &id, command).await?;
        return Ok(Json(result).into_response());
    }
    let running = plane
        .start_exec(&principal, &id, command, ExecForm::Stream)
        .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        ndjson_body(running),
    )
        .into_response())
}

/// `GET /logs` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct LogsQuery {
    /// How many of the most recent lines (default 100).
    lines: Option<usize>,
}

/// The sandbox's console or log lines, oldest first.
#[utoipa::path(get, path = "/sandboxes/{id}/logs", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID"), LogsQuery),
    responses((status = 200, description = "Log lines", body = Vec<String>),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "Sandbox destroyed", body = ErrorBody)))]
async fn logs(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<LogsQuery>,
) -> Result<Json<Vec<String>>, ApiError> {
    let lines = query.lines.unwrap_or(100);
    if lines > MAX_LOG_LINES {
        return Err(Error::invalid("lines", format!("must be at most {MAX_LOG_LINES}")).into());
    }
    Ok(Json(plane.sandbox_logs(&principal, &id, lines).await?))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(exec))
        .routes(routes!(logs))
        .merge(super::exec_ws::routes())
}
