//! The HTTP server's life: start on a listener, serve, and shut down gracefully (decisions §1):
//! stop accepting, let in-flight requests finish within `server.shutdown_timeout`, stop the
//! background loops, close the store. Sandboxes are left running for the next start.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use svc_control::ControlPlane;
use svc_core::config::Config;
use svc_core::{Clock, SystemClock};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::wiring;

/// What shutdown did, for tests and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Background loops that were running and have stopped.
    pub loops_stopped: usize,
    /// False when in-flight requests were cut off at the shutdown timeout.
    pub drained: bool,
}

/// A server running in the background.
pub struct RunningServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where the E2B API listens, when `e2b.enabled`.
    pub e2b_addr: Option<SocketAddr>,
    /// Where the node-to-node listener listens, when `worker.rpc.enabled`.
    pub rpc_addr: Option<SocketAddr>,
    plane: ControlPlane,
    task: JoinHandle<anyhow::Result<ShutdownReport>>,
}

impl RunningServer {
    /// The control plane (for tests that inspect state directly).
    pub fn control_plane(&self) -> &ControlPlane {
        &self.plane
    }

    /// Shuts down gracefully and waits for it.
    pub async fn shutdown(self) -> anyhow::Result<ShutdownReport> {
        self.plane.shutdown_token().cancel();
        self.task.await.context("server task panicked")?
    }
}

/// Opens the store, builds the control plane and starts serving on `listener`.
pub async fn start(config: Config, listener: TcpListener) -> anyhow::Result<RunningServer> {
    start_with_clock(config, listener, Arc::new(SystemClock)).await
}

/// [`start`] with the time source injected: tests of TTLs move a manual clock instead of
/// sleeping.
pub async fn start_with_clock(
    mut config: Config,
    listener: TcpListener,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<RunningServer> {
    let rpc_listener = bind_node_listener(&mut config).await?;
    let config = Arc::new(config);
    let opened = wiring::open_store(&config).await?;
    let store = Arc::clone(&opened.store);
    let plane = match wiring::control_plane(Arc::clone(&config), &opened, clock).await {
        Ok(plane) => plane,
        Err(err) => {
            store.close().await;
            return Err(err);
        }
    };
    let addr = listener
        .local_addr()
        .context("reading the listening address")?;
    let e2b_addr = match serve_e2b(&plane).await {
        Ok(addr) => addr,
        Err(err) => {
            store.close().await;
            return Err(err);
        }
    };
    let rpc_addr = rpc_listener.map(|(listener, addr)| serve_node(&plane, listener, addr));
    let providers = plane.readiness().await.providers;
    let provider_list: Vec<String> = providers
        .iter()
        .map(|p| {
            let mut label = p.name.clone();
            if p.default {
                label.push_str(" (default)");
            }
            if !p.healthy {
                label.push_str(" (unhealthy)");
            }
            label
        })
        .collect();
    tracing::info!(
        "svc {} listening on http://{addr} (store: {} {}, providers: {})",
        env!("CARGO_PKG_VERSION"),
        store.backend(),
        config.database.path,
        if provider_list.is_empty() {
            "none".to_owned()
        } else {
            provider_list.join(", ")
        }
    );
    // This process is a worker: registered before it records anything as its own.
    plane
        .register_local_worker()
        .await
        .context("registering this worker in the store")?;
    // Spawns a crash interrupted are settled before anyone can ask about them.
    if let Err(err) = plane
        .recover_interrupted_spawns(&svc_control::Principal::system())
        .await
    {
        tracing::warn!(error = %err, "recovering interrupted spawns failed; they stay creating until the next start");
    }
    // Then the store and the providers are made to agree (unknown runtimes adopted, vanished
    // ones ended); again every five minutes while serving.
    if let Err(err) = plane.reconcile(&svc_control::Principal::system()).await {
        tracing::warn!(error = %err, "start-up reconciliation failed; retried in five minutes");
    }
    // Sandboxes of workers that died (another replica, or this one under an earlier
    // `worker.id`) are taken over or ended; again after every heartbeat.
    if let Err(err) = plane
        .take_over_dead_workers(&svc_control::Principal::system())
        .await
    {
        tracing::warn!(error = %err, "settling dead workers' sandboxes failed; retried after the next heartbeat");
    }
    // Exec records of the sandboxes this worker now runs come back (running docker execs are
    // followed again); from here on every record is saved.
    if let Err(err) = plane.recover_execs(&svc_control::Principal::system()).await {
        tracing::warn!(error = %err, "recovering exec records failed; earlier execs are not listed");
    }
    // Builds this worker ran before it stopped cannot resume: they end failed.
    if let Err(err) = plane.recover_builds().await {
        tracing::warn!(error = %err, "failing interrupted template builds failed; they stay running");
    }
    tracing::info!(
        "authentication: {}",
        if plane.auth_enabled() {
            "API keys required"
        } else {
            "off (every caller is admin)"
        }
    );
    plane.prepare_event_relay().await;
    let loops = plane.start_background();
    let task = tokio::spawn(run(plane.clone(), listener, loops));
    Ok(RunningServer {
        addr,
        e2b_addr,
        rpc_addr,
        plane,
        task,
    })
}

/// With `worker.rpc.enabled`, binds the node-to-node listener before anything else starts, and
/// records where it listens (a port 0 becomes the one given), which the worker advertises when
/// `worker.advertise_url` is empty.
async fn bind_node_listener(
    config: &mut Config,
) -> anyhow::Result<Option<(TcpListener, SocketAddr)>> {
    let rpc = &config.worker.rpc;
    if !rpc.enabled {
        return Ok(None);
    }
    if config.worker.rpc_tls.enabled {
        anyhow::bail!(
            "worker.rpc_tls.enabled: TLS on the node-to-node listener is not available yet;              use worker.rpc.token on a private network (docs/fleet.md)"
        );
    }
    let listener = TcpListener::bind(&rpc.listen)
        .await
        .with_context(|| format!("binding {} (worker.rpc.listen)", rpc.listen))?;
    let addr = listener
        .local_addr()
        .context("reading the node-to-node address")?;
    config.worker.rpc.listen = addr.to_string();
    Ok(Some((listener, addr)))
}

/// Serves the node-to-node listener (decisions §22) until shutdown.
fn serve_node(plane: &ControlPlane, listener: TcpListener, addr: SocketAddr) -> SocketAddr {
    let app = svc_api::node_router(plane.clone());
    let shutdown = plane.shutdown_token().clone();
    tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            shutdown.cancelled().await;
        });
        if let Err(err) = server.await {
            tracing::error!(error = %err, "the node-to-node listener failed");
        }
    });
    tracing::info!(
        "node-to-node listener on http://{addr} (worker.rpc.listen; advertised as {})",
        plane.config().worker.url()
    );
    addr
}

