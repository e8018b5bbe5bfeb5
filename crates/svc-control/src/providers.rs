//! The configured providers, which one is the default, and their cached health. Health is
//! checked at start-up, by `POST /providers/test`, by `/ready`, and again when a cached result
//! is older than [`HEALTH_MAX_AGE`] at the time someone asks.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::observe::metered::Metered;
use crate::observe::operations::OperationMetrics;
use serde::Serialize;
use svc_core::access::Action;
use svc_core::{Capability, Clock, Timestamp};
use svc_provider::Provider;

/// How long a health result is reused.
pub const HEALTH_MAX_AGE: Duration = Duration::from_secs(5);
/// A health check slower than this counts as a failure.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// A provider's last health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderHealth {
    /// Whether it answered.
    pub healthy: bool,
    /// How long the check took.
    pub latency_ms: u64,
    /// When it ran.
    pub last_checked: Timestamp,
    /// Why it failed.
    pub error: Option<String>,
    checked_at: Instant,
}

/// Provider summary (interface Provider).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ProviderSummary {
    /// Name.
    pub name: String,
    /// Last health result.
    pub healthy: bool,
    /// True for the default provider.
    pub default: bool,
    /// Health check latency.
    pub latency_ms: u64,
    /// When health was last checked.
    #[schema(value_type = String, format = DateTime)]
    pub last_checked: Timestamp,
    /// Health error, only when unhealthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What it can do.
    pub capabilities: Vec<Capability>,
    /// Runtimes it reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_count: Option<u64>,
}

/// Provider detail (interface Provider).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ProviderDetail {
    /// Name.
    pub name: String,
    /// Last health result.
    pub healthy: bool,
    /// True for the default provider.
    pub default: bool,
    /// Sandboxes on it that are not destroyed.
    pub sandbox_count: u64,
    /// The summary.
    pub health: ProviderSummary,
    /// Its settings, without secrets.
    #[schema(value_type = Object)]
    pub config: serde_json::Map<String, serde_json::Value>,
}

/// The enabled providers, and the retired ones: configured but disabled for new spawns, kept
/// only so the sandboxes they made can still be destroyed, reaped and recovered.
pub struct ProviderRegistry {
    providers: Vec<Arc<dyn Provider>>,
    retired: Vec<Arc<dyn Provider>>,
    default: String,
    health: RwLock<HashMap<&'static str, ProviderHealth>>,
    clock: Arc<dyn Clock>,
    operations: Arc<OperationMetrics>,
    pool: Option<Arc<crate::pool::Pool>>,
}

impl ProviderRegistry {
    /// A registry of `providers` with `default` as the default; `default` must be one of them.
    /// Every provider is wrapped so each call is counted and timed (see [`Metered`]).
    pub fn new(providers: Vec<Arc<dyn Provider>>, default: String, clock: Arc<dyn Clock>) -> Self {
        let operations = Arc::new(OperationMetrics::default());
        ProviderRegistry {
            providers: Self::metered(providers, &operations),
            retired: Vec::new(),
            default,
            health: RwLock::new(HashMap::new()),
            clock,
            operations,
            pool: None,
        }
    }

    fn metered(
        providers: Vec<Arc<dyn Provider>>,
        operations: &Arc<OperationMetrics>,
    ) -> Vec<Arc<dyn Provider>> {
        providers
            .into_iter()
            .map(|p| Metered::wrap(p, Arc::clone(operations)))
            .collect()
    }

    /// Adds providers that spawn nothing new but still clean up after themselves.
    pub fn with_retired(mut self, retired: Vec<Arc<dyn Provider>>) -> Self {
        self.retired = Self::metered(retired, &self.operations);
        self
    }

    /// Pool mode: `pool` is already among the providers (in place of the provider its VMs
    /// run on); this makes it known as the pool.
    pub fn with_pool(mut self, pool: Arc<crate::pool::Pool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The pool, in pool mode.
    pub fn pool(&self) -> Option<&Arc<crate::pool::Pool>> {
        self.pool.as_ref()
    }

    /// The counters of every provider operation.
    pub fn operations(&self) -> &Arc<OperationMetrics> {
        &self.operations
    }

    /// The enabled provider called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.providers.iter().find(|p| p.name() == name)
    }

