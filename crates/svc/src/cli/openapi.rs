//! `svc openapi [--format json|yaml]`.

use std::io::Write;
use std::process::ExitCode;

use svc_api::{openapi_document, OpenApiFormat};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

pub(crate) fn run(format: Format) -> ExitCode {
    let document = openapi_document(match format {
        Format::Json => OpenApiFormat::Json,
        Format::Yaml => OpenApiFormat::Yaml,
    });
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{document}").is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
