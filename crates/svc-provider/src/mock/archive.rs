//! Directory archives on the mock provider. Packing walks the directory through `cap-std` on the
//! blocking pool and streams the tar through a small channel; extracting reads the (checked) tar
//! on the blocking pool and writes every entry through a `cap-std` handle on the target
//! directory, so even a symlink planted in it beforehand cannot lead a write outside.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use cap_std::fs::{Dir, Metadata, OpenOptions, Permissions, PermissionsExt};
use futures::StreamExt;
use svc_core::path::SandboxPath;
use tokio_util::io::{StreamReader, SyncIoBridge};

use super::files::{blocking, io_error, open_root, rel};
use crate::archive::{relative_link_target, relative_name};
use crate::{ByteStream, ProviderError};

/// Bytes gathered before a piece of the archive is handed to the response.
const PIECE: usize = 64 * 1024;

fn archive_error(err: std::io::Error) -> ProviderError {
    ProviderError::io("writing the archive", err)
}

/// Collects the archive into pieces and hands them over a bounded channel: the walk waits for
/// a slow reader instead of growing.
struct ChannelWriter {
    sender: tokio::sync::mpsc::Sender<Result<Bytes, ProviderError>>,
    piece: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(
            &mut self.piece,
            Vec::with_capacity(PIECE),
        ));
        self.sender
            .blocking_send(Ok(piece))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.piece.extend_from_slice(data);
        if self.piece.len() >= PIECE {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

fn header(metadata: &Metadata, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(metadata.permissions().mode() & 0o7777);
    header.set_size(size);
    let mtime = metadata
        .modified()
        .ok()
        .and_then(|t| t.into_std().duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    header.set_mtime(mtime);
    header
}

/// Appends the entries of `dir` (named under `prefix`, which ends in `/`), sorted by name,
/// recursing into directories; symlinks are stored, never followed.
fn walk(builder: &mut tar::Builder<ChannelWriter>, dir: &Dir, prefix: &str) -> std::io::Result<()> {
    let mut names: Vec<String> = dir
        .entries()?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let metadata = dir.symlink_metadata(&name)?;
        let path = format!("{prefix}{name}");
        if metadata.is_symlink() {
            let target = dir.read_link_contents(&name)?;
            let mut header = header(&metadata, tar::EntryType::Symlink, 0);
            builder.append_link(&mut header, &path, target)?;
        } else if metadata.is_dir() {
            let mut header = header(&metadata, tar::EntryType::Directory, 0);
            builder.append_data(&mut header, format!("{path}/"), std::io::empty())?;
            walk(builder, &dir.open_dir(&name)?, &format!("{path}/"))?;
        } else if metadata.is_file() {
            let file = dir.open(&name)?;
            let mut header = header(&metadata, tar::EntryType::Regular, metadata.len());
            builder.append_data(&mut header, &path, file.into_std().take(metadata.len()))?;
        }
    }
    Ok(())
}

/// Streams `dir` as a tar archive, names relative to it (`./`, `a`, `sub/`).
pub(super) async fn pack(
    sandbox_dir: PathBuf,
    dir: SandboxPath,
) -> Result<ByteStream, ProviderError> {
    let opened = dir.clone();
    let (handle, metadata) = blocking(move || {
        let root = open_root(&sandbox_dir)?;
        let metadata = root
            .metadata(rel(&opened))
            .map_err(|e| io_error(&opened, e))?;
        if !metadata.is_dir() {
            return Err(ProviderError::InvalidRequest {
                message: format!("{opened}: not a directory"),
            });
        }
        let handle = root
            .open_dir(rel(&opened))
            .map_err(|e| io_error(&opened, e))?;
        Ok((handle, metadata))
    })
    .await?;
    let (sender, mut receiver) = tokio::sync::mpsc::channel(4);
    let failures = sender.clone();
    tokio::task::spawn_blocking(move || {
        let writer = ChannelWriter {
            sender,
            piece: Vec::with_capacity(PIECE),
        };
        let mut builder = tar::Builder::new(writer);
        let packed = (|| {
            let mut top = header(&metadata, tar::EntryType::Directory, 0);
            builder.append_data(&mut top, "./", std::io::empty())?;
            walk(&mut builder, &handle, "./")?;
            builder.into_inner()?.flush()
        })();
        if let Err(err) = packed {
            if err.kind() != std::io::ErrorKind::BrokenPipe {
                let _ = failures.blocking_send(Err(archive_error(err)));
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx));
    Ok(Box::pin(stream))
}

/// Removes what is at `path` unless it is a directory, as tar does before writing an entry.
fn clear(dir: &Dir, path: &Path) -> std::io::Result<()> {
    match dir.symlink_metadata(path) {
        Ok(metadata) if !metadata.is_dir() => dir.remove_file(path),
        _ => Ok(()),
    }
}

/// Extracts a checked archive into `dir`, created when missing.
pub(super) async fn extract(
    sandbox_dir: PathBuf,
    dir: SandboxPath,
    archive: ByteStream,
) -> Result<(), ProviderError> {
    let reader = SyncIoBridge::new(StreamReader::new(
        archive.map(|chunk| chunk.map_err(std::io::Error::other)),
    ));
    blocking(move || {
        let root = open_root(&sandbox_dir)?;
        if !dir.is_root() {
            root.create_dir_all(rel(&dir))
                .map_err(|e| io_error(&dir, e))?;
        }
        let target = root.open_dir(rel(&dir)).map_err(|e| io_error(&dir, e))?;
        let mut archive = tar::Archive::new(reader);
        let read_error = |e: std::io::Error| ProviderError::io("reading the archive", e);
        for entry in archive.entries().map_err(read_error)? {
            let mut entry = entry.map_err(read_error)?;
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let relative = relative_name(&name)
                .map_err(|message| ProviderError::InvalidRequest { message })?;
            if relative.is_empty() {
                continue;
            }
            let path = Path::new(&relative);
            let failed = |e: std::io::Error| ProviderError::io(name.to_string(), e);
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                target.create_dir_all(parent).map_err(failed)?;
            }
            let kind = entry.header().entry_type();
            let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
            if kind.is_dir() {
                target.create_dir_all(path).map_err(failed)?;
                target
                    .set_permissions(path, Permissions::from_mode(mode))
                    .map_err(failed)?;
            } else if kind.is_symlink() || kind.is_hard_link() {
                let link = entry
                    .link_name_bytes()
                    .map(|l| String::from_utf8_lossy(&l).into_owned())
                    .unwrap_or_default();
                clear(&target, path).map_err(failed)?;
                if kind.is_symlink() {
                    let relative = relative_link_target(&dir, &name, &link)
                        .map_err(|message| ProviderError::InvalidRequest { message })?;
                    target.symlink(relative, path).map_err(failed)?;
                } else {
                    let source = relative_name(&link)
                        .map_err(|message| ProviderError::InvalidRequest { message })?;
                    target.hard_link(&source, &target, path).map_err(failed)?;
                }
            } else {
                clear(&target, path).map_err(failed)?;
                let mut file = target
                    .open_with(path, OpenOptions::new().write(true).create_new(true))
                    .map_err(failed)?
                    .into_std();
                std::io::copy(&mut entry, &mut file).map_err(failed)?;
                target
                    .set_permissions(path, Permissions::from_mode(mode))
                    .map_err(failed)?;
            }
        }
        Ok(())
    })
    .await
}
