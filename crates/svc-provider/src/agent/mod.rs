//! The host side of the guest agent protocol (`svc-agent-proto`): what the microVM providers
//! (and the Docker fast path) call to run commands and move files inside a sandbox. Each
//! operation opens its own connection through a [`Connector`]: a plain Unix socket, or a VMM's
//! vsock socket after its `CONNECT <port>` handshake.
//!
//! Results come back as the provider types ([`ExecSession`], [`ByteStream`], [`FileInfo`]), and
//! the agent's error kinds as [`ProviderError`]s, so a provider built on the agent is a thin
//! layer over [`AgentClient`].

mod connect;
mod port;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{FutureExt, SinkExt, StreamExt};
use svc_agent_proto::{
    Control, ErrorKind, FileEntry, Frame, FrameCodec, FrameKind, Op, Reply, Request, RunAs,
    WindowSize,
};
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::codec::Framed;

pub use connect::{AgentStream, Connector, UnixConnector, VsockConnector};

use crate::{
    ByteStream, ExecChunk, ExecControl, ExecSession, ExecSpec, ExitStatus, FileInfo, ProviderError,
    Signal, StdStream, TtySize,
};

type Connection = Framed<AgentStream, FrameCodec>;

/// What the agent said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHello {
    /// The protocol version it speaks.
    pub version: u32,
    /// Its build.
    pub agent_version: String,
    /// Seconds since it started.
    pub uptime_secs: u64,
}

/// Talks to one sandbox's agent.
#[derive(Clone)]
pub struct AgentClient {
    connector: Arc<dyn Connector>,
    /// Whether commands outlive their connection (and so svc), found again by handle.
    detach: bool,
}

fn protocol(err: svc_agent_proto::ProtocolError) -> ProviderError {
    match err {
        svc_agent_proto::ProtocolError::Io(io) => {
            ProviderError::unavailable(format!("the guest agent is unreachable: {io}"))
        }
        other => ProviderError::caused("guest agent", other),
    }
}

/// The provider error an agent's error reply stands for.
fn agent_error(kind: ErrorKind, message: String, path: Option<&SandboxPath>) -> ProviderError {
    match (kind, path) {
        (ErrorKind::NotFound, Some(path)) => ProviderError::FileNotFound {
            path: path.to_string(),
        },
        (ErrorKind::NotFound | ErrorKind::Invalid, _) => ProviderError::InvalidRequest { message },
        (ErrorKind::UnsupportedVersion, _) => {
            ProviderError::failed(format!("guest agent of another version: {message}"))
        }
        (ErrorKind::Failed, _) => ProviderError::failed(message),
    }
}

fn file_info(entry: FileEntry) -> FileInfo {
    FileInfo {
        name: entry.name,
        path: entry.path,
        size: entry.size,
        is_dir: entry.is_dir,
        mod_time: chrono::DateTime::from_timestamp_nanos(entry.mtime_ns),
        mode: entry.mode,
    }
}

fn unexpected(reply: &Reply) -> ProviderError {
    ProviderError::failed(format!("guest agent answered out of turn: {reply:?}"))
}

impl AgentClient {
    /// A client reaching the agent through `connector`.
    pub fn new(connector: Arc<dyn Connector>) -> Self {
        AgentClient {
            connector,
            detach: false,
        }
    }

    /// A client whose commands outlive their connection, as the Docker engine's execs do: a
    /// dropped session leaves its command running, and [`AgentClient::exec_state`] finds it
    /// again by its [`ExecControl::handle`].
    #[must_use]
    pub fn detached(mut self) -> Self {
        self.detach = true;
        self
    }

    /// A connection with `op` sent.
    async fn open(&self, op: Op) -> Result<Connection, ProviderError> {
        let stream = self.connector.connect().await?;
        let mut connection = Framed::new(stream, FrameCodec);
        let request = Frame::json(&Request::new(op)).map_err(protocol)?;
        connection.send(request).await.map_err(protocol)?;
        Ok(connection)
    }

    /// The next JSON reply; a closed connection is the agent going away.
    async fn reply(connection: &mut Connection) -> Result<Reply, ProviderError> {
        loop {
            match connection.next().await {
                Some(Ok(frame)) if frame.kind == FrameKind::Json => {
                    return frame.parse().map_err(protocol)
                }
                Some(Ok(_)) => continue,
                Some(Err(err)) => return Err(protocol(err)),
                None => {
                    return Err(ProviderError::unavailable(
                        "the guest agent closed the connection",
                    ))
                }
            }
        }
    }

