//! `POST /sandboxes/{id}/exec` (buffered, or NDJSON with `stream: true`),
//! `GET /sandboxes/{id}/exec/ws` (interactive; protocol in `stream::ws`) and
//! `GET /sandboxes/{id}/logs`.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use svc_control::{ControlPlane, ExecCommand, ExecForm};
use svc_core::exec::{ExecRecord, ExecRequest, ExecResult, ExecStarted, ExecStatus, OnDisconnect};
use svc_core::{Error, ExecId, SandboxId};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{paged, PageQuery, StatusBody};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// The response header naming a streamed or interactive exec (decisions §8).
const EXEC_ID_HEADER: header::HeaderName = header::HeaderName::from_static("x-exec-id");

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
        exec_id: None,
        background: request.background,
        keep_on_disconnect: request.on_disconnect == Some(OnDisconnect::Continue),
    }
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
        (status = 202, description = "A background exec started", body = ExecStarted),
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
    let id = SandboxId::named(&id)?;
    let stream = request.stream;
    if request.background {
        if stream {
            return Err(Error::invalid(
                "background",
                "a background exec answers at once; its output is read from /execs/{exec_id}/output, so it cannot also stream",
            )
            .into());
        }
        let exec_id = plane
            .exec_background(&principal, &id, exec_command(request))
            .await?;
        return Ok((
            StatusCode::ACCEPTED,
            Json(ExecStarted {
                exec_id,
                status: ExecStatus::Running,
            }),
        )
            .into_response());
    }
    let command = exec_command(request);
    if !stream {
        let result = plane.exec_buffered(&principal, &id, command).await?;
        return Ok(Json(result).into_response());
    }
    let running = plane
        .start_exec(&principal, &id, command, ExecForm::Stream)
        .await?;
    let exec_id = header::HeaderValue::from_str(running.exec_id().as_str())
        .map_err(|e| Error::internal("naming an exec", e))?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/x-ndjson"),
            ),
            (
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-cache"),
            ),
            (EXEC_ID_HEADER, exec_id),
        ],
        crate::stream::ndjson::exec_body(running),
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
    let id = SandboxId::named(&id)?;
    let lines = query.lines.unwrap_or(100);
    if lines > MAX_LOG_LINES {
        return Err(Error::invalid("lines", format!("must be at most {MAX_LOG_LINES}")).into());
    }
    Ok(Json(plane.sandbox_logs(&principal, &id, lines).await?))
}

/// Runs commands interactively.
#[utoipa::path(get, path = "/sandboxes/{id}/exec/ws", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID")),
    responses(
        (status = 101, description = "WebSocket upgrade; messages are JSON objects with a `type`"),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "Sandbox destroyed", body = ErrorBody)))]
async fn exec_ws(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let id = SandboxId::named(&id)?;
    // Errors the caller can act on come as HTTP answers, before the upgrade.
    plane.check_exec_target(&principal, &id).await?;
    let upgrade = upgrade.map_err(|rejection| {
        svc_core::Error::invalid(
            "Upgrade",
            format!(
                "this route needs a WebSocket upgrade request: {}",
                rejection.body_text()
            ),
        )
    })?;
    // The exec's ID is chosen now: the upgrade's answer names it, before `start` arrives.
    let exec_id = svc_core::ExecId::generate();
    let header_value = header::HeaderValue::from_str(exec_id.as_str())
        .map_err(|e| Error::internal("naming an exec", e))?;
    // A browser that sent its credential as a subprotocol gets `svc` back (it must get one of
    // the protocols it offered, or it fails the handshake).
    let upgrade = upgrade.protocols([svc_control::identity::WEBSOCKET_PROTOCOL]);
    let mut response = upgrade.on_upgrade(move |socket| {
        crate::stream::ws::session(plane, principal, id, exec_id, socket)
    });
    response.headers_mut().insert(EXEC_ID_HEADER, header_value);
    Ok(response)
}

/// `POST /execs/{exec_id}/stdin` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct StdinBody {
    /// Text to write.
    #[serde(default)]
    data: String,
    /// Close stdin after writing.
    #[serde(default)]
    eof: bool,
}

/// `POST /execs/{exec_id}/signal` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct SignalBody {
    /// `SIGINT`, `SIGTERM`, `SIGKILL` or `SIGHUP` (the `SIG` prefix may be left out).
    signal: String,
}

/// The sandbox's execs, newest first: running ones and the last 100 ended, a page at a time
/// (`limit`, then `cursor` from `X-Next-Cursor`).
#[utoipa::path(get, path = "/sandboxes/{id}/execs", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID"), PageQuery),
    responses((status = 200, description = "Exec records", body = Vec<ExecRecord>, headers(("X-Next-Cursor" = String, description = "The next page's cursor; absent on the last page"))),
        (status = 400, description = "Invalid limit or cursor", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody)))]
async fn list_execs(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response, ApiError> {
    let id = SandboxId::named(&id)?;
    Ok(paged(
        plane.list_execs_page(&principal, &id, query.into()).await?,
    ))
}

/// One exec.
#[utoipa::path(get, path = "/sandboxes/{id}/execs/{exec_id}", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID"),
        ("exec_id" = String, Path, description = "Exec ID")),
    responses((status = 200, description = "The exec's record", body = ExecRecord),
        (status = 404, description = "No such sandbox or exec", body = ErrorBody)))]
