//! Files in a container. Reads, writes and stats go through the archive API, which needs
//! nothing inside the image (they work in an image without a shell) and streams reads. Listing,
//! deleting, moving, chmod and glob run as root through `crate::shell_files`.

use bollard::query_parameters::{
    ContainerArchiveInfoOptions, DownloadFromContainerOptions, UploadToContainerOptions,
};
use bollard::Docker;
use bytes::BytesMut;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use svc_core::path::{NonRootPath, SandboxPath};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tokio_util::io::ReaderStream;

use super::errors::{engine_error, status_of};
use super::tar::{dirs_archive, streamed_archive, upload_archive, EntryKind, TarReader};
use crate::shell_files::ShellFiles;
use crate::{ByteStream, FileInfo, ProviderError, Upload};

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
        Err(err) => Err(engine_error("stat", err)),
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

/// Content up to this size is uploaded in one archive built in memory, straight to its path;
/// anything larger streams into a hidden file beside it that is renamed over it once complete.
const IN_MEMORY_UPLOAD: usize = 1 << 20;

/// Where an upload's archive is extracted: the deepest existing ancestor of the file, and the
/// directories missing below it (relative to it, parents first), so existing directories keep
/// their modes.
struct UploadBase {
    base: SandboxPath,
    dirs: Vec<String>,
}

impl UploadBase {
    async fn find(
        docker: &Docker,
        container: &str,
        path: &SandboxPath,
    ) -> Result<Self, ProviderError> {
        if let Some(existing) = stat_raw(docker, container, path).await? {
            if existing.file_mode & GO_MODE_DIR != 0 {
                return Err(ProviderError::InvalidRequest {
                    message: format!("{path}: is a directory"),
                });
            }
        }
        Self::below(docker, container, path.parent()).await
    }

