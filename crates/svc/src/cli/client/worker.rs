//! `svc worker drain|undrain ID`: a worker's placement on a running server (decisions §22).

use std::process::ExitCode;

use clap::Subcommand;
use reqwest::Method;

use super::{print_answer, Api, ClientError};

const COLUMNS: [(&str, &str); 4] = [
    ("ID", "id"),
    ("STATUS", "status"),
    ("STALE", "stale"),
    ("URL", "url"),
];

#[derive(Debug, Subcommand)]
pub(crate) enum WorkerCommand {
    /// Drains a worker: it takes no new sandboxes and keeps serving its own.
    Drain {
        /// The worker.
        id: String,
    },
    /// Undrains a worker: it takes new sandboxes again.
    Undrain {
        /// The worker.
        id: String,
    },
}

pub(crate) async fn run(api: Api, command: WorkerCommand) -> Result<ExitCode, ClientError> {
    let (id, action) = match &command {
        WorkerCommand::Drain { id } => (id, "drain"),
        WorkerCommand::Undrain { id } => (id, "undrain"),
    };
    let path = format!("/admin/workers/{id}/{action}");
    let answer = api.call(api.request(Method::POST, &path)).await?;
    print_answer(&api, &answer, &COLUMNS);
    Ok(ExitCode::SUCCESS)
}
