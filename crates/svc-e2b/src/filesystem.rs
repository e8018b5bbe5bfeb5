//! `filesystem.Filesystem` on svc's file API: `Stat`, `ListDir` (to any depth), `MakeDir`,
//! `Move`, `Remove`, and directory watches (`WatchDir`, `CreateWatcher`, `GetWatcherEvents`,
//! `RemoveWatcher`, by listing: `watch.rs`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use svc_control::FileInfo;

use crate::caller::{E2b, SandboxCaller};
use crate::connect::{self, RpcError};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PathRequest {
    path: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListDirRequest {
    path: String,
    depth: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MoveRequest {
    source: String,
    destination: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WatchRequest {
    path: String,
    recursive: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WatcherRequest {
    watcher_id: String,
}

/// The deepest `ListDir` served (each level is one listing per directory).
const MAX_DEPTH: u32 = 16;

/// `POST /filesystem.Filesystem/{method}`.
pub(crate) async fn call(
    State(e2b): State<E2b>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let caller = match e2b.sandbox_caller(&headers).await {
        Ok(caller) => caller,
        Err(err) if method == "WatchDir" => return connect::stream_error(&err.into()),
        Err(err) => return RpcError::from(err).into_response(),
    };
    if method == "WatchDir" {
        let keepalive = crate::process::keepalive(&headers);
        let watched = match connect::first_message::<WatchRequest>(body).await {
            Ok(request) => {
                let dir = caller.resolve(&request.path, None);
                crate::watch::stream(e2b, caller, dir, request.recursive, keepalive).await
            }
            Err(err) => Err(err),
        };
        return watched.map_or_else(|err| connect::stream_error(&err), connect::stream);
    }
    connect::unary(body, |body| async move {
        unary(&e2b, &caller, &method, &body).await
    })
    .await
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
        "Stat" => {
            let request: PathRequest = connect::request(body)?;
            let path = caller.resolve(&request.path, None);
            let info = plane.stat_file(principal, sandbox, &path).await?;
            Ok(json!({"entry": entry(&info)}))
        }
        "ListDir" => {
            let request: ListDirRequest = connect::request(body)?;
            let path = caller.resolve(&request.path, None);
            let depth = request.depth.clamp(1, MAX_DEPTH);
            let mut entries = Vec::new();
            let mut level = vec![path];
            for _ in 0..depth {
                let mut next = Vec::new();
                for dir in &level {
                    for info in plane.list_files(principal, sandbox, dir).await? {
                        if info.is_dir {
                            next.push(info.path.clone());
                        }
                        entries.push(entry(&info));
                    }
                }
                level = next;
            }
            Ok(json!({"entries": entries}))
        }
        "MakeDir" => {
            let request: PathRequest = connect::request(body)?;
            let path = caller.resolve(&request.path, None);
            if plane.stat_file(principal, sandbox, &path).await.is_ok() {
                return Err(RpcError::new(
                    "already_exists",
                    format!("{path} already exists"),
                ));
            }
            make_dir(e2b, caller, &path).await?;
            let info = plane.stat_file(principal, sandbox, &path).await?;
            Ok(json!({"entry": entry(&info)}))
        }
        "Move" => {
            let request: MoveRequest = connect::request(body)?;
            let from = caller.resolve(&request.source, None);
            let to = caller.resolve(&request.destination, None);
            plane.move_file(principal, sandbox, &from, &to).await?;
            let info = plane.stat_file(principal, sandbox, &to).await?;
            Ok(json!({"entry": entry(&info)}))
        }
        "Remove" => {
            let request: PathRequest = connect::request(body)?;
            let path = caller.resolve(&request.path, None);
            plane.delete_file(principal, sandbox, &path, true).await?;
            Ok(json!({}))
        }
        "CreateWatcher" => {
            let request: WatchRequest = connect::request(body)?;
            let dir = caller.resolve(&request.path, None);
            let id = e2b
                .watchers
                .create(e2b, caller, dir, request.recursive)
                .await?;
            Ok(json!({"watcherId": id}))
        }
        "GetWatcherEvents" => {
            let request: WatcherRequest = connect::request(body)?;
            let events = e2b
                .watchers
                .events(e2b, caller, &request.watcher_id)
                .await?;
            Ok(json!({"events": events}))
        }
        "RemoveWatcher" => {
            let request: WatcherRequest = connect::request(body)?;
            e2b.watchers.remove(caller, &request.watcher_id)?;
            Ok(json!({}))
        }
        other => Err(RpcError::new(
            "unimplemented",
            format!("filesystem.Filesystem/{other} is not a method svc serves"),
        )),
    }
}

/// Creates directory `path` with its parents: a one-entry tar unpacked at `/`, the one way
/// svc's file API makes a directory.
async fn make_dir(e2b: &E2b, caller: &SandboxCaller, path: &str) -> Result<(), RpcError> {
    let relative = path.trim_matches('/');
    if relative.is_empty() {
        return Err(RpcError::new("already_exists", "/ already exists"));
    }
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(0o755);
    header.set_size(0);
    header.set_mtime(u64::try_from(e2b.plane.clock().now().timestamp()).unwrap_or_default());
    let mut builder = tar::Builder::new(Vec::new());
    builder
        .append_data(&mut header, format!("{relative}/"), std::io::empty())
        .map_err(|e| RpcError::new("internal", format!("packing the directory: {e}")))?;
    let archive = builder
        .into_inner()
        .map_err(|e| RpcError::new("internal", format!("packing the directory: {e}")))?;
    let length = archive.len() as u64;
    let body: svc_control::ByteStream =
        Box::pin(futures::stream::iter([Ok(bytes::Bytes::from(archive))]));
    e2b.plane
        .write_archive(&caller.principal, &caller.sandbox, "/", body, Some(length))
        .await?;
    Ok(())
}

/// `EntryInfo` in proto3 JSON.
fn entry(info: &FileInfo) -> Value {
    let kind = if info.is_dir {
        "FILE_TYPE_DIRECTORY"
    } else {
        "FILE_TYPE_FILE"
    };
    json!({
        "name": info.name,
        "type": kind,
        "path": info.path,
        "size": info.size.to_string(),
        "mode": info.mode,
        "permissions": permissions(info.mode, info.is_dir),
        "modifiedTime": info.mod_time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    })
}

/// `ls -l`'s permission text (`drwxr-xr-x`).
fn permissions(mode: u32, is_dir: bool) -> String {
    let mut text = String::with_capacity(10);
    text.push(if is_dir { 'd' } else { '-' });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 0o7;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    text
}

#[cfg(test)]
mod tests {
    use super::permissions;

    #[test]
    fn permissions_read_like_ls() {
        assert_eq!(permissions(0o755, true), "drwxr-xr-x");
        assert_eq!(permissions(0o640, false), "-rw-r-----");
    }
}
