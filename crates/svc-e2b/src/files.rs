//! envd's HTTP routes: `GET /health`, and `GET`/`POST /files` (a file's bytes down; uploads as
//! multipart parts named `file` whose file name is the destination, or one raw body), all
//! streamed through svc's file API.

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use svc_control::{ByteStream, ProviderError};

use crate::caller::{E2b, SandboxCaller};
use crate::error::{E2bError, E2bQuery};

/// `?path=&username=` of `/files`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct FileQuery {
    path: Option<String>,
    username: Option<String>,
}

/// `GET /health`: envd answers 204 while the sandbox runs.
pub(crate) async fn health() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// `GET /files`: the file's bytes.
pub(crate) async fn read(
    State(e2b): State<E2b>,
    E2bQuery(query): E2bQuery<FileQuery>,
    headers: HeaderMap,
) -> Result<Response, E2bError> {
    let caller = e2b.sandbox_caller(&headers).await.map_err(E2bError::envd)?;
    let path = target(&caller, &query, None)?;
    let download = e2b
        .plane
        .read_file(&caller.principal, &caller.sandbox, &path, None)
        .await
        .map_err(E2bError::envd)?;
    let headers = [(header::CONTENT_TYPE, "application/octet-stream")];
    Ok((headers, Body::from_stream(download.stream)).into_response())
}

/// `POST /files`: multipart parts named `file` (each to its file name, or to `?path=`), or a
/// raw body to `?path=`. Answers what was written.
pub(crate) async fn write(
    State(e2b): State<E2b>,
    E2bQuery(query): E2bQuery<FileQuery>,
    request: Request,
) -> Result<Json<Vec<Value>>, E2bError> {
    let caller = e2b
        .sandbox_caller(request.headers())
        .await
        .map_err(E2bError::envd)?;
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    let mut written = Vec::new();
    if !multipart {
        let path = target(&caller, &query, None)?;
        let body = body_stream(request.into_body());
        upload(&e2b, &caller, &path, body).await?;
        written.push(entry(&path));
        return Ok(Json(written));
    }
    let mut form = Multipart::from_request(request, &())
        .await
        .map_err(|e| E2bError::bad_request(e.body_text()))?;
    while let Some(mut field) = form
        .next_field()
        .await
        .map_err(|e| E2bError::bad_request(e.body_text()))?
    {
        if field.name() != Some("file") {
            continue;
        }
        let path = target(&caller, &query, field.file_name())?;
        // The part is read while it is written: a channel carries its chunks to the upload.
        let (sender, receiver) =
            tokio::sync::mpsc::channel::<Result<bytes::Bytes, ProviderError>>(4);
        let pump = async move {
            while let Some(chunk) = field.chunk().await.transpose() {
                let chunk = chunk.map_err(|e| ProviderError::caused("reading the upload", e));
                let failed = chunk.is_err();
                if sender.send(chunk).await.is_err() || failed {
                    break;
                }
            }
        };
        let stream: ByteStream = Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver));
        let (result, ()) = tokio::join!(upload(&e2b, &caller, &path, stream), pump);
        result?;
        written.push(entry(&path));
    }
    if written.is_empty() {
        return Err(E2bError::new(
            StatusCode::BAD_REQUEST,
            "the upload has no part named file",
        ));
    }
    Ok(Json(written))
}

async fn upload(
    e2b: &E2b,
    caller: &SandboxCaller,
    path: &str,
    body: ByteStream,
) -> Result<u64, E2bError> {
    e2b.plane
        .upload_file(&caller.principal, &caller.sandbox, path, None, body, None)
        .await
        .map_err(E2bError::envd)
}

/// Where a request reads or writes: `?path=` first, else the part's file name; resolved as
/// envd does (relative to the user's home).
fn target(
    caller: &SandboxCaller,
    query: &FileQuery,
    file_name: Option<&str>,
) -> Result<String, E2bError> {
    let path = query
        .path
        .as_deref()
        .or(file_name)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| E2bError::bad_request("path: is required"))?;
    Ok(caller.resolve(path, query.username.as_deref()))
}

fn entry(path: &str) -> Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    json!({"name": name, "path": path, "type": "file"})
}

fn body_stream(body: Body) -> ByteStream {
    Box::pin(
        body.into_data_stream()
            .map(|chunk| chunk.map_err(|e| ProviderError::caused("reading the request body", e))),
    )
}
