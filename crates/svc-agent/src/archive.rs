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
        builder.append_dir_all(".", &source)?;
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
