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
    pub detach: bool,
}

/// `HOME` and the default working directory: root's home when the image has one.
pub(crate) fn root_home() -> PathBuf {
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
        let container = crate::container::defaults();
        let home = match &self.user {
            Some(user) => PathBuf::from(
                SandboxPath::parse(&user.home)
                    .map_err(|e| e.to_string())?
                    .as_str(),
            ),
            None => container.map_or_else(root_home, |c| c.home.clone()),
        };
        let workdir = match (&self.workdir, container) {
            (Some(dir), _) => {
                PathBuf::from(SandboxPath::parse(dir).map_err(|e| e.to_string())?.as_str())
            }
            // As the engine's exec: the container's working directory, unless as another user.
            (None, Some(container)) if self.user.is_none() => container.workdir.clone(),
            (None, _) => home.clone(),
        };
        // A command run as another user keeps that user's HOME.
        let inherited = container
            .into_iter()
            .flat_map(|c| c.env.iter())
            .filter(|(key, _)| self.user.is_none() || key != "HOME")
            .cloned();
        let env = svc_process::environment(
            &home,
            self.tty.is_some(),
            inherited.chain(self.env.iter().cloned()),
        );
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
        let number = detached::next_number();
        let handle = self
            .detach
            .then(|| detached::register(number, process.control.clone()));
        crate::container::log(format!(
            "exec {number}: {}",
            crate::container::command_line(&self.argv)
        ));
        let began = std::time::Instant::now();
        let started = Reply::Started {
            pid,
            handle: handle.clone(),
        };
        // Once the host is gone, a detached command's output is drained and dropped.
        let mut host_gone = !send(&mut replies, &started).await;
        if host_gone && handle.is_none() {
            let _ = process.control.kill();
        }
        let host = tokio::spawn(from_host(frames, process.control.clone(), self.detach));
        while let Some(chunk) = process.output.recv().await {
            if host_gone {
                continue;
            }
            let kind = match chunk.stream {
                StdStream::Stdout => FrameKind::Stdout,
                StdStream::Stderr => FrameKind::Stderr,
            };
            if replies.send(Frame::bytes(kind, chunk.data)).await.is_err() {
                host_gone = true;
                if handle.is_none() {
                    // Nobody will read the rest.
                    let _ = process.control.kill();
                    break;
                }
            }
        }
        let ended = process.exit.await;
        let code = ended.as_ref().map_or(-1, |status| status.code);
        if let Some(handle) = &handle {
            detached::ended(handle, code);
        }
        crate::container::log(format!(
            "exec {number}: exit {code} after {} ms",
            began.elapsed().as_millis()
        ));
        if !host_gone {
            match ended {
                Ok(status) => {
                    send(&mut replies, &Reply::Exit { code: status.code }).await;
                }
                Err(err) => fail(&mut replies, ErrorKind::Failed, err.to_string()).await,
            }
        }
        host.abort();
    }
}

/// Applies what the host sends while the command runs. When the connection ends (closed or
/// broken), kills the command and everything it started, or, for a detached command, closes
/// its stdin as the host would have.
async fn from_host(
    mut frames: Frames,
    control: std::sync::Arc<svc_process::Control>,
    detach: bool,
) {
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
    if detach {
        let _ = stdin.send(None).await;
        return;
    }
    let _ = control.kill();
    writer.abort();
}

/// Detached commands (`Exec.detach`), by handle: running ones until they end, then the newest
/// [`detached::ENDED_KEPT`] ended ones.
pub(crate) mod detached {
    use std::collections::{HashMap, VecDeque};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, LazyLock, Mutex, PoisonError};

    /// Ended commands remembered for `exec_status`.
    pub(crate) const ENDED_KEPT: usize = 4096;

    struct Entry {
        control: Arc<svc_process::Control>,
        code: Option<i32>,
    }

    #[derive(Default)]
    struct Registry {
        entries: HashMap<String, Entry>,
        ended: VecDeque<String>,
    }

    static NEXT: AtomicU64 = AtomicU64::new(1);
    static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);
    /// Tells this agent's handles from an earlier one's, whose numbers started at 1 too.
    static INSTANCE: LazyLock<String> = LazyLock::new(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{:x}{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
    });

    fn registry() -> std::sync::MutexGuard<'static, Registry> {
        REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next command's number (the log's, and its handle's).
    pub(crate) fn next_number() -> u64 {
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers a detached command; its handle.
    pub(crate) fn register(number: u64, control: Arc<svc_process::Control>) -> String {
        let handle = format!("{}-{number}", *INSTANCE);
        registry().entries.insert(
            handle.clone(),
            Entry {
                control,
                code: None,
            },
        );
        handle
    }

    /// Records how a detached command ended.
    pub(crate) fn ended(handle: &str, code: i32) {
        let mut registry = registry();
        if let Some(entry) = registry.entries.get_mut(handle) {
            entry.code = Some(code);
        }
        registry.ended.push_back(handle.to_owned());
        if registry.ended.len() > ENDED_KEPT {
            if let Some(oldest) = registry.ended.pop_front() {
                registry.entries.remove(&oldest);
            }
        }
    }

    /// `None`: unknown. `Some(None)`: running. `Some(Some(code))`: ended.
    pub(crate) fn status(handle: &str) -> Option<Option<i32>> {
        registry().entries.get(handle).map(|entry| entry.code)
    }

    /// Signals a detached command's group; false when the handle is unknown.
    pub(crate) fn signal(handle: &str, signal: svc_process::Signal) -> bool {
        let control = match registry().entries.get(handle) {
            Some(entry) if entry.code.is_none() => entry.control.clone(),
            Some(_) => return true,
            None => return false,
        };
        let _ = control.signal(signal);
        true
    }
}
