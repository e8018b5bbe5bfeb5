//! Where a spawn runs (decisions §11): the provider it names (or the default) on this worker,
//! checked healthy; or only on other workers, which admission refuses with the reason. A fleet
//! that forwards spawns places them here.

use std::sync::Arc;
use std::time::Duration;

use svc_core::config::KNOWN_PROVIDERS;
use svc_core::error::LimitReason;
use svc_core::worker::{Worker, WorkerStatus};
use svc_core::Error;
use svc_provider::Provider;

use crate::ControlPlane;

/// What a node without a capacity of its own counts as, for placement (decisions §22).
const UNLIMITED_COUNTS_AS: u64 = 1_000;

/// Where a spawn would run (decisions §11): here, or only on other workers, which this build
/// cannot ask to spawn (remote worker RPC is gated), so admission refuses with `reason`.
pub(crate) enum Placement {
    /// This worker runs the provider.
    Local(Arc<dyn Provider>),
    /// Another node of the fleet runs it (decisions §22): its provider, over worker RPC.
    Remote {
        /// The node's worker ID.
        worker: String,
        /// Its provider, reached over the node-to-node listener.
        provider: Arc<dyn Provider>,
    },
    /// Only other workers do.
    Elsewhere {
        /// The provider name.
        provider: String,
        /// `remote_worker_rpc_unavailable` or `no_eligible_worker`.
        reason: LimitReason,
        /// What to tell the caller.
        message: String,
    },
}

impl Placement {
    pub(super) fn provider_name(&self) -> &str {
        match self {
            Placement::Local(provider) | Placement::Remote { provider, .. } => provider.name(),
            Placement::Elsewhere { provider, .. } => provider,
        }
    }
}

impl ControlPlane {
    /// Where a spawn on provider `name` (default: the default provider) runs: here when this
    /// worker runs it; otherwise on another online, fresh worker that offers it and has room,
    /// which admission must refuse (`remote_worker_rpc_unavailable`), or nowhere
    /// (`no_eligible_worker`). A provider no online, fresh worker offers is 400.
    pub(crate) async fn place(&self, name: Option<&str>) -> Result<Placement, Error> {
        if self.config().worker.rpc.enabled {
            return self.place_in_fleet(name).await;
        }
        let unknown = match self.spawn_provider(name) {
            Ok(provider) => return Ok(Placement::Local(provider)),
            Err(unknown) => unknown,
        };
        let Some(name) = name else {
            return Err(unknown);
        };
        let offering: Vec<Worker> = self
            .workers_now()
            .await?
            .into_iter()
            .filter(|w| {
                w.id != self.worker_id()
                    && w.status == WorkerStatus::Online
                    && !w.stale
                    && w.runs(name)
            })
            .collect();
        if offering.is_empty() {
            return Err(unknown);
        }
        // What holds a runtime, counted per worker by the store in one query.
        let active = self.store().count_active_sandboxes_by_worker().await?;
        let mut best: Option<(String, u64)> = None;
        for worker in &offering {
            let active = active.get(&worker.id).copied().unwrap_or(0);
            let cap = worker.capacity.max_sandboxes;
            let free = if cap == 0 {
                u64::MAX
            } else {
                cap.saturating_sub(active)
            };
            if free > 0 && best.as_ref().is_none_or(|(_, most)| free > *most) {
                best = Some((worker.id.clone(), free));
            }
        }
        Ok(match best {
            Some((worker, _)) => Placement::Elsewhere {
                provider: name.to_owned(),
                reason: LimitReason::RemoteWorkerRpcUnavailable,
                message: format!(
                    "provider {name} runs on worker {worker}, not on this one ({}); spawning on another worker needs worker RPC, which is not available (remote_worker_rpc_unavailable)",
                    self.worker_id()
                ),
            },
            None => Placement::Elsewhere {
                provider: name.to_owned(),
                reason: LimitReason::NoEligibleWorker,
                message: format!(
                    "no worker offering provider {name} has capacity left (no_eligible_worker)"
                ),
            },
        })
    }

