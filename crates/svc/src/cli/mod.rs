//! The command line (decisions §16, §19): `serve`, `openapi`, `config lint`, `doctor`, `db`,
//! `worker`, the client commands `sandbox`, `exec`, `cp`, `template`, `quota` and `events`,
//! and `mcp`, the client as a Model Context Protocol server.

mod client;
mod config;
mod db;
mod doctor;
mod openapi;
mod serve;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// svc: self-hosted sandbox orchestration.
#[derive(Debug, Parser)]
#[command(name = "svc", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    client: client::ClientArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the service.
    Serve {
        /// Configuration file (default: ./svc.yaml when present).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Prints the OpenAPI description of the interface.
    Openapi {
        /// Output format.
        #[arg(long, value_enum, default_value_t = openapi::Format::Json)]
        format: openapi::Format,
    },
    /// Runs a worker that reports to a control plane; `drain`/`undrain ID` on a running server.
    Worker(worker::WorkerArgs),
    /// Configuration tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Checks the environment: configuration, store, providers, disk space, clock.
    Doctor {
        /// Configuration file (default: ./svc.yaml when present).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Also apply the production rules of `config lint`.
        #[arg(long)]
        production: bool,
    },
    /// Database tools (PostgreSQL).
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Sandboxes on a running server: create, ls, get, rm, extend, pause, resume.
    Sandbox {
        #[command(subcommand)]
        command: client::SandboxCommand,
    },
    /// Runs a command in a sandbox, streaming its output; exits with its exit code.
    Exec(client::ExecArgs),
    /// Copies files and directories between this machine and a sandbox (`ID:/path`).
    Cp(client::CpArgs),
    /// Templates on a running server: create, ls, get, update, rm, spawn, build.
    Template {
        #[command(subcommand)]
        command: client::TemplateCommand,
    },
    /// Owner quotas on a running server: ls, get, set, rm, usage.
    Quota {
        #[command(subcommand)]
        command: client::QuotaCommand,
    },
    /// Follows the server's events, one line each.
    Events(client::EventsArgs),
    /// Serves the Model Context Protocol on stdio: sandboxes, commands and files as tools.
    Mcp,
}

#[derive(Debug, Subcommand)]
enum DbCommand {
    /// Writes a consistent snapshot of the database to OUTPUT (pg_dump, custom format).
    PgBackup {
        /// The backup file; never overwritten.
        output: PathBuf,
        /// Configuration file (default: ./svc.yaml when present).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Checks the database against this binary's migrations without writing anything.
    PgRehearse {
        /// Configuration file (default: ./svc.yaml when present).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validates the configuration and prints every finding.
    Lint {
        /// Configuration file (default: ./svc.yaml when present).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Also apply the production rules.
        #[arg(long)]
        production: bool,
    },
}

/// Runs the command line; the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => serve::run(config.as_deref()),
        Command::Openapi { format } => openapi::run(format),
        Command::Worker(args) => match args.action {
            Some(command) => client::run(cli.client, |api| client::worker::run(api, command)),
            None => worker::run(args),
        },
        Command::Config {
            command: ConfigCommand::Lint { config, production },
        } => config::lint(config.as_deref(), production),
        Command::Doctor { config, production } => doctor::run(config.as_deref(), production),
        Command::Db {
            command: DbCommand::PgBackup { output, config },
        } => db::backup(config.as_deref(), &output),
        Command::Db {
            command: DbCommand::PgRehearse { config },
        } => db::rehearse(config.as_deref()),
        Command::Sandbox { command } => {
            client::run(cli.client, |api| client::sandbox::run(api, command))
        }
        Command::Exec(args) => client::run(cli.client, |api| client::exec::run(api, args)),
        Command::Cp(args) => client::run(cli.client, |api| client::cp::run(api, args)),
        Command::Template { command } => {
            client::run(cli.client, |api| client::template::run(api, command))
        }
        Command::Quota { command } => {
            client::run(cli.client, |api| client::quota::run(api, command))
        }
        Command::Events(args) => client::run(cli.client, |api| client::events::run(api, args)),
        Command::Mcp => client::run(cli.client, client::mcp::run),
    }
}
