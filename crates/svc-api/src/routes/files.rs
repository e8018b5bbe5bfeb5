//! `/sandboxes/{id}/files`: write, read (streamed, binary-safe), delete, list, move, chmod,
//! stat, glob.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use svc_control::{ControlPlane, FileInfo};
use svc_core::range::RangeAnswer;
use svc_core::SandboxId;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::StatusBody;
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// A mode given as text (`"755"`, `"0644"`) or, leniently, as a number whose digits are octal
/// (`755`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
enum ModeText {
    Text(String),
    Digits(u64),
}

impl ModeText {
    fn text(&self) -> String {
        match self {
            ModeText::Text(text) => text.clone(),
            ModeText::Digits(digits) => digits.to_string(),
        }
    }
}

/// `POST /files` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct WriteFile {
    /// Absolute path inside the sandbox; parent directories are created.
    path: String,
    /// The content, in `encoding`.
    #[serde(default)]
    content: String,
    /// Octal permission bits (default `0644`).
    #[schema(value_type = Option<String>, example = "0644")]
    mode: Option<ModeText>,
    /// `utf8` (default) or `base64`.
    encoding: Option<String>,
}

/// `POST /files/move` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct MoveFile {
    /// Source path.
    old_path: String,
    /// Destination path; an existing file there is replaced.
    new_path: String,
}

/// `POST /files/chmod` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct ChmodFile {
    /// Path.
    path: String,
    /// Octal permission bits.
    #[schema(value_type = String, example = "0755")]
    mode: ModeText,
}

/// `?path=` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct PathQuery {
    /// Absolute path inside the sandbox.
    path: Option<String>,
}

/// `PUT /files` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UploadQuery {
    /// Absolute path inside the sandbox; parent directories are created.
    path: Option<String>,
    /// Octal permission bits (default `0644`).
    mode: Option<String>,
}

/// `PUT /files` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct Written {
    /// `written`.
    status: &'static str,
    /// Bytes written.
    size: u64,
}

/// `DELETE /files` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct DeleteQuery {
    /// Absolute path inside the sandbox.
    path: Option<String>,
    /// Delete non-empty directories (default false).
    recursive: Option<bool>,
}

/// `GET /files/glob` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct GlobQuery {
    /// Absolute pattern with `*`, `?`, `[...]`, `**`.
    pattern: Option<String>,
}

fn required(value: Option<String>, name: &str) -> Result<String, ApiError> {
    value.ok_or_else(|| {
        ApiError(svc_core::Error::invalid(
            name,
            "query parameter is required",
        ))
    })
}

/// Writes a file.
#[utoipa::path(post, path = "/sandboxes/{id}/files", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID")),
    request_body = WriteFile,
    responses((status = 200, description = "`{\"status\": \"written\"}`", body = StatusBody),
        (status = 400, description = "Invalid path, mode or content", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "Sandbox destroyed", body = ErrorBody)))]
async fn write(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<WriteFile>,
) -> Result<Json<StatusBody>, ApiError> {
    let id = SandboxId::named(&id)?;
    let mode = body.mode.as_ref().map(ModeText::text);
    plane
        .write_file(
            &principal,
            &id,
            &body.path,
            &body.content,
            mode.as_deref(),
            body.encoding.as_deref(),
        )
        .await?;
    Ok(Json(StatusBody { status: "written" }))
}

/// The request body as a stream of chunks, never held whole.
pub(crate) fn body_stream(body: Body) -> svc_control::ByteStream {
    use futures::StreamExt;
    Box::pin(body.into_data_stream().map(|chunk| {
        chunk.map_err(|e| svc_control::ProviderError::caused("reading the request body", e))
    }))
}

/// The body's announced length, when it has one.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
}

/// Writes a file from the raw request body, streamed: any size (up to
/// `server.max_upload_bytes`, not `server.max_body_bytes`), and the file at `path` changes only
/// once the whole body has arrived.
#[utoipa::path(put, path = "/sandboxes/{id}/files", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID"), UploadQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file's bytes (any content type)"),
    responses((status = 200, description = "`{\"status\": \"written\", \"size\": N}`", body = Written),
        (status = 400, description = "Invalid path or mode, or the body broke off", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 413, description = "Over `server.max_upload_bytes`; nothing was written", body = ErrorBody)))]
