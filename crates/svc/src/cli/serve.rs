//! `svc serve [--config FILE]`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use crate::config_load::{load_config, process_env};

pub(crate) fn run(path: Option<&Path>) -> ExitCode {
    let loaded = match load_config(path, &process_env()) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("svc: {err}");
            return ExitCode::FAILURE;
        }
    };
    crate::logging::init(&loaded.config.logging);
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    if let Some(source) = &loaded.source {
        tracing::info!(config = %source.display(), "configuration loaded");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("svc: starting the async runtime failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(loaded.config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("svc: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: svc_core::config::Config) -> anyhow::Result<()> {
    let addr = format!("{}:{}", config.server.host, config.server.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr} (server.host, server.port)"))?;
    crate::serve_with_listener(config, listener, shutdown_signal()).await?;
    Ok(())
}

/// SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received");
}
