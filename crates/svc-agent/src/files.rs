//! File operations on the guest's own filesystem. Inside a microVM the whole filesystem is the
//! sandbox, so paths are plain absolute paths (normalised by `svc-core`'s rules, `..` never
//! above `/`) and symlinks are followed as any program inside would follow them. Contents
//! stream in frames; a write lands in a temporary file renamed over the target when complete,
//! so a broken upload never leaves a half-written file.

use std::io::ErrorKind as IoKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use futures::{SinkExt, StreamExt};
use svc_agent_proto::{ErrorKind, FileEntry, Frame, FrameKind, Op, Reply};
use svc_core::glob::SandboxGlob;
use svc_core::path::SandboxPath;
use tokio::io::AsyncWriteExt;

use crate::serve::{fail, send, Frames, Replies};

/// What one frame of a read carries: the most a frame may.
const READ_CHUNK: usize = svc_agent_proto::MAX_CHUNK;
/// Chunks in flight between a file's blocking reader and the connection.
const DEPTH: usize = 4;

/// A failure as the host is told it.
pub(crate) struct Failure {
    kind: ErrorKind,
    message: String,
}

impl Failure {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Failure {
            kind: ErrorKind::Invalid,
            message: message.into(),
        }
    }

    /// An I/O error on `path`, classified as the providers classify theirs.
    pub(crate) fn io(path: &SandboxPath, err: &std::io::Error) -> Self {
        let (kind, message) = match err.kind() {
            IoKind::NotFound => (
                ErrorKind::NotFound,
                format!("{path}: no such file or directory"),
            ),
            IoKind::IsADirectory => (ErrorKind::Invalid, format!("{path}: is a directory")),
            IoKind::NotADirectory => (ErrorKind::Invalid, format!("{path}: not a directory")),
            IoKind::DirectoryNotEmpty => (
                ErrorKind::Invalid,
                format!("{path}: directory not empty (use recursive=true)"),
            ),
            IoKind::AlreadyExists => (ErrorKind::Invalid, format!("{path}: already exists")),
            IoKind::PermissionDenied => (ErrorKind::Invalid, format!("{path}: permission denied")),
            _ => (ErrorKind::Failed, format!("{path}: {err}")),
        };
        Failure { kind, message }
    }

    pub(crate) fn reply(self) -> Reply {
        Reply::Error {
            kind: self.kind,
            message: self.message,
        }
    }
}

pub(crate) fn parse(path: &str) -> Result<SandboxPath, Failure> {
    SandboxPath::parse(path).map_err(|e| Failure::invalid(e.to_string()))
}

fn non_root(path: &str) -> Result<SandboxPath, Failure> {
    let path = parse(path)?;
    if path.is_root() {
        return Err(Failure::invalid("the root directory cannot be changed"));
    }
    Ok(path)
}

pub(crate) fn host(path: &SandboxPath) -> &Path {
    Path::new(path.as_str())
}

fn entry(path: &SandboxPath, metadata: &std::fs::Metadata) -> FileEntry {
    let mtime_ns = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_nanos()).ok())
        .unwrap_or_default();
    FileEntry {
        name: if path.is_root() {
            "/".to_owned()
        } else {
            path.file_name().to_owned()
        },
        path: path.to_string(),
        size: metadata.len(),
        is_dir: metadata.is_dir(),
        mtime_ns,
        mode: metadata.permissions().mode() & 0o7777,
    }
}

/// `read_file`: `File`, the content in `FileData` frames, `End`. One blocking task reads the
/// whole file (tokio's file reads would hop to the blocking pool, and copy, once per chunk).
pub(crate) async fn read(replies: &mut Replies, path: &str) {
    let path = match parse(path) {
        Ok(path) => path,
        Err(failure) => return fail(replies, failure.kind, failure.message).await,
    };
    let opened = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(host(&path)).map_err(|e| Failure::io(&path, &e))?;
            let metadata = file.metadata().map_err(|e| Failure::io(&path, &e))?;
            if metadata.is_dir() {
                return Err(Failure::invalid(format!("{path}: is a directory")));
            }
            Ok((file, metadata.len()))
        })
        .await
    };
    let (file, size) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(failure)) => return fail(replies, failure.kind, failure.message).await,
        Err(err) => return fail(replies, ErrorKind::Failed, err.to_string()).await,
    };
    if !send(replies, &Reply::File { size }).await {
        return;
    }
    let (chunks, mut received) = tokio::sync::mpsc::channel(DEPTH);
    let reading = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || read_chunks(file, &path, &chunks))
    };
    while let Some(chunk) = received.recv().await {
        if replies
            .send(Frame::bytes(FrameKind::FileData, chunk))
            .await
            .is_err()
        {
            // The host left; the reader stops at its next chunk.
            return;
        }
    }
    match reading.await {
        Ok(Ok(())) => {
            let _ = replies.send(Frame::end()).await;
        }
        Ok(Err(failure)) => fail(replies, failure.kind, failure.message).await,
        Err(err) => fail(replies, ErrorKind::Failed, err.to_string()).await,
    }
}

