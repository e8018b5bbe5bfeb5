//! The control plane handle: cheap to clone, shared by every request and background loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use svc_core::config::{Config, SpawnOverflow};
use svc_core::Clock;
use svc_store::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::identity::Authenticator;
use crate::{EventBus, ProviderRegistry};

/// What the binary wires together.
pub struct ControlPlaneParts {
    /// The validated configuration.
    pub config: Arc<Config>,
    /// The store.
    pub store: Arc<dyn Store>,
    /// The enabled providers.
    pub providers: Arc<ProviderRegistry>,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// How callers authenticate (from `auth.*`).
    pub authenticator: Authenticator,
    /// The store's installation ID (labels every runtime).
    pub installation_id: String,
    /// The event log shared with other replicas (PostgreSQL), if any.
    pub event_log: Option<Arc<dyn svc_store::EventLog>>,
    /// Builds template images (the Docker engine), if any (decisions §17).
    pub builder: Option<Arc<dyn svc_provider::ImageBuilder>>,
}

pub(crate) struct Inner {
    pub(crate) config: Arc<Config>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) providers: Arc<ProviderRegistry>,
    pub(crate) events: EventBus,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) authenticator: Authenticator,
    pub(crate) member_roles: crate::identity::MemberRoles,
    http_metrics: crate::observe::http::HttpMetrics,
    pub(crate) retries: crate::retry::Retries,
    pub(crate) spawn_queue: Arc<crate::queue::SpawnQueue>,
    rate_limiter: Arc<crate::ratelimit::RateLimiter>,
    pub(crate) hostname: String,
    pub(crate) installation_id: String,
    event_log: Option<Arc<dyn svc_store::EventLog>>,
    /// Where the event relay starts reading the shared log, read before serving.
    pub(crate) relay_start: std::sync::Mutex<Option<i64>>,
    pub(crate) worker_tokens: crate::identity::WorkerTokens,
    pub(crate) held_leases: crate::held_leases::HeldLeases,
    pub(crate) exec_jobs: crate::exec_jobs::ExecJobs,
    pub(crate) warm: crate::warm::WarmPools,
    pub(crate) preview_keys: crate::preview::PreviewKeys,
    pub(crate) builder: Option<Arc<dyn svc_provider::ImageBuilder>>,
    pub(crate) builds: crate::builds::Builds,
    /// What buffered execs' output may hold in memory, all together.
    pub(crate) buffered_output: Arc<crate::output_budget::OutputBudget>,
    /// The client for other nodes of a fleet, made on first use.
    node_client: std::sync::OnceLock<reqwest::Client>,
    started: Instant,
    shutdown: CancellationToken,
}

/// The control plane.
#[derive(Clone)]
pub struct ControlPlane {
    pub(crate) inner: Arc<Inner>,
}

