//! What svc is doing, for operators (interface "System"; decisions §13): the diagnostics
//! document, the JSON metrics, the Prometheus text exposition, and the counters behind them.
//! Everything here is read-only and redacted: counts and names of providers, workers and
//! operations, never keys, tokens, DSNs or owner IDs.

pub mod http;
pub mod metered;
pub mod operations;
mod scrape;

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use svc_core::access::Action;
use svc_core::observe::SandboxCounts;
use svc_core::quota::QuotaSummary;
use svc_core::worker::{LeaseCounts, Worker, WorkerStatus};
use svc_core::{Error, GoDuration, Timestamp};
use utoipa::ToSchema;

use crate::events::EventStats;
use crate::ratelimit::RateLimitStats;
use crate::{ControlPlane, Principal, ProviderSummary, SchedulerStats};
use operations::OperationStats;

/// `build`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BuildInfo {
    /// The crate version (plus git revision).
    pub version: &'static str,
    /// Operating system, Go style (`linux`).
    pub goos: &'static str,
    /// Architecture, Go style (`amd64`, `arm64`).
    pub goarch: &'static str,
}

/// `process.memory`, from `/proc/self/statm`.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct MemoryInfo {
    /// Resident bytes.
    pub alloc: u64,
    /// Virtual bytes mapped.
    pub sys: u64,
    /// Data segment bytes (heap and stacks).
    pub heap_alloc: u64,
    /// Always 0: no garbage collector.
    pub gc_cycles: u64,
}

/// `process`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProcessInfo {
    /// Time since start.
    #[schema(value_type = String)]
    pub uptime: GoDuration,
    /// Live tokio tasks.
    pub goroutines: u64,
    /// Memory.
    pub memory: MemoryInfo,
}

/// `store`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoreHealth {
    /// The store answered a ping.
    pub healthy: bool,
    /// How long the ping took, in whole milliseconds like every latency of the interface.
    pub latency_ms: u64,
}

/// `limits`: the global limits in force.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LimitsInfo {
    /// `defaults.max_sandboxes` (0: unlimited).
    pub max_sandboxes: u64,
    /// `defaults.max_sandboxes_per_owner`.
    pub max_sandboxes_per_owner: u64,
    /// `defaults.default_exec_timeout`.
    #[schema(value_type = String)]
    pub default_exec_timeout: GoDuration,
    /// `defaults.max_exec_timeout`.
    #[schema(value_type = String)]
    pub max_exec_timeout: GoDuration,
    /// `defaults.max_ttl`.
    #[schema(value_type = String)]
    pub max_ttl: GoDuration,
    /// `reject` or `queue`.
    pub spawn_overflow: &'static str,
    /// `defaults.spawn_queue_timeout`.
    #[schema(value_type = String)]
    pub spawn_queue_timeout: GoDuration,
    /// `defaults.max_spawn_queue`.
    pub max_spawn_queue: usize,
}

/// `workers`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkerSummary {
    /// Registered workers.
    pub total: u64,
    /// Online with a fresh heartbeat.
    pub online: u64,
    /// Heartbeat older than `worker.stale_after` (offline ones aside).
    pub stale: u64,
    /// Reporting no healthy provider.
    pub unhealthy: u64,
    /// Every worker.
    pub items: Vec<Worker>,
}

impl WorkerSummary {
    fn of(items: Vec<Worker>) -> Self {
        let count =
            |keep: &dyn Fn(&Worker) -> bool| items.iter().filter(|w| keep(w)).count() as u64;
        WorkerSummary {
            total: items.len() as u64,
            online: count(&|w| w.status == WorkerStatus::Online && !w.stale),
            stale: count(&|w| w.stale && w.status != WorkerStatus::Offline),
            unhealthy: count(&|w| w.status == WorkerStatus::Unhealthy),
            items,
        }
    }
}

/// The diagnostics document (`GET /diagnostics`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Diagnostics {
    /// When it was put together.
    #[schema(value_type = String, format = DateTime)]
    pub generated_at: Timestamp,
    /// The build.
    pub build: BuildInfo,
    /// The process.
    pub process: ProcessInfo,
    /// The store.
    pub store: StoreHealth,
    /// Global limits.
    pub limits: LimitsInfo,
    /// The scheduler.
    pub scheduler: SchedulerStats,
    /// Quota counts.
    pub quotas: QuotaSummary,
    /// The API rate limiter.
    pub rate_limit: RateLimitStats,
    /// Providers.
    pub providers: Vec<ProviderSummary>,
    /// Workers.
    pub workers: WorkerSummary,
    /// Leases.
    pub leases: LeaseCounts,
    /// Sandboxes.
    pub sandboxes: SandboxCounts,
    /// The event bus.
    pub events: EventStats,
    /// Provider operations.
    pub operations: Vec<OperationStats>,
    /// Where to read on, per area.
    #[schema(value_type = Object)]
    pub remediation: BTreeMap<&'static str, &'static str>,
    /// What is never shown here.
    pub redactions: Vec<&'static str>,
}

