//! Files in a container. Reads, writes and stats go through the archive API, which needs
//! nothing inside the image (they work in an image without a shell) and streams reads. Listing,
//! deleting, moving, chmod and glob run a small POSIX shell script through exec, which needs
//! `sh` and the usual utilities (busybox is enough).

use bollard::query_parameters::{
    ContainerArchiveInfoOptions, DownloadFromContainerOptions, UploadToContainerOptions,
};
use bollard::Docker;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use svc_core::path::SandboxPath;

use super::errors::{engine_error, status_of};
use super::tar::{upload_archive, EntryKind, TarReader};
use crate::{ByteStream, FileInfo, ProviderError};
use svc_core::glob::SandboxGlob;

/// Symlinks followed when reading, before giving up.
const MAX_SYMLINKS: usize = 16;

// Go's os.FileMode bits, as the engine reports them.
const GO_MODE_DIR: u32 = 1 << 31;
const GO_MODE_SYMLINK: u32 = 1 << 27;
const GO_MODE_SETUID: u32 = 1 << 23;
const GO_MODE_SETGID: u32 = 1 << 22;
const GO_MODE_STICKY: u32 = 1 << 20;

/// Unix permission bits from a Go file mode.
fn unix_mode(go_mode: u32) -> u32 {
    let mut mode = go_mode & 0o777;
    if go_mode & GO_MODE_SETUID != 0 {
        mode |= 0o4000;
    }
    if go_mode & GO_MODE_SETGID != 0 {
        mode |= 0o2000;
    }
    if go_mode & GO_MODE_STICKY != 0 {
        mode |= 0o1000;
    }
    mode
}

/// The engine's stat of a path, `None` when it does not exist.
async fn stat_raw(
    docker: &Docker,
    container: &str,
    path: &SandboxPath,
) -> Result<Option<bollard::container::PathStatResponse>, ProviderError> {
    let options = ContainerArchiveInfoOptions {
        path: path.to_string(),
    };
    match docker
        .get_container_archive_info(container, Some(options))
        .await
    {
        Ok(stat) => Ok(Some(stat)),
        Err(err) if status_of(&err) == Some(404) => Ok(None),
        Err(err) if status_of(&err) == Some(400) => Err(ProviderError::InvalidRequest {
            message: format!("{path}: {err}"),
        }),
        Err(err) => Err(engine_error("stat", &err)),
    }
}

pub(super) async fn stat(
    docker: &Docker,
    container: &str,
    path: &SandboxPath,
) -> Result<FileInfo, ProviderError> {
    let stat =
        stat_raw(docker, container, path)
            .await?
            .ok_or_else(|| ProviderError::FileNotFound {
                path: path.to_string(),
            })?;
    let mod_time = stat
        .modification_time
        .as_deref()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default();
    Ok(FileInfo {
        name: if path.is_root() {
            String::new()
        } else {
            path.file_name().to_owned()
        },
        path: path.to_string(),
        size: u64::try_from(stat.size).unwrap_or(0),
        is_dir: stat.file_mode & GO_MODE_DIR != 0,
        mod_time,
        mode: unix_mode(stat.file_mode),
    })
}

pub(super) async fn write(
    docker: &Docker,
    container: &str,
    path: &SandboxPath,
    mode: u32,
    mut content: ByteStream,
) -> Result<(), ProviderError> {
    if let Some(existing) = stat_raw(docker, container, path).await? {
        if existing.file_mode & GO_MODE_DIR != 0 {
            return Err(ProviderError::InvalidRequest {
                message: format!("{path}: is a directory"),
            });
        }
    }
    // The upload goes to the deepest existing ancestor and carries the directories missing
    // below it, so existing directories keep their modes.
    let mut missing = Vec::new();
    let mut base = path.parent();
    loop {
        match stat_raw(docker, container, &base).await? {
            Some(stat)
                if stat.file_mode & GO_MODE_DIR != 0 || stat.file_mode & GO_MODE_SYMLINK != 0 =>
            {
                break
            }
            Some(_) => {
                return Err(ProviderError::InvalidRequest {
                    message: format!("{base}: not a directory"),
                })
            }
            None => {
                missing.push(base.clone());
                base = base.parent();
            }
        }
    }
    let relative = |p: &SandboxPath| -> String {
        let prefix = if base.is_root() {
            1
        } else {
            base.as_str().len() + 1
        };
        p.as_str()[prefix..].to_owned()
    };
    let dirs: Vec<String> = missing.iter().rev().map(&relative).collect();
    let mut bytes = Vec::new();
    while let Some(chunk) = content.next().await {
        bytes.extend_from_slice(&chunk?);
    }
    let mtime = u64::try_from(Utc::now().timestamp()).unwrap_or(0);
    let archive = upload_archive(&dirs, &relative(path), mode, &bytes, mtime)?;
    let options = UploadToContainerOptions {
        path: base.to_string(),
        ..Default::default()
    };
    docker
        .upload_to_container(container, Some(options), bollard::body_full(archive))
        .await
        .map_err(|e| match status_of(&e) {
            Some(404) => ProviderError::FileNotFound {
                path: path.to_string(),
            },
            Some(400) => ProviderError::InvalidRequest {
                message: format!("{path}: {e}"),
            },
            _ => engine_error("writing a file", &e),
        })
}