async fn upload(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<UploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Written>, ApiError> {
    let id = SandboxId::named(&id)?;
    let path = required(query.path, "path")?;
    let size = plane
        .upload_file(
            &principal,
            &id,
            &path,
            query.mode.as_deref(),
            body_stream(body),
            content_length(&headers),
        )
        .await?;
    Ok(Json(Written {
        status: "written",
        size,
    }))
}

/// `PUT /files/archive` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct Extracted {
    /// `extracted`.
    status: &'static str,
    /// Entries written: files, directories and links.
    entries: u64,
}

/// Streams a directory as a tar archive (`application/x-tar`), names relative to it.
#[utoipa::path(get, path = "/sandboxes/{id}/files/archive", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID"), PathQuery),
    responses((status = 200, description = "The tar stream", content_type = "application/x-tar", body = Vec<u8>),
        (status = 400, description = "Invalid path, or not a directory", body = ErrorBody),
        (status = 404, description = "No such sandbox or directory", body = ErrorBody)))]
async fn read_archive(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PathQuery>,
) -> Result<Response, ApiError> {
    let id = SandboxId::named(&id)?;
    let dir = required(query.path, "path")?;
    let stream = plane.read_archive(&principal, &id, &dir).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/x-tar")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Extracts a tar archive (the raw body, streamed) into a directory, created when missing.
/// Absolute names, names whose `..` leave the directory, links whose target leaves it, devices
/// and FIFOs are refused (400 naming the entry) before they are written.
#[utoipa::path(put, path = "/sandboxes/{id}/files/archive", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID"), PathQuery),
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "A tar archive"),
    responses((status = 200, description = "`{\"status\": \"extracted\", \"entries\": N}`", body = Extracted),
        (status = 400, description = "Invalid path, or an entry refused (named)", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 413, description = "Over `server.max_upload_bytes`", body = ErrorBody)))]
async fn write_archive(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PathQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Extracted>, ApiError> {
    let id = SandboxId::named(&id)?;
    let dir = required(query.path, "path")?;
    let entries = plane
        .write_archive(
            &principal,
            &id,
            &dir,
            body_stream(body),
            content_length(&headers),
        )
        .await?;
    Ok(Json(Extracted {
        status: "extracted",
        entries,
    }))
}

/// Reads a file's raw bytes (streamed); `Range: bytes=a-b` (or `a-`, `-n`) answers 206 with
/// that part, so a broken download resumes.
#[utoipa::path(get, path = "/sandboxes/{id}/files", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID"), PathQuery,
        ("Range" = Option<String>, Header, description = "One byte range: `bytes=a-b`, `bytes=a-` or `bytes=-n`")),
    responses((status = 200, description = "The bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "The bytes of the range, with `Content-Range`", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 416, description = "No byte of the file is in the range; `Content-Range: bytes */SIZE`", body = ErrorBody),
        (status = 400, description = "Invalid path, or a directory", body = ErrorBody),
        (status = 404, description = "No such sandbox or file", body = ErrorBody)))]
async fn read(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PathQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = SandboxId::named(&id)?;
    let path = required(query.path, "path")?;
    let range = headers
        .get(header::RANGE)
        .and_then(|value| value.to_str().ok());
    let download = plane.read_file(&principal, &id, &path, range).await?;
    let size = download.size.unwrap_or_default();
    let octets = (header::CONTENT_TYPE, "application/octet-stream".to_owned());
    let ranges = (header::ACCEPT_RANGES, "bytes".to_owned());
    Ok(match download.answer {
        RangeAnswer::Whole => {
            ([octets, ranges], Body::from_stream(download.stream)).into_response()
        }
        RangeAnswer::Partial { start, end } => (
            StatusCode::PARTIAL_CONTENT,
            [
                octets,
                ranges,
                (header::CONTENT_RANGE, format!("bytes {start}-{end}/{size}")),
                (header::CONTENT_LENGTH, (end - start + 1).to_string()),
            ],
            Body::from_stream(download.stream),
        )
            .into_response(),
        RangeAnswer::Unsatisfiable => (
            StatusCode::RANGE_NOT_SATISFIABLE,
            [(header::CONTENT_RANGE, format!("bytes */{size}"))],
            Json(ErrorBody {
                code: "range_not_satisfiable",
                message: format!(
                    "range {} is outside the file's {size} bytes",
                    range.unwrap_or_default()
                ),
            }),
        )
            .into_response(),
    })
}