/// Reads `file` to its end in chunks of [`READ_CHUNK`], each handed to `chunks`.
fn read_chunks(
    mut file: std::fs::File,
    path: &SandboxPath,
    chunks: &tokio::sync::mpsc::Sender<bytes::Bytes>,
) -> Result<(), Failure> {
    use std::io::Read;
    loop {
        let mut buffer = bytes::BytesMut::zeroed(READ_CHUNK);
        let mut filled = 0;
        // Fill the chunk: short reads would make short frames.
        while filled < READ_CHUNK {
            match file.read(&mut buffer[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(err) if err.kind() == IoKind::Interrupted => {}
                Err(err) => return Err(Failure::io(path, &err)),
            }
        }
        if filled == 0 {
            return Ok(());
        }
        buffer.truncate(filled);
        if chunks.blocking_send(buffer.freeze()).is_err() {
            return Ok(());
        }
        if filled < READ_CHUNK {
            return Ok(());
        }
    }
}

/// A temporary name beside `target` for an upload in progress.
fn upload_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.svc-upload-{}-{nanos}", std::process::id()))
}

/// `write_file`: the `Data` frames up to `End` into a temporary file beside the target (its
/// parents created), renamed over it once complete; `Done`.
pub(crate) async fn write(replies: &mut Replies, frames: &mut Frames, path: &str, mode: u32) {
    let reply = match write_inner(frames, path, mode).await {
        Ok(()) => Reply::Done,
        Err(failure) => failure.reply(),
    };
    send(replies, &reply).await;
}

async fn write_inner(frames: &mut Frames, path: &str, mode: u32) -> Result<(), Failure> {
    let path = non_root(path)?;
    let target = host(&path).to_path_buf();
    let parent = path.parent();
    tokio::fs::create_dir_all(host(&parent))
        .await
        .map_err(|e| Failure::io(&parent, &e))?;
    if tokio::fs::metadata(&target).await.is_ok_and(|m| m.is_dir()) {
        return Err(Failure::invalid(format!("{path}: is a directory")));
    }
    let temporary = upload_path(&target);
    let result = async {
        let mut file = tokio::fs::File::create(&temporary)
            .await
            .map_err(|e| Failure::io(&path, &e))?;
        loop {
            match frames.next().await {
                Some(Ok(frame)) if frame.kind == FrameKind::Data => file
                    .write_all(&frame.payload)
                    .await
                    .map_err(|e| Failure::io(&path, &e))?,
                Some(Ok(frame)) if frame.kind == FrameKind::End => break,
                Some(Ok(frame)) => {
                    return Err(Failure::invalid(format!(
                        "a {:?} frame inside a file upload",
                        frame.kind
                    )))
                }
                Some(Err(err)) => return Err(Failure::invalid(err.to_string())),
                None => return Err(Failure::invalid("the upload ended before its end")),
            }
        }
        file.flush().await.map_err(|e| Failure::io(&path, &e))?;
        drop(file);
        tokio::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode & 0o7777))
            .await
            .map_err(|e| Failure::io(&path, &e))?;
        tokio::fs::rename(&temporary, &target)
            .await
            .map_err(|e| Failure::io(&path, &e))
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&temporary).await;
    }
    result
}

