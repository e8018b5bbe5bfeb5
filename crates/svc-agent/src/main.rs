//! `svc-agent`: svc's guest agent. Inside a microVM it is the init process (PID 1, see
//! `init.rs`) and serves the agent protocol (`svc-agent-proto`) on vsock port
//! [`svc_agent_proto::AGENT_PORT`]; `--vsock PORT` serves on another port, and `--unix PATH`
//! serves the same protocol on a Unix socket (tests), and `--container PATH` makes it a Docker
//! container's init serving on the Unix socket at PATH (`container.rs`).

// The agent runs inside the sandbox, where svc's clock is not: its time is the guest's own
// (clippy.toml disallows wall-clock reads elsewhere).
#![allow(clippy::disallowed_methods)]

mod archive;
mod container;
mod exec;
mod files;
mod forward;
mod init;
mod serve;

use std::process::ExitCode;

const USAGE: &str = "usage: svc-agent [--unix PATH | --container PATH | --vsock PORT | --version]";

enum Listen {
    Unix(std::path::PathBuf),
    Vsock(u32),
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listen = match args.as_slice() {
        [] if std::process::id() == 1 => init::run(svc_agent_proto::AGENT_PORT),
        [flag, path] if flag == "--unix" => Listen::Unix(std::path::PathBuf::from(path)),
        [flag, path] if flag == "--container" => {
            if std::process::id() == 1 {
                return container::supervise(std::path::Path::new(path));
            }
            container::enter();
            Listen::Unix(std::path::PathBuf::from(path))
        }
        [flag, port] if flag == "--vsock" => match port.parse() {
            Ok(port) => Listen::Vsock(port),
            Err(_) => {
                eprintln!("svc-agent: --vsock needs a port number, got {port:?}");
                return ExitCode::from(2);
            }
        },
        [flag] if flag == "--version" => {
            println!(
                "svc-agent {} (protocol {})",
                env!("CARGO_PKG_VERSION"),
                svc_agent_proto::VERSION
            );
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    // File operations run on blocking threads, which count against a container's `pids_limit`
    // (256 by default) like the sandbox's own processes: a few are enough.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(16)
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("svc-agent: starting the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async {
        match listen {
            Listen::Unix(path) => serve::unix(&path).await,
            Listen::Vsock(port) => serve::vsock(port).await,
        }
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("svc-agent: {err}");
            ExitCode::FAILURE
        }
    }
}
