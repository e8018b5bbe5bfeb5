//! Directory archives (`read_archive`, `write_archive`): tar streamed both ways, built and
//! unpacked by the agent itself, so an image needs no `tar` (nor a shell) for them. The tar
//! crate is synchronous: it runs on the blocking pool, joined to the connection by a bounded
//! channel of chunks, so a directory of any size moves in flat memory.

use std::io::{Read, Write};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use svc_agent_proto::{ErrorKind, Frame, FrameKind, Reply};
use tokio::sync::mpsc;

use crate::files::{host, parse, Failure};
use crate::serve::{fail, send, Frames, Replies};

/// How much of an archive one frame carries.
const CHUNK: usize = svc_agent_proto::MAX_CHUNK;
/// Chunks in flight between the blocking side and the connection.
const DEPTH: usize = 4;

/// Collects what the tar builder writes into chunks sent to the connection.
struct ChunkWriter {
    buffer: Vec<u8>,
    chunks: mpsc::Sender<Bytes>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        self.chunks
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the host left"))
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = CHUNK - self.buffer.len();
        let taken = data.len().min(room);
        self.buffer.extend_from_slice(&data[..taken]);
        if self.buffer.len() == CHUNK {
            self.send()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// `read_archive`: `Archive`, the tar in `FileData` frames, `End`.
pub(crate) async fn read(replies: &mut Replies, path: &str) {
    let dir = match parse(path) {
        Ok(dir) => dir,
        Err(failure) => {
            send(replies, &failure.reply()).await;
            return;
        }
    };
    match tokio::fs::metadata(host(&dir)).await {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(_) => {
            return fail(
                replies,
                ErrorKind::Invalid,
                format!("{dir}: not a directory"),
            )
            .await
        }
        Err(err) => {
            send(replies, &Failure::io(&dir, &err).reply()).await;
            return;
        }
    }
    if !send(replies, &Reply::Archive).await {
        return;
    }
    let (chunks, mut received) = mpsc::channel(DEPTH);
    let source = host(&dir).to_path_buf();
    let building = tokio::task::spawn_blocking(move || {
        let mut writer = ChunkWriter {
            buffer: Vec::with_capacity(CHUNK),
            chunks,
        };
        let mut builder = tar::Builder::new(&mut writer);
        builder.follow_symlinks(false);
        append_tree(&mut builder, &source, &kernel_mounts())?;
        builder.finish()?;
        drop(builder);
        writer.flush()
    });
    while let Some(chunk) = received.recv().await {
        if replies
            .send(Frame::bytes(FrameKind::FileData, chunk))
            .await
            .is_err()
        {
            // The host left; the builder stops at its next chunk.
            return;
        }
    }
    match building.await {
        Ok(Ok(())) => {
            let _ = replies.send(Frame::end()).await;
        }
        Ok(Err(err)) => fail(replies, ErrorKind::Failed, format!("{dir}: {err}")).await,
        Err(err) => {
            fail(
                replies,
                ErrorKind::Failed,
                format!("archiving {dir}: {err}"),
            )
            .await;
        }
    }
}

/// Filesystem types whose files are the kernel's views, not data: an archive keeps their mount
/// points as empty directories (`/proc/kcore` alone claims terabytes).
const KERNEL_FILESYSTEMS: &[&str] = &[
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "pstore",
    "bpf",
    "configfs",
    "fusectl",
    "binfmt_misc",
    "mqueue",
    "devpts",
    "autofs",
    "hugetlbfs",
];

/// The mount points of kernel filesystems, from `/proc/self/mountinfo` (none when unreadable).
fn kernel_mounts() -> std::collections::HashSet<std::path::PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Default::default();
    };
    text.lines()
        .filter_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            let fstype = fs.split(' ').next()?;
            let point = mount.split(' ').nth(4)?;
            KERNEL_FILESYSTEMS
                .contains(&fstype)
                .then(|| std::path::PathBuf::from(unescape_mount_point(point)))
        })
        .collect()
}

/// Mount points escape space, tab, newline and backslash as `\ooo` octal.
fn unescape_mount_point(point: &str) -> String {
    let mut out = String::with_capacity(point.len());
    let mut rest = point;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Appends `source` as `.` and everything below it, in name order, symlinks stored as links.
/// Kernel filesystems stay empty directories, and what vanishes or cannot be opened while the
/// archive is made is left out (a live sandbox changes under it); a failure reading a file
/// already begun breaks the archive off, which the host passes on as a broken transfer.
fn append_tree<W: Write>(
    builder: &mut tar::Builder<W>,
    source: &std::path::Path,
    skipped: &std::collections::HashSet<std::path::PathBuf>,
) -> std::io::Result<()> {
    use std::io::ErrorKind as Kind;
    let gone = |err: &std::io::Error| matches!(err.kind(), Kind::NotFound | Kind::PermissionDenied);
    // `./` for the directory itself, then bare names: what `append_dir_all` wrote before.
    let mut pending = vec![(source.to_path_buf(), std::path::Path::new(".").join(""))];
    while let Some((path, name)) = pending.pop() {
        let metadata = match std::fs::symlink_metadata(&path) {
            Ok(metadata) => metadata,
            Err(err) if gone(&err) => continue,
            Err(err) => return Err(err),
        };
        if metadata.is_dir() {
            builder.append_dir(&name, &path)?;
            if skipped.contains(&path) {
                continue;
            }
            let mut children: Vec<std::ffi::OsString> = match std::fs::read_dir(&path) {
                Ok(entries) => entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name())
                    .collect(),
                Err(err) if gone(&err) => continue,
                Err(err) => return Err(err),
            };
            children.sort();
            pending.extend(
                children
                    .into_iter()
                    .rev()
                    .map(|child| (path.join(&child), name.join(&child))),
            );
        } else if metadata.is_file() {
            match std::fs::File::open(&path) {
                Ok(mut file) => builder.append_file(&name, &mut file)?,
                Err(err) if gone(&err) => continue,
                Err(err) => return Err(err),
            }
        } else if metadata.file_type().is_symlink() {
            builder.append_path_with_name(&path, &name)?;
        } else {
            append_special(builder, &name, &metadata)?;
        }
    }
    Ok(())
}