/// The operations answered with one reply, run on the blocking pool.
pub(crate) async fn other(op: Op) -> Reply {
    let outcome = tokio::task::spawn_blocking(move || match op {
        Op::Delete { path, recursive } => delete(&path, recursive),
        Op::ListDir { path } => list(&path),
        Op::Move { from, to } => rename(&from, &to),
        Op::Chmod { path, mode } => chmod(&path, mode),
        Op::Stat { path } => stat(&path),
        Op::Glob { pattern } => glob(&pattern),
        _ => Err(Failure::invalid("not a file operation")),
    })
    .await;
    match outcome {
        Ok(Ok(reply)) => reply,
        Ok(Err(failure)) => failure.reply(),
        Err(err) => Failure {
            kind: ErrorKind::Failed,
            message: format!("file task failed: {err}"),
        }
        .reply(),
    }
}

fn delete(path: &str, recursive: bool) -> Result<Reply, Failure> {
    let path = non_root(path)?;
    let metadata = std::fs::symlink_metadata(host(&path)).map_err(|e| Failure::io(&path, &e))?;
    let result = if !metadata.is_dir() {
        std::fs::remove_file(host(&path))
    } else if recursive {
        std::fs::remove_dir_all(host(&path))
    } else {
        std::fs::remove_dir(host(&path))
    };
    result.map_err(|e| Failure::io(&path, &e))?;
    Ok(Reply::Done)
}

fn list(path: &str) -> Result<Reply, Failure> {
    let path = parse(path)?;
    let mut entries = Vec::new();
    for item in std::fs::read_dir(host(&path)).map_err(|e| Failure::io(&path, &e))? {
        let item = item.map_err(|e| Failure::io(&path, &e))?;
        let child = path.join(&item.file_name().to_string_lossy());
        // Like `ls -l`: a symlink is described, not followed, so a dangling one still lists.
        let metadata = item.metadata().map_err(|e| Failure::io(&child, &e))?;
        entries.push(entry(&child, &metadata));
    }
    entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(Reply::Entries { entries })
}

fn rename(from: &str, to: &str) -> Result<Reply, Failure> {
    let (from, to) = (non_root(from)?, non_root(to)?);
    std::fs::symlink_metadata(host(&from)).map_err(|e| Failure::io(&from, &e))?;
    let parent = to.parent();
    std::fs::create_dir_all(host(&parent)).map_err(|e| Failure::io(&parent, &e))?;
    std::fs::rename(host(&from), host(&to)).map_err(|e| Failure::io(&to, &e))?;
    Ok(Reply::Done)
}

fn chmod(path: &str, mode: u32) -> Result<Reply, Failure> {
    let path = parse(path)?;
    std::fs::set_permissions(host(&path), std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| Failure::io(&path, &e))?;
    Ok(Reply::Done)
}

fn stat(path: &str) -> Result<Reply, Failure> {
    let path = parse(path)?;
    let metadata = std::fs::metadata(host(&path)).map_err(|e| Failure::io(&path, &e))?;
    Ok(Reply::Info {
        entry: entry(&path, &metadata),
    })
}

/// The kernel's pseudo-filesystems: a pattern from `/` lists their entries but does not
/// descend into them (thousands of process entries, and files that are not files).
const PSEUDO: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Walks below `dir` without following symlinks, collecting matches.
fn walk(dir: &SandboxPath, depth: usize, glob: &SandboxGlob, matches: &mut Vec<String>) {
    if glob.max_depth.is_some_and(|max| depth >= max) {
        return;
    }
    // Missing, not a directory, unreadable, or a pseudo-filesystem entry that vanished:
    // nothing to match there.
    let Ok(items) = std::fs::read_dir(host(dir)) else {
        return;
    };
    for item in items.flatten() {
        let child = dir.join(&item.file_name().to_string_lossy());
        if glob.is_match(child.as_str()) {
            matches.push(child.to_string());
        }
        if item.file_type().is_ok_and(|t| t.is_dir()) && !PSEUDO.contains(&child.as_str()) {
            walk(&child, depth + 1, glob, matches);
        }
    }
}

fn glob(pattern: &str) -> Result<Reply, Failure> {
    let glob = SandboxGlob::new(pattern).map_err(Failure::invalid)?;
    let mut paths = Vec::new();
    if glob.max_depth == Some(0) {
        if std::fs::symlink_metadata(host(&glob.base)).is_ok() && glob.is_match(glob.base.as_str())
        {
            paths.push(glob.base.to_string());
        }
    } else {
        walk(&glob.base, 0, &glob, &mut paths);
    }
    paths.sort();
    Ok(Reply::Paths { paths })
}
