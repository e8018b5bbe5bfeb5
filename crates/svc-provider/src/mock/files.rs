//! The file API on the mock provider, through `cap-std`: every path is resolved inside the
//! sandbox directory, and `..`, absolute symlinks and symlinks pointing outside cannot escape
//! it (the kernel-level `openat` walk refuses them). Directory work runs on the blocking pool;
//! file contents stream.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, Metadata, OpenOptions, Permissions, PermissionsExt};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use svc_core::path::{NonRootPath, SandboxPath};
use tokio::io::AsyncWriteExt;
use tokio_util::io::ReaderStream;

use crate::{ByteStream, FileInfo, ProviderError};
use svc_core::glob::SandboxGlob;

/// Maps an I/O error on `path` to the provider's typed errors.
pub(super) fn io_error(path: &SandboxPath, err: std::io::Error) -> ProviderError {
    match err.kind() {
        ErrorKind::NotFound => ProviderError::FileNotFound {
            path: path.to_string(),
        },
        ErrorKind::PermissionDenied if err.to_string().contains("outside") => {
            ProviderError::InvalidRequest {
                message: format!("{path}: path escapes the sandbox"),
            }
        }
        ErrorKind::IsADirectory => ProviderError::InvalidRequest {
            message: format!("{path}: is a directory"),
        },
        ErrorKind::NotADirectory => ProviderError::InvalidRequest {
            message: format!("{path}: not a directory"),
        },
        ErrorKind::DirectoryNotEmpty => ProviderError::InvalidRequest {
            message: format!("{path}: directory not empty (use recursive=true)"),
        },
        ErrorKind::AlreadyExists => ProviderError::InvalidRequest {
            message: format!("{path}: already exists"),
        },
        _ => ProviderError::io(path.to_string(), err),
    }
}

/// The relative form cap-std wants (`.` for the root).
pub(super) fn rel(path: &SandboxPath) -> &Path {
    if path.is_root() {
        Path::new(".")
    } else {
        Path::new(path.relative())
    }
}

pub(super) fn open_root(sandbox_dir: &Path) -> Result<Dir, ProviderError> {
    Dir::open_ambient_dir(sandbox_dir, cap_std::ambient_authority()).map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            ProviderError::RuntimeNotFound {
                id: sandbox_dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            }
        } else {
            ProviderError::io("opening the sandbox directory", e)
        }
    })
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ProviderError> + Send + 'static,
) -> Result<T, ProviderError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ProviderError::caused("file task failed", e))?
}

fn file_info(path: &SandboxPath, metadata: &Metadata) -> FileInfo {
    let mod_time = metadata
        .modified()
        .ok()
        .map(|t| DateTime::<Utc>::from(t.into_std()))
        .unwrap_or_default();
    FileInfo {
        name: path.file_name().to_owned(),
        path: path.to_string(),
        size: metadata.len(),
        is_dir: metadata.is_dir(),
        mod_time,
        mode: metadata.permissions().mode() & 0o7777,
    }
}

/// Streams `content` into a hidden file beside `path` and renames it over `path` once complete
/// (with `mode`), so a failed upload leaves whatever was at `path` as it was.
pub(super) async fn write(
    sandbox_dir: PathBuf,
    path: NonRootPath,
    mode: u32,
    mut content: ByteStream,
) -> Result<(), ProviderError> {
    let target = path.clone();
    let temporary = path.upload_sibling();
    let partial = temporary.clone();
    let (root, file) = blocking(move || {
        let root = open_root(&sandbox_dir)?;
        let parent = target.parent();
        if !parent.is_root() {
            root.create_dir_all(rel(&parent))
                .map_err(|e| io_error(&parent, e))?;
        }
        if root.metadata(rel(&target)).is_ok_and(|m| m.is_dir()) {
            return Err(ProviderError::InvalidRequest {
                message: format!("{target}: is a directory"),
            });
        }
        let file = root
            .open_with(
                rel(&partial),
                OpenOptions::new().write(true).create_new(true),
            )
            .map_err(|e| io_error(&target, e))?;
        Ok((root, file))
    })
    .await?;
    let mut file = tokio::fs::File::from_std(file.into_std());
    let copied = async {
        while let Some(chunk) = content.next().await {
            file.write_all(&chunk?)
                .await
                .map_err(|e| io_error(&path, e))?;
        }
        file.flush().await.map_err(|e| io_error(&path, e))
    }
    .await;
    drop(file);
    blocking(move || {
        let finished = copied.and_then(|()| {
            root.set_permissions(rel(&temporary), Permissions::from_mode(mode))
                .map_err(|e| io_error(&path, e))?;
            root.rename(rel(&temporary), &root, rel(&path))
                .map_err(|e| io_error(&path, e))
        });
        if finished.is_err() {
            let _ = root.remove_file(rel(&temporary));
        }
        finished
    })
    .await
}