pub(super) async fn read(
    docker: &Docker,
    container: &str,
    path: &SandboxPath,
) -> Result<ByteStream, ProviderError> {
    let mut current = path.clone();
    for _ in 0..MAX_SYMLINKS {
        let options = DownloadFromContainerOptions {
            path: current.to_string(),
        };
        let stream = docker
            .download_from_container(container, Some(options))
            .map(|chunk| chunk.map_err(|e| engine_error("reading a file", &e)));
        let mut reader = TarReader::new(Box::pin(stream));
        let entry = match reader.first_entry().await {
            Ok(Some(entry)) => entry,
            Ok(None) => {
                return Err(ProviderError::FileNotFound {
                    path: path.to_string(),
                })
            }
            Err(ProviderError::Failed { message })
                if message.contains("No such container:path")
                    || message.contains("Could not find the file") =>
            {
                return Err(ProviderError::FileNotFound {
                    path: path.to_string(),
                })
            }
            Err(err) => return Err(err),
        };
        match entry.kind {
            EntryKind::File => return Ok(reader.body(entry.size)),
            EntryKind::Directory => {
                return Err(ProviderError::InvalidRequest {
                    message: format!("{path}: is a directory"),
                })
            }
            EntryKind::Symlink(target) => {
                let next = if target.starts_with('/') {
                    target
                } else {
                    format!("{}/{target}", current.parent())
                };
                current = SandboxPath::parse(&next).map_err(|e| ProviderError::InvalidRequest {
                    message: format!("{path}: {e}"),
                })?;
            }
            EntryKind::Other => {
                return Err(ProviderError::InvalidRequest {
                    message: format!("{path}: not a regular file"),
                })
            }
        }
    }
    Err(ProviderError::InvalidRequest {
        message: format!("{path}: too many levels of symbolic links"),
    })
}

/// Exit codes of the helper scripts.
const NOT_FOUND: i32 = 2;
const INVALID: i32 = 3;

const LIST: &str = r#"d="$1"
[ -e "$d" ] || [ -L "$d" ] || exit 2
[ -d "$d" ] || { echo "not a directory" >&2; exit 3; }
cd "$d" || exit 4
for f in * .[!.]* ..?*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  stat -c '%s %f %Y %n' -- "$f" && printf '\0'
done"#;

const DELETE: &str = r#"p="$1"
[ -e "$p" ] || [ -L "$p" ] || exit 2
if [ -d "$p" ] && [ ! -L "$p" ]; then
  if [ "$2" = 1 ]; then rm -rf -- "$p" || exit 5
  else rmdir -- "$p" 2>/dev/null || { echo "directory not empty (use recursive=true)" >&2; exit 3; }
  fi
else rm -f -- "$p" || exit 5
fi"#;

const MOVE: &str = r#"[ -e "$1" ] || [ -L "$1" ] || exit 2
mkdir -p -- "$(dirname -- "$2")" || exit 5
if [ -d "$2" ] && [ ! -d "$1" ]; then echo "destination is a directory" >&2; exit 3; fi
mv -f -- "$1" "$2" || exit 5"#;

const CHMOD: &str = r#"[ -e "$1" ] || exit 2
chmod "$2" -- "$1" || exit 5"#;

const FIND: &str = r#"[ -d "$1" ] || exit 0
if [ -n "$2" ]; then find "$1" -mindepth 1 -maxdepth "$2" -print0
else find "$1" -mindepth 1 -print0
fi"#;