impl ControlPlane {
    /// Builds the control plane; nothing runs until [`ControlPlane::start_background`].
    pub fn new(parts: ControlPlaneParts) -> Self {
        let events = EventBus::new(&parts.config.events, Arc::clone(&parts.clock));
        let rate_limiter = Arc::new(crate::ratelimit::RateLimiter::with_clock(
            &parts.config.rate_limit,
            Arc::clone(&parts.clock),
        ));
        let worker_tokens = crate::identity::WorkerTokens::new(&parts.config.auth);
        let exec_jobs = crate::exec_jobs::ExecJobs::default();
        exec_jobs.retain_output(parts.config.exec.retained_output_bytes);
        let defaults = &parts.config.defaults;
        // A full pool may queue (pool.overflow) while capacity denials do not, or the reverse:
        // the queue runs when either does, and each denial checks its own setting.
        let pool = &parts.config.pool;
        let overflow = if pool.enabled && pool.overflow == SpawnOverflow::Queue {
            SpawnOverflow::Queue
        } else {
            defaults.spawn_overflow
        };
        let spawn_queue = Arc::new(crate::queue::SpawnQueue::new(
            overflow,
            defaults.max_spawn_queue,
            defaults.spawn_queue_timeout,
        ));
        let build_slots = parts.config.defaults.max_concurrent_builds;
        ControlPlane {
            inner: Arc::new(Inner {
                buffered_output: crate::output_budget::OutputBudget::new(
                    parts.config.exec.buffered_memory_bytes,
                ),
                config: parts.config,
                store: parts.store,
                providers: parts.providers,
                events,
                clock: parts.clock,
                authenticator: parts.authenticator,
                member_roles: crate::identity::MemberRoles::default(),
                http_metrics: crate::observe::http::HttpMetrics::new(),
                node_client: std::sync::OnceLock::new(),
                retries: crate::retry::Retries::default(),
                spawn_queue,
                rate_limiter,
                hostname: crate::workers::host_name(),
                installation_id: parts.installation_id,
                event_log: parts.event_log,
                relay_start: std::sync::Mutex::new(None),
                worker_tokens,
                held_leases: crate::held_leases::HeldLeases::default(),
                exec_jobs,
                warm: crate::warm::WarmPools::default(),
                preview_keys: crate::preview::PreviewKeys::new(),
                builds: crate::builds::Builds::new(build_slots),
                builder: parts.builder,
                started: Instant::now(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The store; callers outside go through the control plane's methods.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Flushes and closes the store, at the end of shutdown.
    pub async fn close_store(&self) {
        self.inner.store.close().await;
    }

    /// The providers.
    pub(crate) fn providers(&self) -> &ProviderRegistry {
        &self.inner.providers
    }

    /// Per-route HTTP request metrics (recorded by the HTTP layer).
    pub fn http_metrics(&self) -> &crate::observe::http::HttpMetrics {
        &self.inner.http_metrics
    }

    /// The HTTP client for other nodes of a fleet (one connection pool for all of them).
    pub(crate) fn node_client(&self) -> &reqwest::Client {
        self.inner.node_client.get_or_init(reqwest::Client::new)
    }

    /// Counters of every provider operation and exec.
    pub(crate) fn operations(&self) -> &crate::observe::operations::OperationMetrics {
        self.inner.providers.operations()
    }

    /// The event bus (public for embedders and tests that publish their own events).
    pub fn events(&self) -> &EventBus {
        &self.inner.events
    }

    /// The spawn queue.
    pub(crate) fn spawn_queue(&self) -> &Arc<crate::queue::SpawnQueue> {
        &self.inner.spawn_queue
    }

    /// The API rate limiter (inert unless `rate_limit.enabled`).
    pub fn rate_limiter(&self) -> &crate::ratelimit::RateLimiter {
        &self.inner.rate_limiter
    }

    /// True when callers must authenticate.
    pub fn auth_enabled(&self) -> bool {
        self.inner.authenticator.is_enabled()
    }

    /// The time source.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// This process's worker ID (`worker.id`).
    pub fn worker_id(&self) -> &str {
        &self.inner.config.worker.id
    }

    /// Time since the control plane was built.
    pub fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }

    /// Fires when shutdown begins: background loops and open streams end.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// Reads where the shared event log stands (PostgreSQL), before serving: every event
    /// another replica publishes once this server answers reaches its subscribers, however
    /// late the relay task gets going. Without it the relay reads the position itself.
    pub async fn prepare_event_relay(&self) {
        let Some(log) = &self.inner.event_log else {
            return;
        };
        match log.last_event_seq().await {
            Ok(seq) => {
                *self
                    .inner
                    .relay_start
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(seq);
            }
            Err(err) => {
                tracing::warn!(error = %err, "reading the shared event log's position failed; the relay retries");
            }
        }
    }

    /// Starts the background loops; they stop when [`ControlPlane::shutdown_token`] fires.
    pub fn start_background(&self) -> Vec<JoinHandle<()>> {
        let cancel = self.inner.shutdown.clone();
        let mut loops = vec![
            tokio::spawn(crate::reaper::run(self.clone(), cancel.clone())),
            tokio::spawn(crate::workers::run_heartbeats(self.clone(), cancel.clone())),
            tokio::spawn(crate::reconcile::run(self.clone(), cancel.clone())),
            tokio::spawn(crate::warm::fill::run(self.clone(), cancel.clone())),
        ];
        for provider in self.providers().all() {
            let provider = Arc::clone(provider);
            tokio::spawn(async move { provider.warm_up().await });
        }
        for provider in self.providers().all_for_cleanup() {
            if let Some(failures) = provider.take_failures() {
                loops.push(tokio::spawn(crate::runtime_failures::run(
                    self.clone(),
                    Arc::clone(provider),
                    failures,
                    cancel.clone(),
                )));
            }
        }
        if let Some(log) = &self.inner.event_log {
            loops.push(tokio::spawn(crate::events::relay::run(
                self.clone(),
                Arc::clone(log),
                cancel.clone(),
            )));
        }
        if let Some(oidc) = self.oidc().filter(|oidc| oidc.uses_jwks()) {
            loops.push(tokio::spawn(crate::identity::refresh_keys(
                Arc::clone(oidc),
                Arc::clone(&self.inner.clock),
                cancel.clone(),
            )));
        }
        if self.inner.rate_limiter.enabled() {
            loops.push(tokio::spawn(crate::ratelimit::run_cleanup(
                Arc::clone(&self.inner.rate_limiter),
                cancel,
            )));
        }
        loops
    }
}

#[cfg(any(test, feature = "test-support"))]
impl ControlPlane {
    /// A control plane on in-memory SQLite with no providers, for unit tests (of other crates
    /// too, through the `test-support` feature).
    pub async fn for_tests() -> Self {
        let clock: Arc<dyn Clock> = Arc::new(svc_core::SystemClock);
        #[allow(clippy::unwrap_used)]
        let store = svc_store::sqlite::SqliteStore::open(":memory:")
            .await
            .unwrap();
        ControlPlane::new(ControlPlaneParts {
            config: Arc::new(Config::default()),
            store: Arc::new(store),
            providers: Arc::new(ProviderRegistry::new(
                Vec::new(),
                String::new(),
                Arc::clone(&clock),
            )),
            clock,
            authenticator: Authenticator::Open,
            installation_id: "test-installation".to_owned(),
            event_log: None,
            builder: None,
        })
    }
}