    /// Every provider that may still hold runtimes: enabled and retired.
    pub fn all_for_cleanup(&self) -> impl Iterator<Item = &Arc<dyn Provider>> {
        self.providers.iter().chain(&self.retired)
    }

    /// The provider called `name` for destroying, reaping or recovering its sandboxes: enabled
    /// or retired.
    pub fn for_cleanup(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.get(name)
            .or_else(|| self.retired.iter().find(|p| p.name() == name))
    }

    /// Every enabled provider's name, in configuration order.
    pub fn names(&self) -> Vec<String> {
        self.providers.iter().map(|p| p.name().to_owned()).collect()
    }

    /// The default provider's name.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// Every provider.
    pub fn all(&self) -> &[Arc<dyn Provider>] {
        &self.providers
    }

    async fn check(&self, provider: &Arc<dyn Provider>) -> ProviderHealth {
        let started = Instant::now();
        let result = match tokio::time::timeout(HEALTH_TIMEOUT, provider.health()).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "health check timed out after {}s",
                HEALTH_TIMEOUT.as_secs()
            )),
        };
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let health = ProviderHealth {
            healthy: result.is_ok(),
            latency_ms,
            last_checked: self.clock.now(),
            error: result.err(),
            checked_at: Instant::now(),
        };
        if !health.healthy {
            tracing::warn!(provider = provider.name(), error = ?health.error, "provider unhealthy");
        }
        self.health
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(provider.name(), health.clone());
        health
    }

    /// Records `name` as unhealthy now, for `error` (a runtime it lost); the next check after
    /// [`HEALTH_MAX_AGE`] decides again.
    pub(crate) fn mark_unhealthy(&self, name: &'static str, error: String) {
        tracing::warn!(provider = name, %error, "provider unhealthy");
        self.health
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                name,
                ProviderHealth {
                    healthy: false,
                    latency_ms: 0,
                    last_checked: self.clock.now(),
                    error: Some(error),
                    checked_at: Instant::now(),
                },
            );
    }

    fn cached(&self, name: &str, max_age: Duration) -> Option<ProviderHealth> {
        self.health
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .filter(|h| h.checked_at.elapsed() <= max_age)
            .cloned()
    }

    /// Health of one provider, checked now when the cache is older than `max_age`.
    pub async fn health_of(
        &self,
        provider: &Arc<dyn Provider>,
        max_age: Duration,
    ) -> ProviderHealth {
        match self.cached(provider.name(), max_age) {
            Some(health) => health,
            None => self.check(provider).await,
        }
    }

    /// How many runtimes a healthy provider with `runtime_inventory` reports. Only listings
    /// ask for it: health checks (`/ready`, spawns) stay cheap.
    async fn runtime_count(provider: &Arc<dyn Provider>, health: &ProviderHealth) -> Option<u64> {
        if !health.healthy
            || !provider
                .capabilities()
                .contains(&Capability::RuntimeInventory)
        {
            return None;
        }
        provider.inventory().await.ok().map(|r| r.len() as u64)
    }

    fn summary(
        &self,
        provider: &Arc<dyn Provider>,
        health: ProviderHealth,
        runtime_count: Option<u64>,
    ) -> ProviderSummary {
        ProviderSummary {
            name: provider.name().to_owned(),
            healthy: health.healthy,
            default: provider.name() == self.default,
            latency_ms: health.latency_ms,
            last_checked: health.last_checked,
            error: health.error,
            capabilities: provider.capabilities().to_vec(),
            runtime_count,
        }
    }

    /// Summaries of every provider, checking concurrently those whose cache is older than
    /// `max_age` (`Duration::ZERO` forces a check). With `runtime_counts`, each also carries
    /// its `runtime_count` (an inventory call per provider).
    pub async fn summaries(&self, max_age: Duration, runtime_counts: bool) -> Vec<ProviderSummary> {
        let checks = self.providers.iter().map(|provider| async move {
            let health = self.health_of(provider, max_age).await;
            let count = if runtime_counts {
                Self::runtime_count(provider, &health).await
            } else {
                None
            };
            self.summary(provider, health, count)
        });
        futures::future::join_all(checks).await
    }

    /// The summary of one provider, with its runtime count.
    pub async fn summary_of(&self, name: &str, max_age: Duration) -> Option<ProviderSummary> {
        let provider = self.get(name)?;
        let health = self.health_of(provider, max_age).await;
        let count = Self::runtime_count(provider, &health).await;
        Some(self.summary(provider, health, count))
    }
}