pub(super) async fn read(
    sandbox_dir: PathBuf,
    path: SandboxPath,
) -> Result<ByteStream, ProviderError> {
    let file = blocking(move || {
        let root = open_root(&sandbox_dir)?;
        let file = root.open(rel(&path)).map_err(|e| io_error(&path, e))?;
        let metadata = file.metadata().map_err(|e| io_error(&path, e))?;
        if metadata.is_dir() {
            return Err(ProviderError::InvalidRequest {
                message: format!("{path}: is a directory"),
            });
        }
        Ok(file)
    })
    .await?;
    let file = tokio::fs::File::from_std(file.into_std());
    let stream = ReaderStream::with_capacity(file, 64 * 1024)
        .map(|chunk| chunk.map_err(|e| ProviderError::io("reading", e)));
    Ok(Box::pin(stream))
}

pub(super) async fn delete(
    sandbox_dir: PathBuf,
    path: NonRootPath,
    recursive: bool,
) -> Result<(), ProviderError> {
    blocking(move || {
        let root = open_root(&sandbox_dir)?;
        let metadata = root
            .symlink_metadata(rel(&path))
            .map_err(|e| io_error(&path, e))?;
        let result = if !metadata.is_dir() {
            root.remove_file(rel(&path))
        } else if recursive {
            root.remove_dir_all(rel(&path))
        } else {
            root.remove_dir(rel(&path))
        };
        result.map_err(|e| io_error(&path, e))
    })
    .await
}

pub(super) async fn list(
    sandbox_dir: PathBuf,
    path: SandboxPath,
) -> Result<Vec<FileInfo>, ProviderError> {
    blocking(move || {
        let root = open_root(&sandbox_dir)?;
        let entries = root.read_dir(rel(&path)).map_err(|e| io_error(&path, e))?;
        let mut infos = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = path.join(&name);
            let metadata = entry.metadata().map_err(|e| io_error(&child, e))?;
            infos.push(file_info(&child, &metadata));
        }
        infos.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(infos)
    })
    .await
}

pub(super) async fn rename(
    sandbox_dir: PathBuf,
    from: NonRootPath,
    to: NonRootPath,
) -> Result<(), ProviderError> {
    blocking(move || {
        let root = open_root(&sandbox_dir)?;
        root.symlink_metadata(rel(&from))
            .map_err(|e| io_error(&from, e))?;
        let parent = to.parent();
        if !parent.is_root() {
            root.create_dir_all(rel(&parent))
                .map_err(|e| io_error(&parent, e))?;
        }
        root.rename(rel(&from), &root, rel(&to))
            .map_err(|e| io_error(&to, e))
    })
    .await
}

pub(super) async fn chmod(
    sandbox_dir: PathBuf,
    path: SandboxPath,
    mode: u32,
) -> Result<(), ProviderError> {
    blocking(move || {
        let root = open_root(&sandbox_dir)?;
        root.set_permissions(rel(&path), Permissions::from_mode(mode))
            .map_err(|e| io_error(&path, e))
    })
    .await
}

pub(super) async fn stat(
    sandbox_dir: PathBuf,
    path: SandboxPath,
) -> Result<FileInfo, ProviderError> {
    blocking(move || {
        let root = open_root(&sandbox_dir)?;
        let metadata = root.metadata(rel(&path)).map_err(|e| io_error(&path, e))?;
        Ok(file_info(&path, &metadata))
    })
    .await
}

/// Walks below `glob.base` without following symlinks, collecting matches.
fn walk(
    root: &Dir,
    dir: &SandboxPath,
    depth: usize,
    glob: &SandboxGlob,
    matches: &mut Vec<String>,
) -> Result<(), ProviderError> {
    if glob.max_depth.is_some_and(|max| depth >= max) {
        return Ok(());
    }
    let entries = match root.read_dir(rel(dir)) {
        Ok(entries) => entries,
        // Missing, not a directory, or a symlink leading outside: nothing to match there.
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::PermissionDenied
            ) =>
        {
            return Ok(())
        }
        Err(e) => return Err(io_error(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        let child = dir.join(&entry.file_name().to_string_lossy());
        if glob.is_match(child.as_str()) {
            matches.push(child.to_string());
        }
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            walk(root, &child, depth + 1, glob, matches)?;
        }
    }
    Ok(())
}

pub(super) async fn glob(
    sandbox_dir: PathBuf,
    glob: SandboxGlob,
) -> Result<Vec<String>, ProviderError> {
    blocking(move || {
        let root = open_root(&sandbox_dir)?;
        let mut matches = Vec::new();
        if glob.max_depth == Some(0) {
            if root.symlink_metadata(rel(&glob.base)).is_ok() && glob.is_match(glob.base.as_str()) {
                matches.push(glob.base.to_string());
            }
        } else {
            walk(&root, &glob.base, 0, &glob, &mut matches)?;
        }
        matches.sort();
        Ok(matches)
    })
    .await
}
