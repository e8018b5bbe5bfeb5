//! `svc config lint [--config FILE] [--production]`: every finding as `error:` or `warning:`
//! with its key; exit 1 on any error.

use std::path::Path;
use std::process::ExitCode;

use crate::config_load::{load_config, process_env, ConfigLoadError};

pub(crate) fn lint(path: Option<&Path>, production: bool) -> ExitCode {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    match load_config(path, &process_env()) {
        Ok(loaded) => {
            warnings.extend(loaded.warnings);
            if production {
                errors.extend(
                    loaded
                        .config
                        .production_problems()
                        .into_iter()
                        .map(|p| p.to_string()),
                );
            }
        }
        Err(ConfigLoadError::Invalid { problems }) => {
            errors.extend(problems.into_iter().map(|p| p.to_string()));
        }
        Err(other) => errors.push(other.to_string()),
    }
    for warning in &warnings {
        println!("warning: {warning}");
    }
    for error in &errors {
        println!("error: {error}");
    }
    if errors.is_empty() {
        println!(
            "ok: configuration is valid{}",
            if production { " for production" } else { "" }
        );
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