/// Deletes a file or directory.
#[utoipa::path(operation_id = "delete_file", delete, path = "/sandboxes/{id}/files", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID"), DeleteQuery),
    responses((status = 200, description = "`{\"status\": \"deleted\"}`", body = StatusBody),
        (status = 400, description = "Invalid path, `/`, or a non-empty directory without recursive", body = ErrorBody),
        (status = 404, description = "No such sandbox or file", body = ErrorBody)))]
async fn delete(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<DeleteQuery>,
) -> Result<Json<StatusBody>, ApiError> {
    let id = SandboxId::named(&id)?;
    let path = required(query.path, "path")?;
    plane
        .delete_file(&principal, &id, &path, query.recursive.unwrap_or(false))
        .await?;
    Ok(Json(StatusBody { status: "deleted" }))
}

/// Lists a directory, sorted by name.
#[utoipa::path(operation_id = "list_files", get, path = "/sandboxes/{id}/files/list", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID"), PathQuery),
    responses((status = 200, description = "Entries", body = Vec<FileInfo>),
        (status = 400, description = "Invalid path or not a directory", body = ErrorBody),
        (status = 404, description = "No such sandbox or directory", body = ErrorBody)))]
async fn list(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PathQuery>,
) -> Result<Json<Vec<FileInfo>>, ApiError> {
    let id = SandboxId::named(&id)?;
    let path = query.path.unwrap_or_else(|| "/".to_owned());
    Ok(Json(plane.list_files(&principal, &id, &path).await?))
}

/// Moves or renames.
#[utoipa::path(post, path = "/sandboxes/{id}/files/move", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID")),
    request_body = MoveFile,
    responses((status = 200, description = "`{\"status\": \"moved\"}`", body = StatusBody),
        (status = 400, description = "Invalid paths", body = ErrorBody),
        (status = 404, description = "No such sandbox or source", body = ErrorBody)))]
async fn move_file(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MoveFile>,
) -> Result<Json<StatusBody>, ApiError> {
    let id = SandboxId::named(&id)?;
    plane
        .move_file(&principal, &id, &body.old_path, &body.new_path)
        .await?;
    Ok(Json(StatusBody { status: "moved" }))
}

/// Changes permission bits.
#[utoipa::path(post, path = "/sandboxes/{id}/files/chmod", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID")),
    request_body = ChmodFile,
    responses((status = 200, description = "`{\"status\": \"chmod applied\"}`", body = StatusBody),
        (status = 400, description = "Invalid path or mode", body = ErrorBody),
        (status = 404, description = "No such sandbox or file", body = ErrorBody)))]
async fn chmod(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ChmodFile>,
) -> Result<Json<StatusBody>, ApiError> {
    let id = SandboxId::named(&id)?;
    plane
        .chmod_file(&principal, &id, &body.path, &body.mode.text())
        .await?;
    Ok(Json(StatusBody {
        status: "chmod applied",
    }))
}

/// Describes one path.
#[utoipa::path(get, path = "/sandboxes/{id}/files/stat", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID"), PathQuery),
    responses((status = 200, description = "File info", body = FileInfo),
        (status = 404, description = "No such sandbox or file", body = ErrorBody)))]
async fn stat(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PathQuery>,
) -> Result<Json<FileInfo>, ApiError> {
    let id = SandboxId::named(&id)?;
    let path = required(query.path, "path")?;
    Ok(Json(plane.stat_file(&principal, &id, &path).await?))
}

/// Paths matching an absolute glob, sorted.
#[utoipa::path(get, path = "/sandboxes/{id}/files/glob", tag = "files",
    params(("id" = String, Path, description = "Sandbox ID"), GlobQuery),
    responses((status = 200, description = "Matching paths", body = Vec<String>),
        (status = 400, description = "Pattern not absolute or invalid", body = ErrorBody)))]
async fn glob(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<GlobQuery>,
) -> Result<Json<Vec<String>>, ApiError> {
    let id = SandboxId::named(&id)?;
    let pattern = required(query.pattern, "pattern")?;
    Ok(Json(plane.glob_files(&principal, &id, &pattern).await?))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(write, read, upload, delete))
        .routes(routes!(read_archive, write_archive))
        .routes(routes!(list))
        .routes(routes!(move_file))
        .routes(routes!(chmod))
        .routes(routes!(stat))
        .routes(routes!(glob))
}
