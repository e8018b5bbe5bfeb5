//! The wire protocol between svc (the host) and `svc-agent` (inside a microVM, or a container's
//! init): what the agent serves is exactly what the Provider trait needs of a sandbox.
//!
//! One operation per connection. The host opens a stream (vsock through the VMM's Unix socket
//! after `CONNECT <port>`, or a Unix socket for containers), sends one [`Request`] frame, and the
//! exchange that follows belongs to that operation; then either side closes. A connection per
//! operation keeps a slow file transfer from ever delaying an exec.
//!
//! Every frame is `u32` big-endian length (of what follows), one [`FrameKind`] byte, and the
//! payload; a frame longer than [`MAX_FRAME`] is refused by both sides, so a peer can never make
//! the other buffer more than that. JSON frames carry [`Request`], [`Reply`] and [`Control`];
//! byte frames carry stdin, stdout, stderr and file content, never buffered whole.
//!
//! Every request names the protocol [`VERSION`] it speaks; an agent of another major version
//! answers [`ErrorKind::UnsupportedVersion`] (see VERSIONING.md).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, Encoder};

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// The vsock port the agent listens on inside a guest.
pub const AGENT_PORT: u32 = 1024;

/// What the agent prints on the guest's console (followed by the port) once it accepts vsock
/// connections. Hosts wait for it before their first `CONNECT`: one sent while the guest's vsock
/// driver is still loading can leave a vsock backend never answering that guest.
pub const SERVING_LINE: &str = "svc-agent: serving on vsock port";

/// The largest frame (kind byte and payload), either way.
pub const MAX_FRAME: usize = 1024 * 1024;

/// The largest byte payload a sender puts in one frame.
pub const MAX_CHUNK: usize = 256 * 1024;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A JSON [`Request`], [`Reply`] or [`Control`].
    Json = 1,
    /// Bytes for the agent: stdin of an exec, content of a file write.
    Data = 2,
    /// A command's standard output (and a TTY's merged output).
    Stdout = 3,
    /// A command's standard error.
    Stderr = 4,
    /// The end of the byte stream in this direction (stdin EOF, end of file content).
    End = 5,
    /// Bytes for the host: content of a file read.
    FileData = 6,
}

impl FrameKind {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => FrameKind::Json,
            2 => FrameKind::Data,
            3 => FrameKind::Stdout,
            4 => FrameKind::Stderr,
            5 => FrameKind::End,
            6 => FrameKind::FileData,
            _ => return None,
        })
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What it carries.
    pub kind: FrameKind,
    /// The payload.
    pub payload: Bytes,
}

impl Frame {
    /// A JSON frame holding `message`.
    pub fn json<T: Serialize>(message: &T) -> Result<Frame, ProtocolError> {
        let payload = serde_json::to_vec(message).map_err(ProtocolError::Encode)?;
        Ok(Frame {
            kind: FrameKind::Json,
            payload: Bytes::from(payload),
        })
    }

    /// A byte frame of `kind`.
    pub fn bytes(kind: FrameKind, payload: Bytes) -> Frame {
        Frame { kind, payload }
    }

    /// The end of this direction's byte stream.
    pub fn end() -> Frame {
        Frame {
            kind: FrameKind::End,
            payload: Bytes::new(),
        }
    }

    /// The JSON message this frame holds.
    pub fn parse<T: for<'de> Deserialize<'de>>(&self) -> Result<T, ProtocolError> {
        if self.kind != FrameKind::Json {
            return Err(ProtocolError::Unexpected(format!(
                "a {:?} frame where a JSON message belongs",
                self.kind
            )));
        }
        serde_json::from_slice(&self.payload).map_err(ProtocolError::Decode)
    }
}

/// A protocol violation or transport failure.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The transport failed.
    #[error("agent connection: {0}")]
    Io(#[from] std::io::Error),
    /// A frame over [`MAX_FRAME`].
    #[error("agent frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    /// A frame of no known kind.
    #[error("agent frame of unknown kind {0}")]
    UnknownKind(u8),
    /// A frame with no kind byte.
    #[error("empty agent frame")]
    Empty,
    /// A JSON message that does not decode.
    #[error("agent message does not decode: {0}")]
    Decode(serde_json::Error),
    /// A message that does not encode.
    #[error("agent message does not encode: {0}")]
    Encode(serde_json::Error),
    /// A frame that does not belong where it came.
    #[error("agent protocol: {0}")]
    Unexpected(String),
}

