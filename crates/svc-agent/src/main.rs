//! `svc-agent`: svc's guest agent. Inside a microVM it is the init process and serves the
//! agent protocol (`svc-agent-proto`) on vsock; given `--unix PATH` it serves the same protocol
//! on a Unix socket (tests, and containers whose init it is).

mod exec;
mod files;
mod serve;

use std::process::ExitCode;

const USAGE: &str = "usage: svc-agent --unix PATH";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let socket = match args.as_slice() {
        [flag, path] if flag == "--unix" => std::path::PathBuf::from(path),
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
    match runtime.block_on(serve::unix(&socket)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("svc-agent: {err}");
            ExitCode::FAILURE
        }
    }
}
