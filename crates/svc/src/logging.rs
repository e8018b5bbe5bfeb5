//! Log output: `tracing` to stderr, level and format from `logging.*`. `RUST_LOG`, when set,
//! overrides the level for debugging.

use svc_core::config::{LogFormat, LoggingConfig};
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; later calls are ignored.
pub(crate) fn init(config: &LoggingConfig) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(config.level.as_str()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match config.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.with_target(false).try_init(),
    };
}

/// Logs for tests: level from `RUST_LOG`, written through the test harness's capture.
pub fn init_test_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