    /// One request answered by one reply.
    async fn call(&self, op: Op, path: Option<&SandboxPath>) -> Result<Reply, ProviderError> {
        let mut connection = self.open(op).await?;
        match Self::reply(&mut connection).await? {
            Reply::Error { kind, message } => Err(agent_error(kind, message, path)),
            reply => Ok(reply),
        }
    }

    /// A TCP connection to `port` on the guest's loopback (previews); nothing listening there
    /// is [`ProviderError::Unreachable`].
    pub async fn connect_port(&self, port: u16) -> Result<crate::PortStream, ProviderError> {
        let mut connection = self.open(Op::Connect { port }).await?;
        match Self::reply(&mut connection).await? {
            Reply::Done => {}
            Reply::Error {
                kind: ErrorKind::NotFound,
                message,
            } => return Err(ProviderError::Unreachable { message }),
            Reply::Error { kind, message } => return Err(agent_error(kind, message, None)),
            other => return Err(unexpected(&other)),
        }
        let parts = connection.into_parts();
        Ok(Box::new(port::Spliced {
            early: parts.read_buf,
            io: parts.io,
        }))
    }

    /// A connection with nothing asked on it: the agent waits for a request for as long as it
    /// lives, so the connection ends exactly when the agent does.
    pub async fn idle(&self) -> Result<AgentStream, ProviderError> {
        self.connector.connect().await
    }

