//! `exec`: a command as a local process (`svc-process`), its output streamed to the host as it
//! comes, stdin, resizes and signals from the host applied while it runs. Stdin is written by a
//! task of its own, so a command that stops reading stdin while its output waits to be read can
//! never deadlock the connection. The host closing the connection kills the command.

use std::path::PathBuf;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use svc_agent_proto::{Control, ErrorKind, Frame, FrameKind, Reply, RunAs, WindowSize};
use svc_core::path::SandboxPath;
use svc_process::{Command, ProcessError, Signal, StdStream, TtySize};
use tokio::sync::mpsc;

use crate::serve::{fail, send, Frames, Replies};

/// An exec request.
pub(crate) struct Exec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub tty: Option<WindowSize>,
    pub stdin: bool,
    pub user: Option<RunAs>,
}

/// `HOME` and the default working directory: root's home when the image has one.
fn home() -> PathBuf {
    let root = PathBuf::from("/root");
    if root.is_dir() {
        root
    } else {
        PathBuf::from("/")
    }
}

fn size(window: WindowSize) -> TtySize {
    TtySize {
        cols: window.cols,
        rows: window.rows,
    }
}

fn error_kind(err: &ProcessError) -> ErrorKind {
    match err {
        ProcessError::Io { .. } => ErrorKind::Failed,
        _ => ErrorKind::Invalid,
    }
}

impl Exec {
    fn command(&self) -> Result<Command, String> {
        let home = match &self.user {
            Some(user) => PathBuf::from(
                SandboxPath::parse(&user.home)
                    .map_err(|e| e.to_string())?
                    .as_str(),
            ),
            None => home(),
        };
        let workdir = match &self.workdir {
            Some(dir) => {
                PathBuf::from(SandboxPath::parse(dir).map_err(|e| e.to_string())?.as_str())
            }
            None => home.clone(),
        };
        let env = svc_process::environment(&home, self.tty.is_some(), self.env.iter().cloned());
        Ok(Command {
            argv: self.argv.clone(),
            env,
            workdir,
            tty: self.tty.map(size),
            stdin: self.stdin,
            user: self.user.as_ref().map(|user| (user.uid, user.gid)),
        })
    }

    pub(crate) async fn run(self, mut replies: Replies, frames: Frames) {
        let command = match self.command() {
            Ok(command) => command,
            Err(message) => return fail(&mut replies, ErrorKind::Invalid, message).await,
        };
        if !command.workdir.is_dir() {
            let message = format!("{}: no such directory", command.workdir.display());
            return fail(&mut replies, ErrorKind::Invalid, message).await;
        }
        let mut process = match svc_process::spawn(&command) {
            Ok(process) => process,
            Err(err) => return fail(&mut replies, error_kind(&err), err.to_string()).await,
        };
        let pid = process.pid.unwrap_or_default();
        if !send(&mut replies, &Reply::Started { pid }).await {
            let _ = process.control.kill();
            return;
        }
        let host = tokio::spawn(from_host(frames, process.control.clone()));
        while let Some(chunk) = process.output.recv().await {
            let kind = match chunk.stream {
                StdStream::Stdout => FrameKind::Stdout,
                StdStream::Stderr => FrameKind::Stderr,
            };
            if replies.send(Frame::bytes(kind, chunk.data)).await.is_err() {
                // The host is gone: nobody will read the rest.
                let _ = process.control.kill();
                break;
            }
        }
        match process.exit.await {
            Ok(status) => {
                send(&mut replies, &Reply::Exit { code: status.code }).await;
            }
            Err(err) => fail(&mut replies, ErrorKind::Failed, err.to_string()).await,
        }
        host.abort();
    }
}

/// Applies what the host sends while the command runs; when the connection ends (closed or
/// broken), kills the command and everything it started.
async fn from_host(mut frames: Frames, control: std::sync::Arc<svc_process::Control>) {
    let (stdin, mut pending) = mpsc::channel::<Option<Bytes>>(8);
    let writer = {
        let control = control.clone();
        tokio::spawn(async move {
            while let Some(item) = pending.recv().await {
                match item {
                    // A command that closed its stdin drops the rest.
                    Some(data) => {
                        let _ = control.write_stdin(&data).await;
                    }
                    None => control.close_stdin().await,
                }
            }
        })
    };
    while let Some(Ok(frame)) = frames.next().await {
        match frame.kind {
            FrameKind::Data => {
                // The writer stops only when the command is over.
                let sent = stdin.send(Some(frame.payload)).await;
                if sent.is_err() {
                    break;
                }
            }
            FrameKind::End => {
                let _ = stdin.send(None).await;
            }
            FrameKind::Json => match frame.parse::<Control>() {
                Ok(Control::Resize(window)) => {
                    let _ = control.resize(size(window)).await;
                }
                Ok(Control::Signal { signal }) => {
                    if let Some(signal) = Signal::from_number(signal) {
                        let _ = control.signal(signal);
                    }
                }
                Err(_) => {}
            },
            _ => {}
        }
    }
    let _ = control.kill();
    writer.abort();
}