/// `providers` of the JSON metrics.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderCounts {
    /// Configured providers.
    pub total: u64,
    /// Healthy ones.
    pub healthy: u64,
    /// Each one.
    pub items: Vec<ProviderHealthItem>,
}

/// One provider in the JSON metrics.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProviderHealthItem {
    /// Name.
    pub name: String,
    /// Last health result.
    pub healthy: bool,
    /// The default provider.
    pub default: bool,
}

/// The JSON metrics (`GET /metrics`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Metrics {
    /// Seconds since start.
    pub uptime: f64,
    /// Live tokio tasks.
    pub goroutines: u64,
    /// Resident bytes.
    pub memory_alloc: u64,
    /// Virtual bytes.
    pub memory_sys: u64,
    /// Data segment bytes.
    pub memory_heap_alloc: u64,
    /// Always 0.
    pub gc_cycles: u64,
    /// Sandboxes, as in diagnostics.
    pub sandboxes: SandboxCounts,
    /// Providers.
    pub providers: ProviderCounts,
    /// Workers.
    pub workers: WorkerSummary,
    /// Leases.
    pub leases: LeaseCounts,
    /// The event bus.
    pub events: EventStats,
    /// The scheduler.
    pub scheduler: SchedulerStats,
    /// Quota counts.
    pub quotas: QuotaSummary,
    /// The API rate limiter.
    pub rate_limit: RateLimitStats,
    /// Provider operations.
    pub operations: Vec<OperationStats>,
}

/// The follow-up documents of each area (decisions §13's `remediation`).
const REMEDIATION: [(&str, &str); 8] = [
    ("providers", "docs/operations.md#providers"),
    ("store", "docs/operations.md#store"),
    ("scheduler", "docs/operations.md#spawn-queue"),
    ("quotas", "docs/operations.md#quotas-and-limits"),
    ("rate_limit", "docs/operations.md#rate-limiting"),
    ("workers", "docs/operations.md#workers-and-leases"),
    ("leases", "docs/operations.md#workers-and-leases"),
    ("events", "docs/operations.md#events"),
];

/// What diagnostics and metrics never show.
const REDACTIONS: [&str; 8] = [
    "provider secrets",
    "registry credentials",
    "environment secrets",
    "API keys",
    "OIDC and worker tokens",
    "signing keys",
    "database DSN passwords",
    "owner IDs",
];

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Memory of this process from `/proc/self/statm` (zeros where it cannot be read).
async fn memory() -> MemoryInfo {
    const PAGE: u64 = 4096;
    let Ok(statm) = tokio::fs::read_to_string("/proc/self/statm").await else {
        return MemoryInfo::default();
    };
    let pages: Vec<u64> = statm
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let page = |i: usize| pages.get(i).copied().unwrap_or(0) * PAGE;
    MemoryInfo {
        alloc: page(1),
        sys: page(0),
        heap_alloc: page(5),
        gc_cycles: 0,
    }
}

fn live_tasks() -> u64 {
    tokio::runtime::Handle::try_current()
        .map(|h| h.metrics().num_alive_tasks() as u64)
        .unwrap_or(0)
}

/// What diagnostics, the JSON metrics and the scrape share, gathered once.
pub(crate) struct Snapshot {
    pub(crate) memory: MemoryInfo,
    pub(crate) goroutines: u64,
    pub(crate) sandboxes: SandboxCounts,
    pub(crate) providers: Vec<ProviderSummary>,
    pub(crate) workers: WorkerSummary,
    pub(crate) leases: LeaseCounts,
    pub(crate) events: EventStats,
    pub(crate) scheduler: SchedulerStats,
    pub(crate) quotas: QuotaSummary,
    pub(crate) rate_limit: RateLimitStats,
    pub(crate) operations: Vec<OperationStats>,
}

/// How old a provider health result may be in diagnostics and metrics: scrapes must not turn
/// into health checks.
const HEALTH_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(5);