/// Frames over any byte stream (`tokio_util::codec::Framed`).
#[derive(Debug, Default, Clone, Copy)]
pub struct FrameCodec;

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = ProtocolError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        if src.len() < 4 {
            return Ok(None);
        }
        let length = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
        if length > MAX_FRAME {
            return Err(ProtocolError::TooLarge(length));
        }
        if length == 0 {
            return Err(ProtocolError::Empty);
        }
        if src.len() < 4 + length {
            src.reserve(4 + length - src.len());
            return Ok(None);
        }
        src.advance(4);
        let kind_byte = src.get_u8();
        let kind = FrameKind::from_byte(kind_byte).ok_or(ProtocolError::UnknownKind(kind_byte))?;
        let payload = src.split_to(length - 1).freeze();
        Ok(Some(Frame { kind, payload }))
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = ProtocolError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let length = frame.payload.len() + 1;
        if length > MAX_FRAME {
            return Err(ProtocolError::TooLarge(length));
        }
        dst.reserve(4 + length);
        // `length` is at most MAX_FRAME, so it fits.
        dst.put_u32(u32::try_from(length).map_err(|_| ProtocolError::TooLarge(length))?);
        dst.put_u8(frame.kind as u8);
        dst.extend_from_slice(&frame.payload);
        Ok(())
    }
}

/// Terminal size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_false(value: &bool) -> bool {
    !*value
}

/// The first frame of every connection, host to agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The protocol version the host speaks.
    pub version: u32,
    /// The operation.
    #[serde(flatten)]
    pub op: Op,
}

impl Request {
    /// `op` at this build's [`VERSION`].
    pub fn new(op: Op) -> Self {
        Request {
            version: VERSION,
            op,
        }
    }
}

/// The user an exec runs as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    /// User ID.
    pub uid: u32,
    /// Group ID.
    pub gid: u32,
    /// `HOME`, an absolute path in the guest.
    pub home: String,
}

/// The operations. Paths are absolute paths inside the guest, already validated by the host;
/// the agent refuses relative ones and `..` components all the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Version handshake and health: answered with [`Reply::Hello`].
    Hello,
    /// Runs a command. The agent answers [`Reply::Started`], then streams `Stdout`/`Stderr`
    /// frames, then [`Reply::Exit`]. Meanwhile the host may send `Data` (stdin), `End`
    /// (stdin EOF) and [`Control`] frames. Closing the connection kills the command, unless
    /// `detach`.
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
        /// Environment on top of the agent's defaults (`PATH`, `HOME`, `LANG`).
        env: Vec<(String, String)>,
        /// Working directory; the agent's default (`/root`, else `/`) when absent.
        workdir: Option<String>,
        /// Run under a pseudo-terminal of this size.
        tty: Option<WindowSize>,
        /// Whether stdin is sent; otherwise it is `/dev/null`.
        stdin: bool,
        /// Run as this user (pool workspaces) instead of root, with its `HOME`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<RunAs>,
        /// The command outlives its connection: its output is then dropped, and its state is
        /// kept under the [`Reply::Started`] `handle` for [`Op::ExecStatus`] and
        /// [`Op::ExecSignal`] (a host that restarts finds it again).
        #[serde(default, skip_serializing_if = "is_false")]
        detach: bool,
    },
    /// A detached command's state: [`Reply::ExecStatus`]; one the agent does not know (any
    /// more) is [`ErrorKind::NotFound`].
    ExecStatus {
        /// The handle its [`Reply::Started`] carried.
        handle: String,
    },
    /// A signal to a detached command's process group: [`Reply::Done`] (also when it has
    /// ended already).
    ExecSignal {
        /// The handle its [`Reply::Started`] carried.
        handle: String,
        /// The signal number.
        signal: i32,
    },
    /// The agent's log, newest last: [`Reply::Lines`]. It logs the commands it ran and how
    /// they ended.
    Logs {
        /// At most this many lines.
        lines: u32,
    },
    /// Streams a file: [`Reply::File`], `FileData` frames, `End`.
    ReadFile {
        /// The file.
        path: String,
    },
    /// Writes a file (creating parents) from the `Data` frames that follow, up to `End`; then
    /// [`Reply::Done`].
    WriteFile {
        /// The file.
        path: String,
        /// Permission bits.
        mode: u32,
    },
    /// Deletes a file or directory (non-empty ones only when `recursive`): [`Reply::Done`].
    Delete {
        /// What to delete.
        path: String,
        /// Whether a non-empty directory goes with its content.
        recursive: bool,
    },
    /// Lists a directory, sorted by name: [`Reply::Entries`].
    ListDir {
        /// The directory.
        path: String,
    },
    /// Moves a path, replacing a destination file: [`Reply::Done`].
    Move {
        /// Source.
        from: String,
        /// Destination.
        to: String,
    },
    /// Changes permission bits: [`Reply::Done`].
    Chmod {
        /// The path.
        path: String,
        /// Permission bits.
        mode: u32,
    },
    /// Describes one path: [`Reply::Info`].
    Stat {
        /// The path.
        path: String,
    },
    /// Absolute paths matching an absolute glob, sorted: [`Reply::Paths`].
    Glob {
        /// The pattern (`*`, `?`, `[..]`, `**`).
        pattern: String,
    },
    /// Streams directory `path` as a tar archive, names relative to it (`./`, then `a`, `sub`, `sub/b`, ...),
    /// symlinks stored as links: [`Reply::Archive`], `FileData` frames, `End`.
    ReadArchive {
        /// The directory.
        path: String,
    },
    /// Extracts the tar archive in the `Data` frames that follow, up to `End`, into directory
    /// `path` (created when missing); an entry that would leave it is skipped: [`Reply::Done`].
    WriteArchive {
        /// The directory.
        path: String,
    },
    /// Opens a TCP connection to `port` on the guest's loopback (previews): [`Reply::Done`],
    /// after which the connection carries that TCP stream's bytes both ways, unframed, until
    /// either side closes. Nothing listening there is [`ErrorKind::NotFound`].
    Connect {
        /// The TCP port inside the guest.
        port: u16,
    },
}