    /// Version handshake and health.
    pub async fn hello(&self) -> Result<AgentHello, ProviderError> {
        match self.call(Op::Hello, None).await? {
            Reply::Hello {
                version,
                agent_version,
                uptime_secs,
            } => Ok(AgentHello {
                version,
                agent_version,
                uptime_secs,
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// Starts a command; see [`ExecSession`].
    pub async fn exec(&self, spec: ExecSpec) -> Result<ExecSession, ProviderError> {
        let op = Op::Exec {
            argv: spec.argv,
            env: spec.env.into_iter().collect(),
            workdir: spec.workdir.map(|w| w.to_string()),
            tty: spec.tty.map(|t| WindowSize {
                cols: t.cols,
                rows: t.rows,
            }),
            stdin: spec.stdin,
            user: spec.user.map(|user| RunAs {
                uid: user.uid,
                gid: user.gid,
                home: user.home.to_string(),
            }),
            detach: self.detach,
        };
        let mut connection = self.open(op).await?;
        let handle = match Self::reply(&mut connection).await? {
            Reply::Started { handle, .. } => handle,
            Reply::Error { kind, message } => return Err(agent_error(kind, message, None)),
            other => return Err(unexpected(&other)),
        };
        let (sink, frames) = connection.split();
        let (output, received) = mpsc::channel(8);
        let (exit_tx, exit_rx) = oneshot::channel();
        tokio::spawn(demultiplex(frames, output, exit_tx));
        let control = Arc::new(AgentControl {
            sink: Mutex::new(sink),
            tty: spec.tty.is_some(),
            detached: handle.map(|handle| DetachedControl {
                client: self.clone(),
                handle,
            }),
        });
        let exit = async move {
            exit_rx.await.unwrap_or_else(|_| {
                Err(ProviderError::unavailable(
                    "the guest agent closed the connection before the command ended",
                ))
            })
        }
        .boxed();
        Ok(ExecSession {
            output: Box::pin(ReceiverStream::new(received)),
            control,
            exit,
        })
    }

    /// A detached command's state by its handle, and a control that can still signal and kill
    /// it while it runs (its stdin went with its connection).
    pub async fn exec_state(
        &self,
        handle: &str,
    ) -> Result<(crate::ExecState, Option<Arc<dyn ExecControl>>), ProviderError> {
        let op = Op::ExecStatus {
            handle: handle.to_owned(),
        };
        match self.call(op, None).await {
            Ok(Reply::ExecStatus { running: true, .. }) => {
                let control: Arc<dyn ExecControl> = Arc::new(DetachedControl {
                    client: self.clone(),
                    handle: handle.to_owned(),
                });
                Ok((crate::ExecState::Running, Some(control)))
            }
            Ok(Reply::ExecStatus { code, .. }) => Ok((crate::ExecState::Exited(code), None)),
            Ok(other) => Err(unexpected(&other)),
            // Forgotten, or an agent that started again.
            Err(ProviderError::InvalidRequest { .. }) => Ok((crate::ExecState::Gone, None)),
            Err(err) => Err(err),
        }
    }

    /// The agent's log, newest last (container mode: the commands it ran and how they ended).
    pub async fn logs(&self, lines: usize) -> Result<Vec<String>, ProviderError> {
        let op = Op::Logs {
            lines: u32::try_from(lines).unwrap_or(u32::MAX),
        };
        match self.call(op, None).await? {
            Reply::Lines { lines } => Ok(lines),
            other => Err(unexpected(&other)),
        }
    }

    /// Writes a file (creating parent directories) with `mode`, streaming `content`.
    pub async fn write_file(
        &self,
        path: &NonRootPath,
        mode: u32,
        content: ByteStream,
    ) -> Result<(), ProviderError> {
        let op = Op::WriteFile {
            path: path.to_string(),
            mode,
        };
        self.upload(op, content, path).await
    }

    /// Extracts a tar archive into directory `dir` (created when missing), streaming it; the
    /// agent skips entries that would leave `dir` (the checked stream fails before them).
    pub async fn write_archive(
        &self,
        dir: &SandboxPath,
        archive: ByteStream,
    ) -> Result<(), ProviderError> {
        let op = Op::WriteArchive {
            path: dir.to_string(),
        };
        self.upload(op, archive, dir).await
    }

    /// Sends `op` and `content` in `Data` frames up to `End`; the agent answers `Done`.
    async fn upload(
        &self,
        op: Op,
        mut content: ByteStream,
        path: &SandboxPath,
    ) -> Result<(), ProviderError> {
        let mut connection = self.open(op).await?;
        while let Some(chunk) = content.next().await {
            let mut chunk = match chunk {
                Ok(chunk) => chunk,
                Err(err) => {
                    Self::abort_upload(&mut connection).await;
                    return Err(err);
                }
            };
            while !chunk.is_empty() {
                let piece = chunk.split_to(chunk.len().min(svc_agent_proto::MAX_CHUNK));
                let frame = Frame::bytes(FrameKind::Data, piece);
                if let Err(err) = connection.send(frame).await {
                    return Self::answer_after(&mut connection, err, path).await;
                }
            }
        }
        if let Err(err) = connection.send(Frame::end()).await {
            return Self::answer_after(&mut connection, err, path).await;
        }
        match Self::reply(&mut connection).await? {
            Reply::Done => Ok(()),
            Reply::Error { kind, message } => Err(agent_error(kind, message, Some(path))),
            other => Err(unexpected(&other)),
        }
    }

    /// How an upload went when sending to the agent failed: the agent may have answered and
    /// closed already (refused the upload, or an older agent done at the archive's end marker),
    /// and then its reply says how, whichever frame (data or the end) met the closed socket.
    async fn answer_after(
        connection: &mut Connection,
        err: svc_agent_proto::ProtocolError,
        path: &SandboxPath,
    ) -> Result<(), ProviderError> {
        match Self::reply(connection).await {
            Ok(Reply::Error { kind, message }) => Err(agent_error(kind, message, Some(path))),
            Ok(Reply::Done) => Ok(()),
            _ => Err(protocol(err)),
        }
    }

    /// Ends an upload whose content failed: any frame but `Data` or `End` makes the agent drop
    /// what it received (a file's temporary copy) and answer, and the answer is awaited, so
    /// nothing of the upload is left when the caller hears of the failure.
    async fn abort_upload(connection: &mut Connection) {
        let abort = Frame::json(&serde_json::json!({"abort": "the upload's content failed"}));
        let answered = async {
            connection
                .send(abort.map_err(protocol)?)
                .await
                .map_err(protocol)?;
            Self::reply(connection).await
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), answered).await;
    }

    /// Streams a file's bytes.
    pub async fn read_file(&self, path: &SandboxPath) -> Result<ByteStream, ProviderError> {
        let op = Op::ReadFile {
            path: path.to_string(),
        };
        self.download(op, path).await
    }

    /// Streams directory `dir` as a tar archive (names `./`, then `a`, `sub`, `sub/b`, ...; symlinks stored).
    pub async fn read_archive(&self, dir: &SandboxPath) -> Result<ByteStream, ProviderError> {
        let op = Op::ReadArchive {
            path: dir.to_string(),
        };
        self.download(op, dir).await
    }

    /// Sends `op`, whose answer is `File` or `Archive` and then `FileData` frames up to `End`,
    /// and streams those bytes.
    async fn download(&self, op: Op, path: &SandboxPath) -> Result<ByteStream, ProviderError> {
        let mut connection = self.open(op).await?;
        match Self::reply(&mut connection).await? {
            Reply::File { .. } | Reply::Archive => {}
            Reply::Error { kind, message } => return Err(agent_error(kind, message, Some(path))),
            other => return Err(unexpected(&other)),
        }
        let path = path.clone();
        let stream = futures::stream::unfold(Some(connection), move |state| {
            let path = path.clone();
            async move {
                let mut connection = state?;
                match connection.next().await {
                    Some(Ok(frame)) => match frame.kind {
                        FrameKind::FileData => Some((Ok(frame.payload), Some(connection))),
                        FrameKind::End => None,
                        FrameKind::Json => {
                            let err = match frame.parse::<Reply>() {
                                Ok(Reply::Error { kind, message }) => {
                                    agent_error(kind, message, Some(&path))
                                }
                                Ok(other) => unexpected(&other),
                                Err(err) => protocol(err),
                            };
                            Some((Err(err), None))
                        }
                        other => Some((
                            Err(ProviderError::failed(format!(
                                "guest agent sent a {other:?} frame inside a file"
                            ))),
                            None,
                        )),
                    },
                    Some(Err(err)) => Some((Err(protocol(err)), None)),
                    None => Some((
                        Err(ProviderError::unavailable(
                            "the guest agent closed the connection mid-file",
                        )),
                        None,
                    )),
                }
            }
        });
        Ok(Box::pin(stream))
    }

    /// Deletes a file, or a directory (non-empty ones only when `recursive`).
    pub async fn delete_file(
        &self,
        path: &NonRootPath,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        let op = Op::Delete {
            path: path.to_string(),
            recursive,
        };
        self.done(op, path).await
    }

    /// Moves a file or directory, replacing an existing destination file.
    pub async fn move_path(
        &self,
        from: &NonRootPath,
        to: &NonRootPath,
    ) -> Result<(), ProviderError> {
        let op = Op::Move {
            from: from.to_string(),
            to: to.to_string(),
        };
        self.done(op, from).await
    }

    /// Changes permission bits.
    pub async fn chmod(&self, path: &SandboxPath, mode: u32) -> Result<(), ProviderError> {
        let op = Op::Chmod {
            path: path.to_string(),
            mode,
        };
        self.done(op, path).await
    }

    async fn done(&self, op: Op, path: &SandboxPath) -> Result<(), ProviderError> {
        match self.call(op, Some(path)).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Lists a directory, sorted by name.
    pub async fn list_dir(&self, path: &SandboxPath) -> Result<Vec<FileInfo>, ProviderError> {
        let op = Op::ListDir {
            path: path.to_string(),
        };
        match self.call(op, Some(path)).await? {
            Reply::Entries { entries } => Ok(entries.into_iter().map(file_info).collect()),
            other => Err(unexpected(&other)),
        }
    }

    /// Describes one path.
    pub async fn stat(&self, path: &SandboxPath) -> Result<FileInfo, ProviderError> {
        let op = Op::Stat {
            path: path.to_string(),
        };
        match self.call(op, Some(path)).await? {
            Reply::Info { entry } => Ok(file_info(entry)),
            other => Err(unexpected(&other)),
        }
    }

    /// Absolute paths matching an absolute glob, sorted.
    pub async fn glob(&self, pattern: &SandboxGlob) -> Result<Vec<String>, ProviderError> {
        let op = Op::Glob {
            pattern: pattern.pattern().to_owned(),
        };
        match self.call(op, None).await? {
            Reply::Paths { paths } => Ok(paths),
            other => Err(unexpected(&other)),
        }
    }
}

/// Routes an exec's frames: output chunks to `output` (a slow reader slows the agent, never
/// memory), the ending to `exit`. When the session is dropped without its end being awaited,
/// the connection is let go, and the agent kills the command.
async fn demultiplex(
    mut frames: SplitStream<Connection>,
    output: mpsc::Sender<Result<ExecChunk, ProviderError>>,
    mut exit: oneshot::Sender<Result<ExitStatus, ProviderError>>,
) {
    let ending = loop {
        let frame = tokio::select! {
            frame = frames.next() => frame,
            () = abandoned(&output, &mut exit) => return,
        };
        let Some(frame) = frame else {
            break Err(ProviderError::unavailable(
                "the guest agent closed the connection before the command ended",
            ));
        };
        let frame = match frame {
            Ok(frame) => frame,
            Err(err) => break Err(protocol(err)),
        };
        let stream = match frame.kind {
            FrameKind::Stdout => StdStream::Stdout,
            FrameKind::Stderr => StdStream::Stderr,
            FrameKind::Json => match frame.parse::<Reply>() {
                Ok(Reply::Exit { code }) => break Ok(ExitStatus { code }),
                Ok(Reply::Error { kind, message }) => break Err(agent_error(kind, message, None)),
                Ok(other) => break Err(unexpected(&other)),
                Err(err) => break Err(protocol(err)),
            },
            _ => continue,
        };
        let chunk = ExecChunk {
            stream,
            data: frame.payload,
        };
        // A reader that stopped listening may still await the exit status.
        let _ = output.send(Ok(chunk)).await;
    };
    drop(output);
    let _ = exit.send(ending);
}

/// Resolves once nobody reads the output or awaits the exit any more.
async fn abandoned(
    output: &mpsc::Sender<Result<ExecChunk, ProviderError>>,
    exit: &mut oneshot::Sender<Result<ExitStatus, ProviderError>>,
) {
    output.closed().await;
    exit.closed().await;
}

/// Stdin, resizes and signals of an exec, sent on its connection.
struct AgentControl {
    sink: Mutex<SplitSink<Connection, Frame>>,
    tty: bool,
    /// A detached command's own handle.
    detached: Option<DetachedControl>,
}

impl AgentControl {
    async fn send(&self, frame: Frame) -> Result<(), ProviderError> {
        self.sink.lock().await.send(frame).await.map_err(protocol)
    }

    async fn control(&self, control: &Control) -> Result<(), ProviderError> {
        self.send(Frame::json(control).map_err(protocol)?).await
    }
}

#[async_trait]
impl ExecControl for AgentControl {
    async fn write_stdin(&self, data: Bytes) -> Result<(), ProviderError> {
        let mut data = data;
        while !data.is_empty() {
            let piece = data.split_to(data.len().min(svc_agent_proto::MAX_CHUNK));
            self.send(Frame::bytes(FrameKind::Data, piece)).await?;
        }
        Ok(())
    }

    async fn close_stdin(&self) -> Result<(), ProviderError> {
        // A connection that is already gone closed the command's stdin with it: the agent
        // closes a command's stdin (or kills it) when its host goes, and a command that ended
        // after reading what it needed, just before this end, ended its connection too.
        if let Err(err) = self.send(Frame::end()).await {
            tracing::debug!(error = %err, "closing stdin on a connection that has ended");
        }
        Ok(())
    }

    async fn resize(&self, size: TtySize) -> Result<(), ProviderError> {
        if !self.tty {
            return Err(ProviderError::InvalidRequest {
                message: "resize needs a command started with tty: true".into(),
            });
        }
        self.control(&Control::Resize(WindowSize {
            cols: size.cols,
            rows: size.rows,
        }))
        .await
    }

    async fn signal(&self, signal: Signal) -> Result<(), ProviderError> {
        self.control(&Control::Signal {
            signal: signal.number(),
        })
        .await
    }

    async fn kill(&self) -> Result<(), ProviderError> {
        // The agent kills the whole group. The connection stays open for the exit status: a
        // VMM's vsock may turn a half-close into a full one.
        self.signal(Signal::Kill).await
    }

    fn handle(&self) -> Option<String> {
        self.detached.as_ref().map(|d| d.handle.clone())
    }
}

/// A detached command found again by its handle: signals and kills go by handle, on a
/// connection of their own.
#[derive(Clone)]
struct DetachedControl {
    client: AgentClient,
    handle: String,
}

#[async_trait]
impl ExecControl for DetachedControl {
    async fn write_stdin(&self, _data: Bytes) -> Result<(), ProviderError> {
        Err(ProviderError::InvalidRequest {
            message: "the command's stdin ended with its connection".into(),
        })
    }

    async fn close_stdin(&self) -> Result<(), ProviderError> {
        // Closed already, when its connection ended.
        Ok(())
    }

    async fn resize(&self, _size: TtySize) -> Result<(), ProviderError> {
        Err(ProviderError::InvalidRequest {
            message: "the command's terminal ended with its connection".into(),
        })
    }

    async fn signal(&self, signal: Signal) -> Result<(), ProviderError> {
        let op = Op::ExecSignal {
            handle: self.handle.clone(),
            signal: signal.number(),
        };
        match self.client.call(op, None).await? {
            Reply::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    async fn kill(&self) -> Result<(), ProviderError> {
        self.signal(Signal::Kill).await
    }

    fn handle(&self) -> Option<String> {
        Some(self.handle.clone())
    }
}
