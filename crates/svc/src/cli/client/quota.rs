//! `svc quota ls|get|set|rm|usage`.

use std::process::ExitCode;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Map, Value};

use super::{print_answer, Api, ClientError};

const COLUMNS: [(&str, &str); 4] = [
    ("OWNER", "owner_id"),
    ("MAX_SANDBOXES", "max_sandboxes"),
    ("MAX_TTL", "max_ttl"),
    ("MAX_EXEC_TIMEOUT", "max_exec_timeout"),
];

#[derive(Debug, Subcommand)]
pub(crate) enum QuotaCommand {
    /// Lists owners' quotas.
    #[command(alias = "list")]
    Ls,
    /// Prints one owner's quota.
    Get {
        /// The owner.
        owner: String,
    },
    /// Sets an owner's quota (`0` or a limit left out inherits the global one).
    Set {
        /// The owner.
        owner: String,
        /// Sandboxes at once.
        #[arg(long)]
        max_sandboxes: Option<u64>,
        /// Longest time to live (`2h`).
        #[arg(long)]
        max_ttl: Option<String>,
        /// Longest exec deadline (`10m`).
        #[arg(long)]
        max_exec_timeout: Option<String>,
    },
    /// Removes an owner's quota.
    #[command(alias = "delete")]
    Rm {
        /// The owner.
        owner: String,
    },
    /// Prints an owner's usage against the limits in force.
    Usage {
        /// The owner.
        owner: String,
    },
}

pub(crate) async fn run(api: Api, command: QuotaCommand) -> Result<ExitCode, ClientError> {
    let request = match &command {
        QuotaCommand::Ls => {
            let listed = api.list_all("/quotas", &[]).await?;
            print_answer(&api, &listed, &COLUMNS);
            return Ok(ExitCode::SUCCESS);
        }
        QuotaCommand::Get { owner } => api.request(Method::GET, &format!("/quotas/{owner}")),
        QuotaCommand::Set {
            owner,
            max_sandboxes,
            max_ttl,
            max_exec_timeout,
        } => {
            let mut body = Map::new();
            if let Some(max) = max_sandboxes {
                body.insert("max_sandboxes".into(), Value::from(*max));
            }
            if let Some(ttl) = max_ttl {
                body.insert("max_ttl".into(), Value::from(ttl.as_str()));
            }
            if let Some(timeout) = max_exec_timeout {
                body.insert("max_exec_timeout".into(), Value::from(timeout.as_str()));
            }
            api.request(Method::PUT, &format!("/quotas/{owner}"))
                .json(&body)
        }
        QuotaCommand::Rm { owner } => api.request(Method::DELETE, &format!("/quotas/{owner}")),
        QuotaCommand::Usage { owner } => {
            api.request(Method::GET, &format!("/quotas/{owner}/usage"))
        }
    };
    let answer = api.call(request).await?;
    match command {
        QuotaCommand::Rm { owner } if !api.json() => println!("{owner}"),
        // Usage has its own shape: shown whole.
        QuotaCommand::Usage { .. } => super::print_json(&answer),
        _ => print_answer(&api, &answer, &COLUMNS),
    }
    Ok(ExitCode::SUCCESS)
}