impl ControlPlane {
    /// Gathers what every observation shares; the store reads run concurrently.
    pub(crate) async fn snapshot(&self) -> Result<Snapshot, Error> {
        let store = self.store();
        let now = self.clock().now();
        let window = self.config().worker.stale_after.as_std();
        let (groups, workers, leases, quotas, providers, memory) = tokio::join!(
            store.sandbox_groups(),
            store.list_workers(&svc_store::KeyPage::ALL),
            store.lease_counts(now),
            store.quota_summary(),
            self.providers().summaries(HEALTH_MAX_AGE, false),
            memory(),
        );
        let workers: Vec<Worker> = workers?
            .into_iter()
            .map(|w| w.with_staleness(now, window))
            .collect();
        // The scheduler's eligible workers come from the same listing.
        let scheduler = self.scheduler_stats_of(&workers);
        Ok(Snapshot {
            memory,
            goroutines: live_tasks(),
            sandboxes: SandboxCounts::from_groups(&groups?, |state| {
                svc_core::sandbox::SandboxState::parse(state).is_some_and(|s| s.holds_runtime())
            }),
            providers,
            workers: WorkerSummary::of(workers),
            leases: leases?,
            events: self.events().stats(),
            scheduler,
            quotas: quotas?,
            rate_limit: self.rate_limiter().stats(),
            operations: self.operations().snapshot(),
        })
    }

    /// `GET /diagnostics` (and `/admin/diagnostics`).
    pub async fn diagnostics(
        &self,
        principal: &Principal,
        version: &'static str,
    ) -> Result<Diagnostics, Error> {
        self.authorize(principal, Action::ReadDiagnostics)?;
        let pinged = Instant::now();
        let store = self.store().ping().await;
        let latency_ms = u64::try_from(pinged.elapsed().as_millis()).unwrap_or(u64::MAX);
        let snapshot = self.snapshot().await?;
        let defaults = &self.config().defaults;
        Ok(Diagnostics {
            generated_at: svc_core::clock::truncate_to_micros(self.clock().now()),
            build: BuildInfo {
                version,
                goos: std::env::consts::OS,
                goarch: go_arch(),
            },
            process: ProcessInfo {
                uptime: GoDuration::new(self.uptime()),
                goroutines: snapshot.goroutines,
                memory: snapshot.memory,
            },
            store: StoreHealth {
                healthy: store.is_ok(),
                latency_ms,
            },
            limits: LimitsInfo {
                max_sandboxes: defaults.max_sandboxes,
                max_sandboxes_per_owner: defaults.max_sandboxes_per_owner,
                default_exec_timeout: defaults.default_exec_timeout,
                max_exec_timeout: defaults.max_exec_timeout,
                max_ttl: defaults.max_ttl,
                spawn_overflow: snapshot.scheduler.queue.spawn_overflow,
                spawn_queue_timeout: defaults.spawn_queue_timeout,
                max_spawn_queue: defaults.max_spawn_queue,
            },
            scheduler: snapshot.scheduler,
            quotas: snapshot.quotas,
            rate_limit: snapshot.rate_limit,
            providers: snapshot.providers,
            workers: snapshot.workers,
            leases: snapshot.leases,
            sandboxes: snapshot.sandboxes,
            events: snapshot.events,
            operations: snapshot.operations,
            remediation: REMEDIATION.into_iter().collect(),
            redactions: REDACTIONS.to_vec(),
        })
    }

    /// `GET /metrics` (and `/admin/metrics`).
    pub async fn metrics(&self, principal: &Principal) -> Result<Metrics, Error> {
        self.authorize(principal, Action::ReadDiagnostics)?;
        let s = self.snapshot().await?;
        Ok(Metrics {
            uptime: self.uptime().as_secs_f64(),
            goroutines: s.goroutines,
            memory_alloc: s.memory.alloc,
            memory_sys: s.memory.sys,
            memory_heap_alloc: s.memory.heap_alloc,
            gc_cycles: 0,
            sandboxes: s.sandboxes,
            providers: ProviderCounts {
                total: s.providers.len() as u64,
                healthy: s.providers.iter().filter(|p| p.healthy).count() as u64,
                items: s
                    .providers
                    .iter()
                    .map(|p| ProviderHealthItem {
                        name: p.name.clone(),
                        healthy: p.healthy,
                        default: p.default,
                    })
                    .collect(),
            },
            workers: s.workers,
            leases: s.leases,
            events: s.events,
            scheduler: s.scheduler,
            quotas: s.quotas,
            rate_limit: s.rate_limit,
            operations: s.operations,
        })
    }

    /// `GET /metrics/scrape` (and `/admin/metrics/scrape`): Prometheus text exposition 0.0.4.
    pub async fn scrape(&self, principal: &Principal) -> Result<String, Error> {
        self.authorize(principal, Action::ReadDiagnostics)?;
        let snapshot = self.snapshot().await?;
        scrape::render(self, &snapshot)
    }
}
