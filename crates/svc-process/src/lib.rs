//! Running a command as a local process, the way svc runs commands wherever it runs them
//! itself: the mock provider on the host, and the guest agent inside a microVM or container.
//!
//! A command runs in its own process group (so deadlines and signals reach everything it
//! started), with piped stdout and stderr, or under a real pseudo-terminal for `tty`. Output
//! arrives as chunks in a bounded channel, so a slow reader slows the command instead of
//! growing memory; the exit code is 128+N when a signal N ended it.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use rustix::process::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Mutex};

const READ_CHUNK: usize = 64 * 1024;
/// Chunks in flight between a reader and the consumer; bounds memory under a slow consumer.
const CHANNEL_DEPTH: usize = 8;
/// After the command exits, output still arriving is read; a pipe that stays silent this long
/// (held open by a background process) is let go.
const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// The `PATH` commands get unless their environment names one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment of a command: a default `PATH`, `HOME`, `LANG`, `TERM` under a terminal,
/// then the caller's variables on top (so they may replace any of these).
pub fn environment(
    home: &std::path::Path,
    tty: bool,
    extra: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_owned(), DEFAULT_PATH.to_owned()),
        ("HOME".to_owned(), home.display().to_string()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ];
    if tty {
        env.push(("TERM".to_owned(), "xterm-256color".to_owned()));
    }
    env.extend(extra);
    env
}

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
    /// Raw bytes; may split UTF-8 characters.
    pub data: Bytes,
}

/// Terminal size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
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

    /// The signal numbered `number`, among those a caller may send.
    pub fn from_number(number: i32) -> Option<Self> {
        [Signal::Hup, Signal::Int, Signal::Kill, Signal::Term]
            .into_iter()
            .find(|s| s.number() == number)
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

    fn to_rustix(self) -> rustix::process::Signal {
        match self {
            Signal::Hup => rustix::process::Signal::HUP,
            Signal::Int => rustix::process::Signal::INT,
            Signal::Kill => rustix::process::Signal::KILL,
            Signal::Term => rustix::process::Signal::TERM,
        }
    }
}

/// How a command ended: its exit code, 128+N when killed by signal N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code.
    pub code: i32,
}

impl From<std::process::ExitStatus> for ExitStatus {
    fn from(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        let code = status
            .code()
            .or_else(|| status.signal().map(|signal| 128 + signal))
            .unwrap_or(1);
        ExitStatus { code }
    }
}

/// What went wrong starting or driving a command.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The command line is empty.
    #[error("command is empty")]
    EmptyCommand,
    /// The program does not exist.
    #[error("could not run {program:?}: no such file or directory")]
    NotFound {
        /// The program as given.
        program: String,
    },
    /// Stdin was closed (or never opened).
    #[error("stdin is closed")]
    StdinClosed,
    /// A resize on a command without a terminal.
    #[error("resize needs a command started with tty: true")]
    NotATerminal,
    /// Anything else the system refused.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The system's error.
        source: std::io::Error,
    },
}

impl ProcessError {
    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        ProcessError::Io {
            context: context.into(),
            source,
        }
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The whole environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub workdir: PathBuf,
    /// Run under a pseudo-terminal of this size.
    pub tty: Option<TtySize>,
    /// Whether stdin is piped in; otherwise it is `/dev/null`.
    pub stdin: bool,
    /// Run as this user ID and group ID (with no supplementary groups); needs root.
    pub user: Option<(u32, u32)>,
}

/// A running command: read `output`, drive `control`, await `exit`.
pub struct Process {
    /// The process ID (the leader of its group).
    pub pid: Option<u32>,
    /// Output as it arrives; ends when the command's output is closed.
    pub output: mpsc::Receiver<ExecChunk>,
    /// Stdin, resize, signals, kill.
    pub control: Arc<Control>,
    /// Resolves when the command has ended.
    pub exit: BoxFuture<'static, Result<ExitStatus, ProcessError>>,
}

enum Input {
    Pipe(tokio::process::ChildStdin),
    Pty(pty_process::OwnedWritePty),
}

