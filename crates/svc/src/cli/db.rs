//! `svc db pg-backup <output>` and `svc db pg-rehearse` (decisions §16): for a PostgreSQL store.
//! The DSN's password never reaches argv, a message or a log: `pg_dump` gets the connection
//! settings in its environment.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use svc_core::config::{Config, DatabaseDriver};

use crate::config_load::{load_config, process_env};

fn postgres_config(path: Option<&Path>, command: &str) -> anyhow::Result<Config> {
    let config = load_config(path, &process_env())?.config;
    if config.database.driver != DatabaseDriver::Postgres {
        bail!(
            "database.driver is {}: svc db {command} needs database.driver: postgres",
            match config.database.driver {
                DatabaseDriver::Sqlite => "sqlite",
                DatabaseDriver::Postgres => "postgres",
            }
        );
    }
    Ok(config)
}

fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("svc: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// `svc db pg-backup <output>`.
pub(crate) fn backup(path: Option<&Path>, output: &Path) -> ExitCode {
    finish(backup_to(path, output))
}

/// The libpq environment for the DSN's settings (the password included, never on argv).
fn libpq_environment(dsn: &str) -> anyhow::Result<Vec<(&'static str, String)>> {
    let settings: tokio_postgres::Config = dsn
        .parse()
        .map_err(|_| anyhow::anyhow!("database.dsn is not a valid PostgreSQL connection string"))?;
    let mut env = Vec::new();
    if let Some(host) = settings.get_hosts().first() {
        env.push((
            "PGHOST",
            match host {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(dir) => dir.display().to_string(),
            },
        ));
    }
    if let Some(port) = settings.get_ports().first() {
        env.push(("PGPORT", port.to_string()));
    }
    if let Some(user) = settings.get_user() {
        env.push(("PGUSER", user.to_owned()));
    }
    if let Some(database) = settings.get_dbname() {
        env.push(("PGDATABASE", database.to_owned()));
    }
    if let Some(password) = settings.get_password() {
        env.push(("PGPASSWORD", String::from_utf8_lossy(password).into_owned()));
    }
    if let Some(options) = settings.get_options() {
        env.push(("PGOPTIONS", options.to_owned()));
    }
    Ok(env)
}

fn backup_to(path: Option<&Path>, output: &Path) -> anyhow::Result<()> {
    let config = postgres_config(path, "pg-backup")?;
    if output.exists() {
        bail!(
            "{} exists; pg-backup never overwrites a file",
            output.display()
        );
    }
    let dsn = config.database.dsn.expose();
    let env = libpq_environment(dsn)?;
    // Only svc's schema: a shared database's other schemas are not ours to dump, and one dropped
    // while pg_dump runs would fail the backup.
    let schema = block_on(svc_store::postgres::rehearse(dsn))?.schema;
    let password = env
        .iter()
        .find(|(name, _)| *name == "PGPASSWORD")
        .map(|(_, value)| value.clone());
    // Written beside the output and renamed when complete: no half-written backup.
    let partial = output.with_extension("partial");
    let result = Command::new("pg_dump")
        .args(["--format=custom", "--no-password", "--file"])
        .arg(&partial)
        // Quoted, the name is matched exactly rather than as a pattern.
        .arg(format!("--schema=\"{}\"", schema.replace('"', "\"\"")))
        .env_remove("PGSERVICE")
        .envs(env)
        .output();
    let output_of_dump = match result {
        Ok(out) => out,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            bail!("pg_dump is not installed (Debian: apt-get install postgresql-client)")
        }
        Err(err) => return Err(err).context("running pg_dump"),
    };
    if !output_of_dump.status.success() {
        let _ = std::fs::remove_file(&partial);
        let mut message = String::from_utf8_lossy(&output_of_dump.stderr)
            .trim()
            .to_owned();
        if let Some(password) = password.filter(|p| !p.is_empty()) {
            message = message.replace(&password, "[redacted]");
        }
        bail!("pg_dump failed ({}): {message}", output_of_dump.status);
    }
    std::fs::rename(&partial, output)
        .with_context(|| format!("moving the backup to {}", output.display()))?;
    println!("ok: backup written to {}", output.display());
    Ok(())
}

/// Runs one store call to completion; these commands have no runtime of their own.
fn block_on<T>(
    call: impl std::future::Future<Output = svc_store::StoreResult<T>>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(call)
        .context("connecting to the database (database.dsn)")
}

/// `svc db pg-rehearse`.
pub(crate) fn rehearse(path: Option<&Path>) -> ExitCode {
    finish(rehearse_at(path))
}

fn rehearse_at(path: Option<&Path>) -> anyhow::Result<()> {
    let config = postgres_config(path, "pg-rehearse")?;
    let report = block_on(svc_store::postgres::rehearse(config.database.dsn.expose()))?;
    println!(
        "schema version {} (this binary: {})",
        report.current_version, report.latest_version
    );
    for missing in &report.missing {
        println!("missing: {missing}");
    }
    if report.current_version > report.latest_version {
        bail!("the database is newer than this binary; upgrade svc first");
    }
    if !report.missing.is_empty() {
        bail!(
            "{} required table(s) or column(s) are missing; an upgrade would fail",
            report.missing.len()
        );
    }
    if report.current_version < report.latest_version {
        println!(
            "ok: {} migration(s) will apply at the next start",
            report.latest_version - report.current_version
        );
    } else {
        println!("ok: the schema is current");
    }
    Ok(())
}
