//! The single exec primitive's types: what to run, and the live session a provider returns.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use svc_core::path::SandboxPath;

use crate::ProviderError;

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StdStream {
    /// Standard output (and the merged terminal output of a TTY).
    Stdout,
    /// Standard error.
    Stderr,
}

/// A piece of output, as the process wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecChunk {
    /// Source stream.
    pub stream: StdStream,
    /// Raw bytes; may split UTF-8 characters (decoding happens above the provider).
    pub data: Bytes,
}

/// Terminal size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

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
}

/// Signals a caller may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGHUP (1).
    Hup,
    /// SIGINT (2).
    Int,
    /// SIGKILL (9).
    Kill,
    /// SIGTERM (15).
    Term,
}

impl Signal {
    /// The POSIX signal number.
    pub fn number(self) -> i32 {
        match self {
            Signal::Hup => 1,
            Signal::Int => 2,
            Signal::Kill => 9,
            Signal::Term => 15,
        }
    }

    /// Parses `SIGINT`, `INT`, `sigint`, ...
    pub fn parse(name: &str) -> Option<Self> {
        let upper = name.trim().to_ascii_uppercase();
        match upper.strip_prefix("SIG").unwrap_or(&upper) {
            "HUP" => Some(Signal::Hup),
            "INT" => Some(Signal::Int),
            "KILL" => Some(Signal::Kill),
            "TERM" => Some(Signal::Term),
            _ => None,
        }
    }
}

/// How a command ended: its exit code, 128+N when killed by signal N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code.
    pub code: i32,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_signals() {
        assert_eq!(Signal::parse("SIGINT"), Some(Signal::Int));
        assert_eq!(Signal::parse("term"), Some(Signal::Term));
        assert_eq!(Signal::parse("KILL").map(Signal::number), Some(9));
        assert_eq!(Signal::parse("SIGUSR1"), None);
    }
}