    /// In a fleet (decisions §22): the eligible node (online, fresh, not draining, offering the
    /// provider, below its own capacity) with the most free capacity, this one on a tie; a node
    /// with no capacity of its own counts 1,000 minus what it holds. None: `no_eligible_worker`.
    async fn place_in_fleet(&self, name: Option<&str>) -> Result<Placement, Error> {
        let local = self.spawn_provider(name);
        let name = match (&local, name) {
            (Ok(provider), _) => provider.name().to_owned(),
            (Err(_), Some(name)) => name.to_owned(),
            // No name and no default here: the default provider is unknown.
            (Err(_), None) => return local.map(Placement::Local),
        };
        let workers = self.workers_now().await?;
        let held = self.store().count_active_sandboxes_by_worker().await?;
        let free = |worker: &Worker| {
            let held = held.get(&worker.id).copied().unwrap_or(0);
            match worker.capacity.max_sandboxes {
                0 => UNLIMITED_COUNTS_AS.saturating_sub(held),
                cap => cap.saturating_sub(held),
            }
        };
        let mut best: Option<(&Worker, u64)> = None;
        for worker in &workers {
            let here = worker.id == self.worker_id();
            let eligible = worker.status == WorkerStatus::Online
                && !worker.stale
                && worker.runs(&name)
                && (here || worker.url.is_some());
            let room = free(worker);
            if !eligible || room == 0 {
                continue;
            }
            let better = match best {
                None => true,
                Some((_, most)) => room > most || (room == most && here),
            };
            if better {
                best = Some((worker, room));
            }
        }
        let Some((chosen, _)) = best else {
            if let Err(unknown) = local {
                if !workers.iter().any(|w| w.runs(&name)) {
                    return Err(unknown);
                }
            }
            return Ok(Placement::Elsewhere {
                message: format!(
                    "no node offering provider {name} is online, fresh, undrained and below its capacity (no_eligible_worker)"
                ),
                provider: name,
                reason: LimitReason::NoEligibleWorker,
            });
        };
        if chosen.id == self.worker_id() {
            if let Ok(provider) = local {
                return Ok(Placement::Local(provider));
            }
        }
        let Some(static_name) = KNOWN_PROVIDERS.iter().find(|known| **known == name) else {
            return Err(Error::invalid(
                "provider",
                format!("{name} is not a provider svc knows"),
            ));
        };
        let provider = crate::fleet::remote::NodeProvider {
            name: static_name,
            worker: chosen.id.clone(),
            url: chosen.url.clone().unwrap_or_default(),
            token: self.config().worker.rpc.token.clone(),
            store: Arc::clone(self.store()),
            clock: Arc::clone(self.clock()),
            client: self.node_client().clone(),
        };
        Ok(Placement::Remote {
            worker: chosen.id.clone(),
            provider: Arc::new(provider),
        })
    }

    /// The provider for a spawn: named, else the default; unknown is 400.
    pub(crate) fn spawn_provider(&self, name: Option<&str>) -> Result<Arc<dyn Provider>, Error> {
        let registry = self.providers();
        let name = name.unwrap_or(registry.default_name());
        registry
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownProvider {
                name: name.to_owned(),
                enabled: registry.names(),
            })
    }

    /// 503 with its health error when `provider` is unhealthy.
    pub(super) async fn ensure_healthy(&self, provider: &Arc<dyn Provider>) -> Result<(), Error> {
        let registry = self.providers();
        let name = provider.name();
        let mut health = registry
            .health_of(provider, crate::providers::HEALTH_MAX_AGE)
            .await;
        if !health.healthy {
            // A provider may have recovered since the cached check.
            health = registry.health_of(provider, Duration::ZERO).await;
        }
        if !health.healthy {
            return Err(Error::ProviderUnavailable {
                provider: name.to_owned(),
                message: health.error.unwrap_or_else(|| "unhealthy".to_owned()),
            });
        }
        Ok(())
    }
}