    /// The deepest existing directory at or above `start`, and the directories missing below it
    /// down to `start` included.
    async fn below(
        docker: &Docker,
        container: &str,
        start: SandboxPath,
    ) -> Result<Self, ProviderError> {
        let mut missing = Vec::new();
        let mut base = start;
        loop {
            match stat_raw(docker, container, &base).await? {
                Some(stat)
                    if stat.file_mode & GO_MODE_DIR != 0
                        || stat.file_mode & GO_MODE_SYMLINK != 0 =>
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
        let mut found = UploadBase {
            base,
            dirs: Vec::new(),
        };
        found.dirs = missing.iter().rev().map(|p| found.relative(p)).collect();
        Ok(found)
    }

    fn relative(&self, path: &SandboxPath) -> String {
        let prefix = if self.base.is_root() {
            1
        } else {
            self.base.as_str().len() + 1
        };
        path.as_str()[prefix..].to_owned()
    }

    async fn upload(
        &self,
        docker: &Docker,
        container: &str,
        path: &SandboxPath,
        archive: impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static,
    ) -> Result<(), ProviderError> {
        let options = UploadToContainerOptions {
            path: self.base.to_string(),
            ..Default::default()
        };
        docker
            .upload_to_container(container, Some(options), bollard::body_try_stream(archive))
            .await
            .map_err(|e| match status_of(&e) {
                Some(404) => ProviderError::FileNotFound {
                    path: path.to_string(),
                },
                Some(400) => ProviderError::InvalidRequest {
                    message: format!("{path}: {e}"),
                },
                _ => engine_error("writing a file", e),
            })
    }
}

/// The modification time of a file written into a container: the host's real time, as any
/// write inside it would get.
#[allow(clippy::disallowed_methods)]
fn now() -> u64 {
    u64::try_from(Utc::now().timestamp()).unwrap_or(0)
}

pub(super) async fn write(
    docker: &Docker,
    container: &str,
    path: &NonRootPath,
    mode: u32,
    content: Upload,
    shell: &ShellFiles<'_>,
) -> Result<(), ProviderError> {
    let place = UploadBase::find(docker, container, path).await?;
    let Upload { mut stream, size } = content;
    let mut head = BytesMut::new();
    let mut whole = false;
    while head.len() <= IN_MEMORY_UPLOAD {
        match stream.next().await {
            Some(chunk) => head.extend_from_slice(&chunk?),
            None => {
                whole = true;
                break;
            }
        }
    }
    if whole {
        let archive = upload_archive(&place.dirs, &place.relative(path), mode, &head, now())?;
        return place
            .upload(
                docker,
                container,
                path,
                futures::stream::once(async move { Ok(archive) }),
            )
            .await;
    }
    let rest: ByteStream =
        Box::pin(futures::stream::once(async move { Ok(head.freeze()) }).chain(stream));
    let Upload { stream: body, size } = match size {
        Some(size) => Upload::stream(rest, Some(size)),
        None => spool(rest).await?,
    };
    let size = size.unwrap_or_default();
    let temporary = path.upload_sibling();
    let archive = streamed_archive(
        &place.dirs,
        &place.relative(&temporary),
        mode,
        size,
        body,
        now(),
    )?;
    let result = match place.upload(docker, container, path, archive).await {
        Ok(()) => shell.rename(&temporary, path).await,
        Err(err) => Err(err),
    };
    if result.is_err() {
        // Best effort: the archive may have been cut mid-file.
        if let Err(err) = shell.delete(&temporary, false).await {
            tracing::debug!(%err, "removing an unfinished upload");
        }
    }
    result
}

/// Copies content of unknown length to an unnamed host file to learn its size (the archive
/// header comes first), then streams it back: memory stays flat whatever the size.
async fn spool(mut content: ByteStream) -> Result<Upload, ProviderError> {
    let spool_error = |e: std::io::Error| ProviderError::io("spooling an upload", e);
    let file = tokio::task::spawn_blocking(tempfile::tempfile)
        .await
        .map_err(|e| ProviderError::caused("spooling an upload", e))?
        .map_err(spool_error)?;
    let mut file = tokio::fs::File::from_std(file);
    let mut size = 0u64;
    while let Some(chunk) = content.next().await {
        let chunk = chunk?;
        size += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(spool_error)?;
    }
    file.flush().await.map_err(spool_error)?;
    file.seek(std::io::SeekFrom::Start(0))
        .await
        .map_err(spool_error)?;
    let stream =
        ReaderStream::with_capacity(file, 256 * 1024).map(move |chunk| chunk.map_err(spool_error));
    Ok(Upload::stream(Box::pin(stream), Some(size)))
}

/// Streams `dir` as the engine archives it with a trailing `/.`: names relative to it.
pub(super) async fn read_archive(
    docker: &Docker,
    container: &str,
    dir: &SandboxPath,
) -> Result<ByteStream, ProviderError> {
    let stat =
        stat_raw(docker, container, dir)
            .await?
            .ok_or_else(|| ProviderError::FileNotFound {
                path: dir.to_string(),
            })?;
    if stat.file_mode & GO_MODE_DIR == 0 && stat.file_mode & GO_MODE_SYMLINK == 0 {
        return Err(ProviderError::InvalidRequest {
            message: format!("{dir}: not a directory"),
        });
    }
    let inside = if dir.is_root() {
        "/.".to_owned()
    } else {
        format!("{dir}/.")
    };
    let options = DownloadFromContainerOptions { path: inside };
    let stream = docker
        .download_from_container(container, Some(options))
        .map(|chunk| chunk.map_err(|e| engine_error("reading a directory", e)));
    Ok(Box::pin(stream))
}

/// Extracts a checked archive into `dir`, creating it (and its missing parents) first.
pub(super) async fn write_archive(
    docker: &Docker,
    container: &str,
    dir: &SandboxPath,
    archive: ByteStream,
) -> Result<(), ProviderError> {
    let place = UploadBase::below(docker, container, dir.clone()).await?;
    if !place.dirs.is_empty() {
        let dirs = dirs_archive(&place.dirs, now())?;
        place
            .upload(
                docker,
                container,
                dir,
                futures::stream::once(async move { Ok(dirs) }),
            )
            .await?;
    }
    let inside = UploadBase {
        base: dir.clone(),
        dirs: Vec::new(),
    };
    let body = archive.map(|chunk| chunk.map_err(std::io::Error::other));
    inside.upload(docker, container, dir, body).await
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
            .map(|chunk| chunk.map_err(|e| engine_error("reading a file", e)));
        let mut reader = TarReader::new(Box::pin(stream));
        let entry = match reader.first_entry().await {
            Ok(Some(entry)) => entry,
            Ok(None) => {
                return Err(ProviderError::FileNotFound {
                    path: path.to_string(),
                })
            }
            Err(ProviderError::Engine {
                status: 404,
                message,
                ..
            }) if message.contains("No such container:path")
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