/// How old a cached health result may be when listing providers.
const LIST_HEALTH_MAX_AGE: Duration = Duration::from_secs(5);

/// `/ready`: whether any configured provider is healthy, and each one's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Healthy providers.
    pub ready_providers: usize,
    /// Every provider's summary.
    pub providers: Vec<ProviderSummary>,
}

impl crate::ControlPlane {
    /// `GET /providers`: every provider's summary, with runtime counts.
    pub async fn list_providers(
        &self,
        principal: &crate::Principal,
    ) -> Result<Vec<ProviderSummary>, svc_core::Error> {
        self.authorize(principal, Action::ReadProviders)?;
        Ok(self.providers().summaries(LIST_HEALTH_MAX_AGE, true).await)
    }

    /// `GET /ready` (never authenticated): provider health at most a second old.
    pub async fn readiness(&self) -> Readiness {
        let providers = self
            .providers()
            .summaries(Duration::from_secs(1), false)
            .await;
        Readiness {
            ready_providers: providers.iter().filter(|p| p.healthy).count(),
            providers,
        }
    }

    /// `GET /providers/{name}`.
    pub async fn provider_detail(
        &self,
        principal: &crate::Principal,
        name: &str,
    ) -> Result<ProviderDetail, svc_core::Error> {
        self.authorize(principal, Action::ReadProviders)?;
        let not_found = || svc_core::Error::not_found(svc_core::error::Resource::Provider, name);
        let provider = self.providers().get(name).ok_or_else(not_found)?;
        let health = self
            .providers()
            .summary_of(name, HEALTH_MAX_AGE)
            .await
            .ok_or_else(not_found)?;
        let sandbox_count = self.store().count_sandboxes_on_provider(name).await?;
        Ok(ProviderDetail {
            name: name.to_owned(),
            healthy: health.healthy,
            default: health.default,
            sandbox_count,
            config: provider.config_summary(),
            health,
        })
    }

    /// `POST /providers/test`: checks every provider now; name to healthy.
    pub async fn test_providers(
        &self,
        principal: &crate::Principal,
    ) -> Result<std::collections::BTreeMap<String, bool>, svc_core::Error> {
        self.authorize(principal, Action::TestProviders)?;
        Ok(self
            .providers()
            .summaries(Duration::ZERO, false)
            .await
            .into_iter()
            .map(|summary| (summary.name, summary.healthy))
            .collect())
    }

    /// `GET /snapshots`: every provider's cached root filesystems.
    pub async fn snapshots(
        &self,
        principal: &crate::Principal,
    ) -> Result<Vec<svc_provider::SnapshotInfo>, svc_core::Error> {
        self.authorize(principal, Action::ReadSnapshots)?;
        let mut snapshots = Vec::new();
        for provider in self.providers().all() {
            let listed = provider
                .snapshots()
                .await
                .map_err(|e| self.provider_failure(None, provider.name(), "list snapshots", e))?;
            snapshots.extend(listed);
        }
        Ok(snapshots)
    }

    /// `GET /pool/status`: whether pooled multi-user mode is on.
    pub fn pool_status(
        &self,
        principal: &crate::Principal,
    ) -> Result<crate::pool::PoolStatus, svc_core::Error> {
        self.authorize(principal, Action::ReadPool)?;
        Ok(self
            .providers()
            .pool()
            .map_or_else(crate::pool::PoolStatus::disabled, |pool| pool.status()))
    }
}