/// A device or fifo: a header alone. (The tar crate's own `append_path_with_name` names these
/// by their source path, absolute here, which it then refuses.) Sockets have no place in tar
/// and are left out, as GNU tar does.
fn append_special<W: Write>(
    builder: &mut tar::Builder<W>,
    name: &std::path::Path,
    metadata: &std::fs::Metadata,
) -> std::io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let kind = metadata.file_type();
    let entry_type = if kind.is_fifo() {
        tar::EntryType::Fifo
    } else if kind.is_char_device() {
        tar::EntryType::Char
    } else if kind.is_block_device() {
        tar::EntryType::Block
    } else {
        return Ok(());
    };
    let mut header = tar::Header::new_gnu();
    header.set_metadata_in_mode(metadata, tar::HeaderMode::Complete);
    header.set_entry_type(entry_type);
    header.set_size(0);
    if entry_type != tar::EntryType::Fifo {
        header.set_device_major(rustix::fs::major(metadata.rdev()))?;
        header.set_device_minor(rustix::fs::minor(metadata.rdev()))?;
    }
    builder.append_data(&mut header, name, std::io::empty())
}

/// Reads the chunks the connection hands over, as the tar reader wants them.
struct ChunkReader {
    current: Bytes,
    chunks: mpsc::Receiver<Bytes>,
}

impl Read for ChunkReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let taken = out.len().min(self.current.len());
        out[..taken].copy_from_slice(&self.current.split_to(taken));
        Ok(taken)
    }
}

/// `write_archive`: the `Data` frames up to `End` unpacked into the directory; `Done`.
pub(crate) async fn write(frames: &mut Frames, path: &str) -> Reply {
    match write_inner(frames, path).await {
        Ok(()) => Reply::Done,
        Err(failure) => failure.reply(),
    }
}

async fn write_inner(frames: &mut Frames, path: &str) -> Result<(), Failure> {
    let dir = parse(path)?;
    tokio::fs::create_dir_all(host(&dir))
        .await
        .map_err(|e| Failure::io(&dir, &e))?;
    let (chunks, received) = mpsc::channel(DEPTH);
    let target = host(&dir).to_path_buf();
    let unpacking = tokio::task::spawn_blocking(move || {
        let mut archive = tar::Archive::new(ChunkReader {
            current: Bytes::new(),
            chunks: received,
        });
        archive.set_preserve_permissions(true);
        archive.set_overwrite(true);
        // `unpack` skips any entry that would leave the directory (the host's checked stream
        // fails before one reaches it), and sets directories' modes last, so a read-only
        // directory still receives its files.
        archive.unpack(&target)
    });
    let fed = async {
        // The unpacker stops at the archive's end marker, before the zero padding writers add
        // after it (and at its first error): the rest of the upload is still read, so the host
        // can finish sending and then read the reply.
        let mut unpacking = true;
        loop {
            match frames.next().await {
                Some(Ok(frame)) if frame.kind == FrameKind::Data => {
                    if unpacking && chunks.send(frame.payload).await.is_err() {
                        // The unpacker stopped: its result says why.
                        unpacking = false;
                    }
                }
                Some(Ok(frame)) if frame.kind == FrameKind::End => return Ok(()),
                Some(Ok(frame)) => {
                    return Err(Failure::invalid(format!(
                        "a {:?} frame inside an archive upload",
                        frame.kind
                    )))
                }
                Some(Err(err)) => return Err(Failure::invalid(err.to_string())),
                None => return Err(Failure::invalid("the upload ended before its end")),
            }
        }
    }
    .await;
    drop(chunks);
    let unpacked = unpacking
        .await
        .map_err(|e| Failure::invalid(format!("unpacking into {dir}: {e}")))?;
    fed?;
    unpacked.map_err(|e| Failure::invalid(format!("unpacking into {dir}: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount_point("/a\\040b"), "/a b");
        assert_eq!(unescape_mount_point("/plain"), "/plain");
        assert_eq!(unescape_mount_point("/odd\\x"), "/odd\\x");
    }

    #[test]
    fn kernel_mounts_stay_empty_and_links_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("proc/1")).unwrap();
        std::fs::write(root.join("proc/1/status"), "kernel view").unwrap();
        std::fs::write(root.join("data.txt"), "data").unwrap();
        std::os::unix::fs::symlink("/nowhere", root.join("dangling")).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(root.join("agent.sock")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let skipped = std::collections::HashSet::from([root.join("proc")]);
        let mut builder = tar::Builder::new(Vec::new());
        builder.follow_symlinks(false);
        append_tree(&mut builder, root, &skipped).unwrap();
        let bytes = builder.into_inner().unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["./", "dangling", "data.txt", "pipe", "proc"]);
    }
}
