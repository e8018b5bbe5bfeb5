//! Exec on the mock provider: a host process in the sandbox directory, in its own process
//! group (so deadlines and signals reach everything it started), with piped stdout and stderr,
//! or under a real pseudo-terminal for `tty`.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use rustix::process::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Mutex};
use tokio_stream::wrappers::ReceiverStream;

use crate::{
    ExecChunk, ExecControl, ExecSession, ExecSpec, ExitStatus, ProviderError, Signal, StdStream,
    TtySize,
};

const READ_CHUNK: usize = 64 * 1024;
/// Chunks in flight between a reader and the consumer; bounds memory under a slow consumer.
const CHANNEL_DEPTH: usize = 8;
/// After the command exits, output still arriving is read; a pipe that stays silent this long
/// (held open by a background process) is let go.
const DRAIN_IDLE: Duration = Duration::from_millis(200);
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

enum Input {
    Pipe(tokio::process::ChildStdin),
    Pty(pty_process::OwnedWritePty),
}

struct MockControl {
    input: Mutex<Option<Input>>,
    /// The process group, which is also the session for TTY commands.
    group: Option<Pid>,
}

impl MockControl {
    fn send(&self, signal: Signal) -> Result<(), ProviderError> {
        match self.group {
            Some(group) => crate::process::signal_group(group, signal),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl ExecControl for MockControl {
    async fn write_stdin(&self, data: Bytes) -> Result<(), ProviderError> {
        let mut input = self.input.lock().await;
        let result = match input.as_mut() {
            None => {
                return Err(ProviderError::InvalidRequest {
                    message: "stdin is closed".into(),
                })
            }
            Some(Input::Pipe(pipe)) => pipe.write_all(&data).await,
            Some(Input::Pty(pty)) => pty.write_all(&data).await,
        };
        result.map_err(|e| ProviderError::failed(format!("writing stdin: {e}")))
    }

    async fn close_stdin(&self) -> Result<(), ProviderError> {
        let mut input = self.input.lock().await;
        match input.take() {
            // A terminal has no EOF of its own: the line discipline turns ^D into one.
            Some(Input::Pty(mut pty)) => {
                let _ = pty.write_all(&[0x04]).await;
                *input = Some(Input::Pty(pty));
            }
            Some(Input::Pipe(mut pipe)) => {
                let _ = pipe.shutdown().await;
            }
            None => {}
        }
        Ok(())
    }

    async fn resize(&self, size: TtySize) -> Result<(), ProviderError> {
        let input = self.input.lock().await;
        match input.as_ref() {
            Some(Input::Pty(pty)) => pty
                .resize(pty_process::Size::new(size.rows, size.cols))
                .map_err(|e| ProviderError::failed(format!("resizing the terminal: {e}"))),
            _ => Err(ProviderError::InvalidRequest {
                message: "resize needs a command started with tty: true".into(),
            }),
        }
    }

    async fn signal(&self, signal: Signal) -> Result<(), ProviderError> {
        self.send(signal)
    }

    async fn kill(&self) -> Result<(), ProviderError> {
        self.send(Signal::Kill)
    }
}

fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1);
    ExitStatus { code }
}

/// Reads `reader` into chunks of `stream` until EOF, an error, or — once `exited` fires — a
/// silence of [`DRAIN_IDLE`].
async fn pump(
    mut reader: impl AsyncRead + Unpin,
    stream: StdStream,
    sender: mpsc::Sender<Result<ExecChunk, ProviderError>>,
    mut exited: tokio::sync::watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        let read = if *exited.borrow() {
            match tokio::time::timeout(DRAIN_IDLE, reader.read(&mut buffer)).await {
                Ok(read) => read,
                Err(_) => return,
            }
        } else {
            tokio::select! {
                read = reader.read(&mut buffer) => read,
                _ = exited.changed() => continue,
            }
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let chunk = ExecChunk {
                    stream,
                    data: Bytes::copy_from_slice(&buffer[..n]),
                };
                if sender.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn environment(home: &Path, spec: &ExecSpec) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_owned(), PATH.to_owned()),
        ("HOME".to_owned(), home.display().to_string()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ];
    if spec.tty.is_some() {
        env.push(("TERM".to_owned(), "xterm-256color".to_owned()));
    }
    env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

fn spawn_error(program: &str, err: &std::io::Error) -> ProviderError {
    if err.kind() == std::io::ErrorKind::NotFound {
        ProviderError::InvalidRequest {
            message: format!("could not run {program:?}: no such file or directory"),
        }
    } else {
        ProviderError::failed(format!("could not run {program:?}: {err}"))
    }
}

/// Starts `spec` with `workdir` (a host directory inside the sandbox) as working directory and
/// `home` as `HOME`.
pub(super) fn start(
    home: &Path,
    workdir: &Path,
    spec: &ExecSpec,
) -> Result<ExecSession, ProviderError> {
    let program = spec
        .argv
        .first()
        .ok_or_else(|| ProviderError::InvalidRequest {
            message: "command is empty".into(),
        })?;
    let env = environment(home, spec);
    let (sender, receiver) = mpsc::channel(CHANNEL_DEPTH);
    let (exited_tx, exited_rx) = tokio::sync::watch::channel(false);
    let (child, input) = if let Some(size) = spec.tty {
        let (pty, pts) = pty_process::open()
            .map_err(|e| ProviderError::failed(format!("opening a terminal: {e}")))?;
        pty.resize(pty_process::Size::new(size.rows, size.cols))
            .map_err(|e| ProviderError::failed(format!("sizing the terminal: {e}")))?;
        let child = pty_process::Command::new(program)
            .args(&spec.argv[1..])
            .env_clear()
            .envs(env)
            .current_dir(workdir)
            .spawn(pts)
            .map_err(|e| match e {
                pty_process::Error::Io(io) => spawn_error(program, &io),
                other => ProviderError::failed(format!("could not run {program:?}: {other}")),
            })?;
        let (read, write) = pty.into_split();
        tokio::spawn(pump(read, StdStream::Stdout, sender, exited_rx));
        (child, Some(Input::Pty(write)))
    } else {
        let mut command = tokio::process::Command::new(program);
        command
            .args(&spec.argv[1..])
            .env_clear()
            .envs(env)
            .current_dir(workdir)
            .process_group(0)
            .stdin(if spec.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| spawn_error(program, &e))?;
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(pump(
                stdout,
                StdStream::Stdout,
                sender.clone(),
                exited_rx.clone(),
            ));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(pump(stderr, StdStream::Stderr, sender, exited_rx));
        }
        let input = child.stdin.take().map(Input::Pipe);
        (child, input)
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    let control = Arc::new(MockControl {
        input: Mutex::new(input),
        group,
    });
    let mut child = child;
    let exit = async move {
        let status = child
            .wait()
            .await
            .map_err(|e| ProviderError::failed(format!("waiting for the command: {e}")))?;
        let _ = exited_tx.send(true);
        Ok(exit_status(status))
    }
    .boxed();
    Ok(ExecSession {
        output: Box::pin(ReceiverStream::new(receiver)),
        control,
        exit,
    })
}