/// Controls a running command; every method may be called while output is being read.
pub struct Control {
    input: Mutex<Option<Input>>,
    /// The process group, which is also the session for TTY commands.
    group: Option<Pid>,
}

impl Control {
    /// Writes to the command's stdin.
    pub async fn write_stdin(&self, data: &[u8]) -> Result<(), ProcessError> {
        let mut input = self.input.lock().await;
        let result = match input.as_mut() {
            None => return Err(ProcessError::StdinClosed),
            Some(Input::Pipe(pipe)) => pipe.write_all(data).await,
            Some(Input::Pty(pty)) => pty.write_all(data).await,
        };
        result.map_err(|e| ProcessError::io("writing stdin", e))
    }

    /// Closes stdin (EOF). A terminal has no EOF of its own: the line discipline turns ^D
    /// into one, so a TTY gets ^D and stays writable.
    pub async fn close_stdin(&self) {
        let mut input = self.input.lock().await;
        match input.take() {
            Some(Input::Pty(mut pty)) => {
                let _ = pty.write_all(&[0x04]).await;
                *input = Some(Input::Pty(pty));
            }
            Some(Input::Pipe(mut pipe)) => {
                let _ = pipe.shutdown().await;
            }
            None => {}
        }
    }

    /// Changes the terminal size of a TTY command.
    pub async fn resize(&self, size: TtySize) -> Result<(), ProcessError> {
        let input = self.input.lock().await;
        match input.as_ref() {
            Some(Input::Pty(pty)) => pty
                .resize(pty_process::Size::new(size.rows, size.cols))
                .map_err(|e| pty_error("resizing the terminal", e)),
            _ => Err(ProcessError::NotATerminal),
        }
    }

    /// Sends `signal` to the command's whole process group.
    pub fn signal(&self, signal: Signal) -> Result<(), ProcessError> {
        match self.group {
            Some(group) => signal_group(group, signal),
            None => Ok(()),
        }
    }

    /// Ends the command and everything it started.
    pub fn kill(&self) -> Result<(), ProcessError> {
        self.signal(Signal::Kill)
    }

    /// Stops (`SIGSTOP`) or continues (`SIGCONT`) the command's process group: how a sandbox
    /// of host processes is paused and resumed. A group that is gone is success.
    pub fn freeze(&self, frozen: bool) -> Result<(), ProcessError> {
        let Some(group) = self.group else {
            return Ok(());
        };
        let signal = if frozen {
            rustix::process::Signal::STOP
        } else {
            rustix::process::Signal::CONT
        };
        match rustix::process::kill_process_group(group, signal) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(err) => Err(ProcessError::io(
                format!("sending {signal:?} to the command"),
                std::io::Error::from(err),
            )),
        }
    }
}

fn ignore_gone(result: rustix::io::Result<()>, what: Signal) -> Result<(), ProcessError> {
    match result {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(err) => Err(ProcessError::io(
            format!("sending {what:?}"),
            std::io::Error::from_raw_os_error(err.raw_os_error()),
        )),
    }
}

/// Sends `signal` to the process group led by `leader`; a group that is gone is not an error.
pub fn signal_group(leader: Pid, signal: Signal) -> Result<(), ProcessError> {
    ignore_gone(
        rustix::process::kill_process_group(leader, signal.to_rustix()),
        signal,
    )
}

/// Sends `signal` to one process; a process that is gone is not an error.
pub fn signal_process(pid: Pid, signal: Signal) -> Result<(), ProcessError> {
    ignore_gone(
        rustix::process::kill_process(pid, signal.to_rustix()),
        signal,
    )
}