/// With `e2b.enabled`, the E2B API on its own listener (decisions §20) until shutdown.
async fn serve_e2b(plane: &ControlPlane) -> anyhow::Result<Option<SocketAddr>> {
    let e2b = &plane.config().e2b;
    if !e2b.enabled {
        return Ok(None);
    }
    let wanted = format!("{}:{}", e2b.host, e2b.port);
    let listener = TcpListener::bind(&wanted)
        .await
        .with_context(|| format!("binding {wanted} (e2b.host, e2b.port)"))?;
    let addr = listener.local_addr().context("reading the E2B address")?;
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // The client address keys rate-limit buckets, as on the API.
    let mut app = svc_e2b::router(plane.clone());
    // Without authentication, only the allowed hosts reach it, as on the API (decisions §30).
    if let Some(allowed) = svc_api::hosts::AllowedHosts::for_listener(plane.config(), &e2b.host) {
        app = app.layer(axum::middleware::from_fn_with_state(
            allowed,
            svc_api::hosts::check,
        ));
    }
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    let shutdown = plane.shutdown_token().clone();
    tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            shutdown.cancelled().await;
        });
        if let Err(err) = server.await {
            tracing::error!(error = %err, "the E2B listener failed");
        }
    });
    tracing::info!("E2B API listening on http://{addr} (E2B_API_URL and E2B_SANDBOX_URL)");
    Ok(Some(addr))
}

async fn run(
    plane: ControlPlane,
    listener: TcpListener,
    loops: Vec<JoinHandle<()>>,
) -> anyhow::Result<ShutdownReport> {
    let app = svc_api::router(plane.clone());
    let shutdown = plane.shutdown_token().clone();
    // Streamed responses write small frames; without TCP_NODELAY, Nagle's algorithm holds the
    // last one back until the client's delayed ACK (about 40 ms per streamed exec).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "setting TCP_NODELAY failed");
        }
    });
    // The client address keys rate-limit buckets in `ip` mode (and as the last fallback).
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.cancelled().await;
    });
    let timeout = plane.config().server.shutdown_timeout.as_std();
    let shutdown = plane.shutdown_token().clone();
    let mut serving = tokio::spawn(async move { server.await });
    shutdown.cancelled().await;
    tracing::info!("shutting down: draining in-flight requests");
    let drained = match tokio::time::timeout(timeout, &mut serving).await {
        Ok(Ok(Ok(()))) => true,
        Ok(Ok(Err(err))) => {
            tracing::error!(error = %err, "server error");
            true
        }
        Ok(Err(err)) => {
            tracing::error!(error = %err, "server task failed");
            true
        }
        Err(_) => {
            tracing::warn!(timeout = %plane.config().server.shutdown_timeout, "in-flight requests did not finish in time");
            serving.abort();
            false
        }
    };
    let mut loops_stopped = 0;
    for handle in loops {
        if handle.await.is_ok() {
            loops_stopped += 1;
        }
    }
    // A fleet node drained itself while its requests finished (the heartbeat loop's end).
    if plane.config().worker.rpc.enabled {
        plane.mark_local_offline().await;
    }
    plane
        .flush_exec_records(std::time::Duration::from_secs(5))
        .await;
    plane.close_store().await;
    tracing::info!(loops_stopped, "svc stopped");
    Ok(ShutdownReport {
        loops_stopped,
        drained,
    })
}

/// Serves until `shutdown` resolves, then shuts down gracefully.
pub async fn serve_with_listener(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<ShutdownReport> {
    let server = start(config, listener).await?;
    shutdown.await;
    server.shutdown().await
}
