//! Connections: each carries one operation, named by its first frame.

use std::path::Path;
use std::pin::Pin;
use std::time::Instant;

use futures::{Sink, SinkExt, Stream, StreamExt};
use svc_agent_proto::{ErrorKind, Frame, FrameCodec, Op, ProtocolError, Reply, Request, VERSION};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::Framed;

/// The agent's half of a connection: frames it sends.
pub(crate) type Replies = Pin<Box<dyn Sink<Frame, Error = ProtocolError> + Send>>;
/// The host's half: frames it receives.
pub(crate) type Frames = Pin<Box<dyn Stream<Item = Result<Frame, ProtocolError>> + Send>>;

/// Sends `reply`; a host that has gone away is not the agent's failure, so errors are dropped
/// (the operation notices on its next read or write).
pub(crate) async fn send(replies: &mut Replies, reply: &Reply) -> bool {
    match Frame::json(reply) {
        Ok(frame) => replies.send(frame).await.is_ok(),
        Err(_) => false,
    }
}

/// Sends an error reply.
pub(crate) async fn fail(replies: &mut Replies, kind: ErrorKind, message: impl Into<String>) {
    send(
        replies,
        &Reply::Error {
            kind,
            message: message.into(),
        },
    )
    .await;
}

/// Serves on a Unix socket at `path` until the process ends.
pub(crate) async fn unix(path: &Path) -> std::io::Result<()> {
    // A socket left by an earlier run would make bind fail.
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    let started = Instant::now();
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(connection(stream, started));
    }
}

/// Serves on vsock `port` (any CID) until the process ends.
pub(crate) async fn vsock(port: u32) -> std::io::Result<()> {
    let address = tokio_vsock::VsockAddr::new(tokio_vsock::VMADDR_CID_ANY, port);
    let listener = tokio_vsock::VsockListener::bind(address)?;
    eprintln!("{} {port}", svc_agent_proto::SERVING_LINE);
    let started = Instant::now();
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(connection(stream, started));
    }
}

fn unknown_exec(handle: &str) -> Reply {
    Reply::Error {
        kind: ErrorKind::NotFound,
        message: format!("no command with handle {handle}"),
    }
}

/// One connection: the request, then its operation.
async fn connection<S>(stream: S, started: Instant)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut framed = Framed::new(stream, FrameCodec);
    let Some(Ok(first)) = framed.next().await else {
        return;
    };
    if let Ok(Request {
        version: VERSION,
        op: Op::Connect { port },
    }) = first.parse()
    {
        // The one operation whose connection stops being framed once it is answered.
        crate::forward::serve(framed, port).await;
        return;
    }
    let (sink, stream) = framed.split();
    let mut replies: Replies = Box::pin(sink);
    let mut frames: Frames = Box::pin(stream);
    let request: Request = match first.parse() {
        Ok(request) => request,
        Err(err) => {
            // An unknown operation or a newer request shape: say which version this is.
            fail(
                &mut replies,
                ErrorKind::Invalid,
                format!("agent (protocol {VERSION}) cannot serve this request: {err}"),
            )
            .await;
            return;
        }
    };
    if request.version != VERSION {
        fail(
            &mut replies,
            ErrorKind::UnsupportedVersion,
            format!(
                "the agent speaks protocol {VERSION}, the request protocol {}",
                request.version
            ),
        )
        .await;
        return;
    }
    match request.op {
        Op::Hello => {
            send(
                &mut replies,
                &Reply::Hello {
                    version: VERSION,
                    agent_version: env!("CARGO_PKG_VERSION").to_owned(),
                    uptime_secs: started.elapsed().as_secs(),
                },
            )
            .await;
        }
        Op::Exec {
            argv,
            env,
            workdir,
            tty,
            stdin,
            user,
            detach,
        } => {
            let exec = crate::exec::Exec {
                argv,
                env,
                workdir,
                tty,
                stdin,
                user,
                detach,
            };
            exec.run(replies, frames).await;
        }
        Op::ExecStatus { handle } => {
            let reply = match crate::exec::detached::status(&handle) {
                Some(code) => Reply::ExecStatus {
                    running: code.is_none(),
                    code,
                },
                None => unknown_exec(&handle),
            };
            send(&mut replies, &reply).await;
        }
        Op::ExecSignal { handle, signal } => {
            let reply = match svc_process::Signal::from_number(signal) {
                None => Reply::Error {
                    kind: ErrorKind::Invalid,
                    message: format!("signal {signal} cannot be sent"),
                },
                Some(signal) if crate::exec::detached::signal(&handle, signal) => Reply::Done,
                Some(_) => unknown_exec(&handle),
            };
            send(&mut replies, &reply).await;
        }
        Op::Logs { lines } => {
            let lines = crate::container::tail(usize::try_from(lines).unwrap_or(usize::MAX));
            send(&mut replies, &Reply::Lines { lines }).await;
        }
        Op::ReadFile { path } => crate::files::read(&mut replies, &path).await,
        Op::ReadArchive { path } => crate::archive::read(&mut replies, &path).await,
        Op::WriteArchive { path } => {
            let reply = crate::archive::write(&mut frames, &path).await;
            send(&mut replies, &reply).await;
        }
        Op::WriteFile { path, mode } => {
            crate::files::write(&mut replies, &mut frames, &path, mode).await;
        }
        other => {
            let reply = crate::files::other(other).await;
            send(&mut replies, &reply).await;
        }
    }
}
