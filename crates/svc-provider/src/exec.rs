//! The single exec primitive's types: what to run, and the live session a provider returns.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use svc_core::path::SandboxPath;
pub use svc_process::{ExecChunk, ExitStatus, Signal, StdStream, TtySize};

use crate::ProviderError;

/// What to run. The shell wrapping of `command` without `args` happens above the provider:
/// `argv` is always the final program and arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Environment on top of the sandbox's.
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox, validated by the control plane.
    pub workdir: Option<SandboxPath>,
    /// Run under a pseudo-terminal of this size.
    pub tty: Option<TtySize>,
    /// Whether the caller will write to stdin; otherwise stdin is empty (`/dev/null`).
    pub stdin: bool,
    /// Run as this unprivileged user instead of the sandbox's default (pool workspaces); only
    /// for providers whose [`crate::Provider::runs_exec_as_user`] is true.
    pub user: Option<ExecUser>,
}

/// A user to run a command as, with its home directory inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecUser {
    /// User ID.
    pub uid: u32,
    /// Group ID.
    pub gid: u32,
    /// `HOME`, a directory inside the sandbox.
    pub home: SandboxPath,
}

/// Controls a running command. Every method may be called while output is being read.
#[async_trait]
pub trait ExecControl: Send + Sync {
    /// Writes to the command's stdin.
    async fn write_stdin(&self, data: Bytes) -> Result<(), ProviderError>;
    /// Closes stdin (EOF).
    async fn close_stdin(&self) -> Result<(), ProviderError>;
    /// Changes the terminal size of a TTY session.
    async fn resize(&self, size: TtySize) -> Result<(), ProviderError>;
    /// Sends a signal to the command (its whole process group where the backend allows).
    async fn signal(&self, signal: Signal) -> Result<(), ProviderError>;
    /// Ends the command and everything it started; used on deadline and caller disconnect.
    async fn kill(&self) -> Result<(), ProviderError>;
    /// The provider's own reference to the command, by which it can be found again after svc
    /// restarts ([`crate::Provider::exec_state`]); `None` where commands end with svc.
    fn handle(&self) -> Option<String> {
        None
    }
}

/// A command started before svc restarted, as its provider sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecState {
    /// Still running.
    Running,
    /// Ended, with its exit code when the provider kept it.
    Exited(Option<i32>),
    /// The provider no longer knows it.
    Gone,
}

/// Output chunks in order; ends when the command's output is closed.
pub type OutputStream = BoxStream<'static, Result<ExecChunk, ProviderError>>;

/// A running command: read `output`, drive `control`, await `exit`.
pub struct ExecSession {
    /// Output as it arrives, never buffered whole.
    pub output: OutputStream,
    /// Stdin, resize, signals, kill.
    pub control: std::sync::Arc<dyn ExecControl>,
    /// Resolves when the command has ended.
    pub exit: BoxFuture<'static, Result<ExitStatus, ProviderError>>,
}
