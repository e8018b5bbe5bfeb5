//! `svc doctor [--config FILE] [--production]` (decisions §16): checks the environment the
//! configuration needs and prints one `ok|warn|fail <check>: <detail>` line per check; exit 1 on
//! any `fail`. It changes nothing: the store is inspected read-only, providers are only
//! health-checked (qemu's KVM probe runs at start-up, not here).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use svc_core::config::{Config, DatabaseDriver};
use svc_core::SystemClock;

use crate::config_load::{load_config, process_env, ConfigLoadError};

/// How long one provider's health check may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(15);
/// Free space under which a data directory fails, and under which it warns.
const DISK_FAIL_BYTES: u64 = 512 << 20;
const DISK_WARN_BYTES: u64 = 2 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Warn,
    Fail,
}

/// The findings so far, printed as they come.
#[derive(Default)]
struct Report {
    failed: bool,
}

impl Report {
    fn line(&mut self, level: Level, check: &str, detail: impl std::fmt::Display) {
        let word = match level {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => {
                self.failed = true;
                "fail"
            }
        };
        println!("{word} {check}: {detail}");
    }
}

pub(crate) fn run(path: Option<&Path>, production: bool) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("svc: starting the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut report = Report::default();
    runtime.block_on(check_all(path, production, &mut report));
    // Checks that outlived their timeout must not keep the process.
    runtime.shutdown_timeout(Duration::from_millis(100));
    if report.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn check_all(path: Option<&Path>, production: bool, report: &mut Report) {
    let Some(config) = check_config(path, production, report) else {
        return;
    };
    check_store(&config, report).await;
    let data_dirs = check_providers(&config, report).await;
    check_disks(&config, data_dirs, report);
    check_clock(report);
}

fn check_config(path: Option<&Path>, production: bool, report: &mut Report) -> Option<Config> {
    let loaded = match load_config(path, &process_env()) {
        Ok(loaded) => loaded,
        Err(ConfigLoadError::Invalid { problems }) => {
            for problem in problems {
                report.line(Level::Fail, "config", problem);
            }
            return None;
        }
        Err(other) => {
            report.line(Level::Fail, "config", other);
            return None;
        }
    };
    for warning in &loaded.warnings {
        report.line(Level::Warn, "config", warning);
    }
    let source = loaded.source.as_ref().map_or_else(
        || "defaults and SVC_ variables (no file)".to_owned(),
        |p| p.display().to_string(),
    );
    report.line(Level::Ok, "config", format!("valid ({source})"));
    if production {
        let problems = loaded.config.production_problems();
        if problems.is_empty() {
            report.line(
                Level::Ok,
                "config.production",
                "every production rule holds",
            );
        }
        for problem in problems {
            report.line(Level::Fail, "config.production", problem);
        }
    }
    Some(loaded.config)
}

async fn check_store(config: &Config, report: &mut Report) {
    match config.database.driver {
        DatabaseDriver::Sqlite => {
            let path = Path::new(&config.database.path);
            if config.database.path == ":memory:" {
                report.line(
                    Level::Warn,
                    "store",
                    "in memory: nothing survives a restart",
                );
                return;
            }
            match svc_store::sqlite::inspect(path).await {
                Ok(None) => report.line(
                    Level::Warn,
                    "store",
                    format!(
                        "{} does not exist yet; the first start creates it",
                        path.display()
                    ),
                ),
                Ok(Some((current, latest))) => {
                    versions(report, &path.display().to_string(), current, latest, &[]);
                }
                Err(err) => report.line(Level::Fail, "store", format!("{}: {err}", path.display())),
            }
        }
        DatabaseDriver::Postgres => {
            match svc_store::postgres::rehearse(config.database.dsn.expose()).await {
                Ok(rehearsal) => versions(
                    report,
                    "PostgreSQL",
                    rehearsal.current_version,
                    rehearsal.latest_version,
                    &rehearsal.missing,
                ),
                // The store's errors never carry the DSN (its password).
                Err(err) => report.line(
                    Level::Fail,
                    "store",
                    format!("PostgreSQL unreachable: {err}"),
                ),
            }
        }
    }
}

fn versions(report: &mut Report, store: &str, current: i64, latest: i64, missing: &[String]) {
    if !missing.is_empty() {
        report.line(
            Level::Fail,
            "store",
            format!("{store} lacks {}", missing.join(", ")),
        );
    } else if current > latest {
        report.line(
            Level::Fail,
            "store",
            format!("{store} is at schema {current}, newer than this binary's {latest}"),
        );
    } else if current < latest {
        report.line(
            Level::Warn,
            "store",
            format!("{store} is at schema {current}; the next start migrates it to {latest}"),
        );
    } else {
        report.line(
            Level::Ok,
            "store",
            format!("{store} reachable, schema {current} (current)"),
        );
    }
}

/// Health-checks every enabled provider and reports what microVM providers run on; the data
/// directories they use.
async fn check_providers(config: &Config, report: &mut Report) -> Vec<PathBuf> {
    let registry = match crate::wiring::providers(config, std::sync::Arc::new(SystemClock)).await {
        Ok(registry) => registry,
        Err(err) => {
            report.line(Level::Fail, "providers", format!("{err:#}"));
            return Vec::new();
        }
    };
    let mut dirs = Vec::new();
    for provider in registry.all() {
        let check = format!("provider {}", provider.name());
        match tokio::time::timeout(PROVIDER_TIMEOUT, provider.health()).await {
            Ok(Ok(())) => report.line(Level::Ok, &check, "healthy"),
            Ok(Err(err)) => report.line(Level::Fail, &check, err),
            Err(_) => report.line(
                Level::Fail,
                &check,
                format!("no answer within {}s", PROVIDER_TIMEOUT.as_secs()),
            ),
        }
        let summary = provider.config_summary();
        let text = |key: &str| summary.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        for key in ["vmm", "kernel", "vsock_backend", "accel"] {
            if let Some(value) = text(key) {
                report.line(Level::Ok, &format!("{} {key}", provider.name()), value);
            }
        }
        // Docker's fast path: which path new sandboxes take, and why not the agent's.
        match (text("exec_path").as_deref(), text("exec_path_reason")) {
            (Some("agent"), _) => report.line(
                Level::Ok,
                &format!("{} exec_path", provider.name()),
                format!("agent ({})", text("agent_path").unwrap_or_default()),
            ),
            (Some(path), Some(reason)) => report.line(
                Level::Warn,
                &format!("{} exec_path", provider.name()),
                format!("{path}: {reason}"),
            ),
            _ => {}
        }
        if let Some(kvm) = text("kvm") {
            let level = match (kvm.as_str(), provider.name()) {
                ("real", _) => Level::Ok,
                (_, svc_core::config::PROVIDER_FIRECRACKER) => Level::Fail,
                _ => Level::Warn,
            };
            report.line(level, &format!("{} kvm", provider.name()), kvm);
        }
        for key in ["data_dir", "rootfs_dir", "root_dir"] {
            if let Some(dir) = text(key) {
                dirs.push(PathBuf::from(dir));
            }
        }
    }
    dirs
}

/// Free space where svc writes: the database's directory and the providers' data directories
/// (the nearest existing ancestor of one not created yet).
fn check_disks(config: &Config, mut dirs: Vec<PathBuf>, report: &mut Report) {
    if config.database.driver == DatabaseDriver::Sqlite && config.database.path != ":memory:" {
        let path = Path::new(&config.database.path);
        let db = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        dirs.push(
            db.parent()
                .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
        );
    }
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        let existing = dir
            .ancestors()
            .find(|a| a.exists())
            .unwrap_or(Path::new("/"));
        let check = format!("disk {}", dir.display());
        match rustix::fs::statvfs(existing) {
            Ok(stat) => {
                let free = stat.f_bavail.saturating_mul(stat.f_frsize);
                let detail = format!("{} MiB free", free >> 20);
                let level = if free < DISK_FAIL_BYTES {
                    Level::Fail
                } else if free < DISK_WARN_BYTES {
                    Level::Warn
                } else {
                    Level::Ok
                };
                report.line(level, &check, detail);
            }
            Err(err) => report.line(Level::Fail, &check, err),
        }
    }
}

/// A wall clock far off makes TTLs, leases and tokens wrong.
fn check_clock(report: &mut Report) {
    // The host's own clock is what this check is about.
    #[allow(clippy::disallowed_methods)]
    let now = chrono::Utc::now();
    // Before this code was written, or absurdly far ahead: the clock was never set.
    let plausible = now.timestamp() > 1_735_689_600 && now.timestamp() < 4_102_444_800;
    let level = if plausible { Level::Ok } else { Level::Fail };
    report.line(
        level,
        "clock",
        now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
}
