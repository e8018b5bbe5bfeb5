//! Container mode (decisions §14, Docker fast path): `svc-agent --container SOCKET` is a Docker
//! container's init and serves the protocol on a Unix socket in a directory the host shares.
//!
//! PID 1 only supervises: it starts the server as its child (so the server's runtime keeps its
//! own children's exit statuses), reaps orphans, ends the container on `TERM`/`INT` at once
//! (PID 1 has no default signal actions, and `docker stop` would otherwise wait 10 s), and exits
//! when the server does, so an agent that dies stops its container where the engine sees it.
//!
//! Commands get what the engine's exec would give them: the container's environment and working
//! directory. The agent logs the commands it ran and how they ended to its stdout (the
//! container log) and keeps the newest lines for [`svc_agent_proto::Op::Logs`].

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Log lines kept for `logs`.
const LOG_LINES: usize = 10_000;
/// A logged command line is cut here: an agent's log is not a transcript.
const LOGGED_COMMAND_CHARS: usize = 200;

/// What commands get by default in a container.
pub(crate) struct Defaults {
    /// The container's environment (the image's, then the container's own).
    pub env: Vec<(String, String)>,
    /// The container's working directory.
    pub workdir: PathBuf,
    /// `HOME` from the environment, else root's home.
    pub home: PathBuf,
}

static DEFAULTS: OnceLock<Defaults> = OnceLock::new();
static LOG: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// The container's defaults; `None` outside container mode.
pub(crate) fn defaults() -> Option<&'static Defaults> {
    DEFAULTS.get()
}

/// Enters container mode for this (server) process: commands inherit its environment and
/// working directory, and the log is on.
pub(crate) fn enter() {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let home = env
        .iter()
        .find(|(key, value)| key == "HOME" && value.starts_with('/'))
        .map_or_else(crate::exec::root_home, |(_, value)| PathBuf::from(value));
    let workdir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let _ = DEFAULTS.set(Defaults { env, workdir, home });
}

/// Logs `line` (container mode only): to stdout, and into the ring `logs` answers from.
pub(crate) fn log(line: String) {
    if DEFAULTS.get().is_none() {
        return;
    }
    println!("{line}");
    let mut ring = LOG.lock().unwrap_or_else(PoisonError::into_inner);
    if ring.len() == LOG_LINES {
        ring.pop_front();
    }
    ring.push_back(line);
}

/// The newest `lines` log lines, oldest first.
pub(crate) fn tail(lines: usize) -> Vec<String> {
    let ring = LOG.lock().unwrap_or_else(PoisonError::into_inner);
    ring.iter()
        .skip(ring.len().saturating_sub(lines))
        .cloned()
        .collect()
}

/// A command line as the log shows it.
pub(crate) fn command_line(argv: &[String]) -> String {
    let mut line = argv.join(" ");
    if line.chars().count() > LOGGED_COMMAND_CHARS {
        line = line.chars().take(LOGGED_COMMAND_CHARS).collect::<String>() + "…";
    }
    line.replace(['\n', '\r'], " ")
}

/// PID 1 of a container: supervises the server serving on `socket` until it ends.
pub(crate) fn supervise(socket: &Path) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("svc-agent: starting the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(supervise_server(socket))
}

async fn supervise_server(socket: &Path) -> ExitCode {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut terminate), Ok(mut interrupt), Ok(mut child)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::child()),
    ) else {
        eprintln!("svc-agent: cannot handle signals");
        return ExitCode::FAILURE;
    };
    // The server is this binary again, not PID 1, so it serves instead of supervising.
    let server = match std::process::Command::new("/proc/self/exe")
        .arg("--container")
        .arg(socket)
        .spawn()
    {
        Ok(server) => rustix::process::Pid::from_raw(i32::try_from(server.id()).unwrap_or(0)),
        Err(err) => {
            eprintln!("svc-agent: starting the server: {err}");
            return ExitCode::FAILURE;
        }
    };
    loop {
        // Reaped before the first signal too: a child may have ended before the handler was in.
        while let Ok(Some((pid, status))) =
            rustix::process::wait(rustix::process::WaitOptions::NOHANG)
        {
            if Some(pid) == server {
                eprintln!("svc-agent: the server ended; stopping the container");
                let code = status.exit_status().unwrap_or(1);
                return ExitCode::from(u8::try_from(code).unwrap_or(1).max(1));
            }
        }
        tokio::select! {
            _ = terminate.recv() => return ExitCode::SUCCESS,
            _ = interrupt.recv() => return ExitCode::SUCCESS,
            _ = child.recv() => {}
        }
    }
}