async fn get_exec(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((id, exec_id)): Path<(String, String)>,
) -> Result<Json<ExecRecord>, ApiError> {
    let (id, exec_id) = (SandboxId::named(&id)?, ExecId::named(&exec_id)?);
    Ok(Json(plane.get_exec(&principal, &id, &exec_id).await?))
}

/// Kills a running exec (status `killed`).
#[utoipa::path(delete, path = "/sandboxes/{id}/execs/{exec_id}", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID"),
        ("exec_id" = String, Path, description = "Exec ID")),
    responses((status = 200, description = "`{\"status\": \"killed\"}`", body = StatusBody),
        (status = 404, description = "No such sandbox or exec", body = ErrorBody),
        (status = 409, description = "The exec has ended", body = ErrorBody)))]
async fn kill_exec(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((id, exec_id)): Path<(String, String)>,
) -> Result<Json<StatusBody>, ApiError> {
    let (id, exec_id) = (SandboxId::named(&id)?, ExecId::named(&exec_id)?);
    plane.kill_exec(&principal, &id, &exec_id).await?;
    Ok(Json(StatusBody { status: "killed" }))
}

/// Writes to a running exec's stdin (execs started with one: interactive ones).
#[utoipa::path(post, path = "/sandboxes/{id}/execs/{exec_id}/stdin", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID"),
        ("exec_id" = String, Path, description = "Exec ID")),
    request_body = StdinBody,
    responses((status = 200, description = "`{\"status\": \"sent\"}`", body = StatusBody),
        (status = 404, description = "No such sandbox or exec", body = ErrorBody),
        (status = 409, description = "The exec has ended or has no stdin", body = ErrorBody)))]
async fn exec_stdin(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((id, exec_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<StdinBody>,
) -> Result<Json<StatusBody>, ApiError> {
    let (id, exec_id) = (SandboxId::named(&id)?, ExecId::named(&exec_id)?);
    plane
        .exec_stdin(&principal, &id, &exec_id, body.data.as_bytes(), body.eof)
        .await?;
    Ok(Json(StatusBody { status: "sent" }))
}

/// Sends a signal to a running exec's process group.
#[utoipa::path(post, path = "/sandboxes/{id}/execs/{exec_id}/signal", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID"),
        ("exec_id" = String, Path, description = "Exec ID")),
    request_body = SignalBody,
    responses((status = 200, description = "`{\"status\": \"signalled\"}`", body = StatusBody),
        (status = 400, description = "Unknown signal", body = ErrorBody),
        (status = 404, description = "No such sandbox or exec", body = ErrorBody),
        (status = 409, description = "The exec has ended", body = ErrorBody)))]
async fn signal_exec(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((id, exec_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<SignalBody>,
) -> Result<Json<StatusBody>, ApiError> {
    let (id, exec_id) = (SandboxId::named(&id)?, ExecId::named(&exec_id)?);
    plane
        .signal_exec(&principal, &id, &exec_id, &body.signal)
        .await?;
    Ok(Json(StatusBody {
        status: "signalled",
    }))
}

/// `GET .../execs/{exec_id}/output` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct OutputQuery {
    /// Byte offset in stdout to start from (default 0).
    stdout_offset: Option<u64>,
    /// Byte offset in stderr to start from (default 0).
    stderr_offset: Option<u64>,
    /// Keep streaming live output until the exec ends (default true).
    follow: Option<bool>,
}

/// An exec's output from byte offsets, as NDJSON: `{"stream","data","offset"}` lines,
/// `{"stream","lost":L}` when bytes before the oldest kept were asked for, live output with
/// `follow`, and `{"stream":"exit","exit_code","duration"}` once the exec has ended.
#[utoipa::path(get, path = "/sandboxes/{id}/execs/{exec_id}/output", tag = "exec",
    params(("id" = String, Path, description = "Sandbox ID"),
        ("exec_id" = String, Path, description = "Exec ID"), OutputQuery),
    responses((status = 200, description = "NDJSON lines", content_type = "application/x-ndjson", body = String),
        (status = 404, description = "No such sandbox or exec", body = ErrorBody)))]
async fn exec_output(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((id, exec_id)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<OutputQuery>,
) -> Result<Response, ApiError> {
    let (id, exec_id) = (SandboxId::named(&id)?, ExecId::named(&exec_id)?);
    let offsets = [
        query.stdout_offset.unwrap_or(0),
        query.stderr_offset.unwrap_or(0),
    ];
    let replay = plane
        .exec_output(
            &principal,
            &id,
            &exec_id,
            offsets,
            query.follow.unwrap_or(true),
        )
        .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        crate::stream::ndjson::replay_body(replay),
    )
        .into_response())
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(exec_output))
        .routes(routes!(list_execs))
        .routes(routes!(get_exec, kill_exec))
        .routes(routes!(exec_stdin))
        .routes(routes!(signal_exec))
        .routes(routes!(exec))
        .routes(routes!(logs))
        .routes(routes!(exec_ws))
}