/// Reads `reader` into chunks of `stream` until EOF, an error, or (once `exited` fires) a
/// silence of [`DRAIN_IDLE`].
async fn pump(
    mut reader: impl AsyncRead + Unpin,
    stream: StdStream,
    sender: mpsc::Sender<ExecChunk>,
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
                if sender.send(chunk).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn pty_error(context: &str, err: pty_process::Error) -> ProcessError {
    let source = match err {
        pty_process::Error::Io(io) => io,
        other => std::io::Error::other(other.to_string()),
    };
    ProcessError::io(context, source)
}

fn spawn_error(program: &str, err: std::io::Error) -> ProcessError {
    if err.kind() == std::io::ErrorKind::NotFound {
        ProcessError::NotFound {
            program: program.to_owned(),
        }
    } else {
        ProcessError::io(format!("could not run {program:?}"), err)
    }
}

/// Starts `command`.
pub fn spawn(command: &Command) -> Result<Process, ProcessError> {
    let program = command.argv.first().ok_or(ProcessError::EmptyCommand)?;
    let (sender, receiver) = mpsc::channel(CHANNEL_DEPTH);
    let (exited_tx, exited_rx) = tokio::sync::watch::channel(false);
    let (mut child, input) = if let Some(size) = command.tty {
        let (pty, pts) = pty_process::open().map_err(|e| pty_error("opening a terminal", e))?;
        pty.resize(pty_process::Size::new(size.rows, size.cols))
            .map_err(|e| pty_error("sizing the terminal", e))?;
        let mut child = pty_process::Command::new(program)
            .args(&command.argv[1..])
            .env_clear()
            .envs(command.env.iter().cloned())
            .current_dir(&command.workdir);
        if let Some((uid, gid)) = command.user {
            child = child.uid(uid).gid(gid);
        }
        let child = child.spawn(pts).map_err(|e| match e {
            pty_process::Error::Io(io) => spawn_error(program, io),
            other => pty_error(&format!("could not run {program:?}"), other),
        })?;
        let (read, write) = pty.into_split();
        tokio::spawn(pump(read, StdStream::Stdout, sender, exited_rx));
        (child, Some(Input::Pty(write)))
    } else {
        let mut child = tokio::process::Command::new(program);
        if let Some((uid, gid)) = command.user {
            child.uid(uid).gid(gid);
        }
        let mut child = child
            .args(&command.argv[1..])
            .env_clear()
            .envs(command.env.iter().cloned())
            .current_dir(&command.workdir)
            .process_group(0)
            .stdin(if command.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| spawn_error(program, e))?;
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
    let pid = child.id();
    let group = pid
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    let control = Arc::new(Control {
        input: Mutex::new(input),
        group,
    });
    let exit = async move {
        let status = child
            .wait()
            .await
            .map_err(|e| ProcessError::io("waiting for the command", e))?;
        let _ = exited_tx.send(true);
        Ok(ExitStatus::from(status))
    }
    .boxed();
    Ok(Process {
        pid,
        output: receiver,
        control,
        exit,
    })
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
        assert_eq!(Signal::from_number(15), Some(Signal::Term));
        assert_eq!(Signal::from_number(10), None);
    }

    fn command(argv: &[&str]) -> Command {
        Command {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            env: vec![("PATH".into(), DEFAULT_PATH.into())],
            workdir: std::env::temp_dir(),
            tty: None,
            stdin: false,
            user: None,
        }
    }

    #[tokio::test]
    async fn separates_streams_and_reports_exit_codes() {
        let mut process = spawn(&command(&["sh", "-c", "echo out; echo err >&2; exit 3"])).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        while let Some(chunk) = process.output.recv().await {
            match chunk.stream {
                StdStream::Stdout => out.extend_from_slice(&chunk.data),
                StdStream::Stderr => err.extend_from_slice(&chunk.data),
            }
        }
        assert_eq!(out, b"out\n");
        assert_eq!(err, b"err\n");
        assert_eq!(process.exit.await.unwrap().code, 3);
    }

    #[tokio::test]
    async fn a_signal_reaches_the_group_and_shows_in_the_code() {
        let process = spawn(&command(&["sh", "-c", "sleep 30 & wait"])).unwrap();
        process.control.signal(Signal::Term).unwrap();
        assert_eq!(process.exit.await.unwrap().code, 128 + 15);
    }

    #[tokio::test]
    async fn a_missing_program_is_named() {
        let Err(err) = spawn(&command(&["/no/such/program"])) else {
            panic!("ran a missing program");
        };
        assert!(matches!(err, ProcessError::NotFound { .. }), "{err}");
        assert!(spawn(&command(&[])).is_err());
    }
}