/// What the host may send during an exec, besides stdin bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "control", rename_all = "snake_case")]
pub enum Control {
    /// New terminal size.
    Resize(WindowSize),
    /// A signal to the command's process group, by number (1, 2, 9, 15).
    Signal {
        /// The signal number.
        signal: i32,
    },
}

/// One file or directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Last path component (`/` for the root).
    pub name: String,
    /// Absolute path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// True for directories.
    pub is_dir: bool,
    /// Last modification, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// Permission bits.
    pub mode: u32,
}

/// Why an operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The path does not exist.
    NotFound,
    /// The request cannot be honoured as asked (not a directory, not empty, bad path,
    /// program missing, stdin closed, ...).
    Invalid,
    /// The request's protocol version is not one this agent speaks.
    UnsupportedVersion,
    /// Anything else.
    Failed,
}

/// Agent to host JSON messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Answer to [`Op::Hello`].
    Hello {
        /// The protocol version the agent speaks.
        version: u32,
        /// The agent's build (`svc-agent` crate version).
        agent_version: String,
        /// Seconds since the agent started.
        uptime_secs: u64,
    },
    /// The command runs.
    Started {
        /// Its process ID inside the guest.
        pid: u32,
        /// A detached command's handle.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handle: Option<String>,
    },
    /// A detached command's state.
    ExecStatus {
        /// Whether it still runs.
        running: bool,
        /// Its exit code once it has ended.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
    },
    /// Log lines, oldest first.
    Lines {
        /// The lines, without their newlines.
        lines: Vec<String>,
    },
    /// The command ended; no output frame follows.
    Exit {
        /// Its exit code, 128+N when signal N ended it.
        code: i32,
    },
    /// A file read begins; `FileData` frames and `End` follow.
    File {
        /// Its size when opened.
        size: u64,
    },
    /// A directory archive begins; `FileData` frames and `End` follow.
    Archive,
    /// The operation succeeded.
    Done,
    /// One path's description.
    Info {
        /// The entry.
        entry: FileEntry,
    },
    /// A directory's entries, sorted by name.
    Entries {
        /// The entries.
        entries: Vec<FileEntry>,
    },
    /// Matching paths, sorted.
    Paths {
        /// The paths.
        paths: Vec<String>,
    },
    /// The operation failed (at any point of its exchange; the connection then closes).
    Error {
        /// Why.
        kind: ErrorKind,
        /// The message for the caller.
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_split_anywhere() {
        let frames = vec![
            Frame::json(&Request::new(Op::Hello)).unwrap(),
            Frame::bytes(FrameKind::Stdout, Bytes::from_static(b"hello\n")),
            Frame::end(),
        ];
        let mut wire = BytesMut::new();
        for frame in frames.clone() {
            FrameCodec.encode(frame, &mut wire).unwrap();
        }
        // Fed one byte at a time, the decoder yields the same frames.
        let mut decoded = Vec::new();
        let mut buffer = BytesMut::new();
        for byte in wire {
            buffer.put_u8(byte);
            while let Some(frame) = FrameCodec.decode(&mut buffer).unwrap() {
                decoded.push(frame);
            }
        }
        assert_eq!(decoded, frames);
    }

    #[test]
    fn oversized_unknown_and_empty_frames_are_refused() {
        let mut huge = BytesMut::new();
        huge.put_u32(u32::try_from(MAX_FRAME + 1).unwrap());
        assert!(matches!(
            FrameCodec.decode(&mut huge),
            Err(ProtocolError::TooLarge(_))
        ));
        let mut unknown = BytesMut::from(&[0, 0, 0, 1, 99][..]);
        assert!(matches!(
            FrameCodec.decode(&mut unknown),
            Err(ProtocolError::UnknownKind(99))
        ));
        let mut empty = BytesMut::from(&[0, 0, 0, 0][..]);
        assert!(matches!(
            FrameCodec.decode(&mut empty),
            Err(ProtocolError::Empty)
        ));
        let too_big = Frame::bytes(FrameKind::Data, Bytes::from(vec![0; MAX_FRAME]));
        assert!(FrameCodec.encode(too_big, &mut BytesMut::new()).is_err());
    }

    #[test]
    fn a_byte_frame_is_not_a_message() {
        let frame = Frame::bytes(FrameKind::Data, Bytes::from_static(b"{}"));
        assert!(frame.parse::<Reply>().is_err());
    }
}