/// Runs a helper script with `args`; returns stdout, or the mapped error.
async fn script(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
    path: &SandboxPath,
    body: &str,
    args: &[&str],
) -> Result<Vec<u8>, ProviderError> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        body.to_owned(),
        "svc".to_owned(),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let spec = crate::ExecSpec {
        argv,
        env: std::collections::BTreeMap::new(),
        workdir: None,
        tty: None,
        stdin: false,
        user: None,
    };
    let session = super::exec::start(docker, container, sandbox_id, Some("0"), &spec).await?;
    let crate::ExecSession {
        mut output, exit, ..
    } = session;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    while let Some(chunk) = output.next().await {
        let chunk = chunk?;
        match chunk.stream {
            crate::StdStream::Stdout => stdout.extend_from_slice(&chunk.data),
            crate::StdStream::Stderr => stderr.extend_from_slice(&chunk.data),
        }
    }
    let status = exit.await?;
    let message = String::from_utf8_lossy(&stderr).trim().to_owned();
    match status.code {
        0 => Ok(stdout),
        NOT_FOUND => Err(ProviderError::FileNotFound {
            path: path.to_string(),
        }),
        INVALID => Err(ProviderError::InvalidRequest {
            message: format!("{path}: {message}"),
        }),
        126 | 127 => Err(ProviderError::failed(format!(
            "{path}: this operation needs /bin/sh and basic utilities in the image ({message})"
        ))),
        code => Err(ProviderError::failed(format!(
            "{path}: exit {code}: {message}"
        ))),
    }
}

pub(super) async fn list(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
    path: &SandboxPath,
) -> Result<Vec<FileInfo>, ProviderError> {
    let out = script(docker, container, sandbox_id, path, LIST, &[path.as_str()]).await?;
    let mut entries = Vec::new();
    for record in out.split(|b| *b == 0) {
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if record.is_empty() {
            continue;
        }
        let text = String::from_utf8_lossy(record);
        let mut fields = text.splitn(4, ' ');
        let (Some(size), Some(raw_mode), Some(mtime), Some(name)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let raw_mode = u32::from_str_radix(raw_mode, 16).unwrap_or(0);
        let child = path.join(name);
        entries.push(FileInfo {
            name: name.to_owned(),
            path: child.to_string(),
            size: size.parse().unwrap_or(0),
            is_dir: raw_mode & 0o170_000 == 0o040_000,
            mod_time: mtime
                .parse::<i64>()
                .ok()
                .and_then(|secs| DateTime::from_timestamp(secs, 0))
                .unwrap_or_default(),
            mode: raw_mode & 0o7777,
        });
    }
    entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(entries)
}

pub(super) async fn delete(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
    path: &SandboxPath,
    recursive: bool,
) -> Result<(), ProviderError> {
    let flag = if recursive { "1" } else { "0" };
    script(
        docker,
        container,
        sandbox_id,
        path,
        DELETE,
        &[path.as_str(), flag],
    )
    .await
    .map(drop)
}

pub(super) async fn rename(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
    from: &SandboxPath,
    to: &SandboxPath,
) -> Result<(), ProviderError> {
    script(
        docker,
        container,
        sandbox_id,
        from,
        MOVE,
        &[from.as_str(), to.as_str()],
    )
    .await
    .map(drop)
}

pub(super) async fn chmod(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
    path: &SandboxPath,
    mode: u32,
) -> Result<(), ProviderError> {
    let mode = format!("{mode:o}");
    script(
        docker,
        container,
        sandbox_id,
        path,
        CHMOD,
        &[path.as_str(), &mode],
    )
    .await
    .map(drop)
}

pub(super) async fn glob(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
    glob: &SandboxGlob,
) -> Result<Vec<String>, ProviderError> {
    if glob.max_depth == Some(0) {
        let exists = stat_raw(docker, container, &glob.base).await?.is_some();
        return Ok(if exists && glob.is_match(glob.base.as_str()) {
            vec![glob.base.to_string()]
        } else {
            Vec::new()
        });
    }
    let depth = glob.max_depth.map(|d| d.to_string()).unwrap_or_default();
    let out = script(
        docker,
        container,
        sandbox_id,
        &glob.base,
        FIND,
        &[glob.base.as_str(), &depth],
    )
    .await?;
    let mut matches: Vec<String> = out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter(|p| glob.is_match(p))
        .collect();
    matches.sort();
    Ok(matches)
}
