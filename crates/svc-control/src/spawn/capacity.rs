//! Step "admit and record" and what a denial does (decisions §10): the owner's quota, capacity
//! and the `creating` record in one store operation (a pool seat first in pool mode); a
//! capacity denial waits in the spawn queue when `defaults.spawn_overflow` is `queue`, anything
//! else fails with 429 `resource_limit`; the events of both; and the scheduler object.

use svc_core::admission::Admission;
use svc_core::clock::add_duration;
use svc_core::error::LimitReason;
use svc_core::event::{EventPayload, LimitEventData, SpawnQueueEventData};
use svc_core::sandbox::{Sandbox, SandboxState};
use svc_core::worker::WorkerStatus;
use svc_core::{Error, GoDuration, OwnerId, SandboxId};

use super::placement::Placement;
use super::plan::SpawnPlan;
use crate::queue::{QueueStats, Ticket, Woken};
use crate::ControlPlane;

/// Why an admission attempt did not admit.
pub(crate) enum Denial {
    /// The store's decision (quota, capacity, TTL).
    Store(Admission),
    /// Pool mode: every pool VM is full.
    PoolFull {
        /// 503 `unavailable`, naming the limits.
        error: Error,
        /// `pool.overflow` is `queue`.
        queues: bool,
    },
}

/// The scheduler object of interface.md (diagnostics and metrics): the spawn queue's state and
/// statistics, and where admitted spawns run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct SchedulerStats {
    /// The queue's configuration, depth, counters and wait statistics.
    #[serde(flatten)]
    pub queue: QueueStats,
    /// How admission is decided: `worker_aware_local` (serialised in the store, placed on this
    /// worker).
    pub admission_control: &'static str,
    /// This process's worker.
    pub worker_id: String,
    /// The worker admitted spawns are placed on.
    pub selected_worker_id: String,
    /// Workers eligible for placement.
    pub eligible_workers: u64,
}

impl ControlPlane {
    /// The scheduler object. Spawns are placed on this worker (the local worker is chosen
    /// whenever it runs the provider); `eligible_workers` counts the online, fresh workers of
    /// the registry, this one always included.
    pub async fn scheduler_stats(&self) -> Result<SchedulerStats, Error> {
        let workers = self.workers_now().await?;
        Ok(self.scheduler_stats_of(&workers))
    }

    /// The scheduler object for `workers` as listed now (staleness set).
    pub(crate) fn scheduler_stats_of(
        &self,
        workers: &[svc_core::worker::Worker],
    ) -> SchedulerStats {
        let others = workers
            .iter()
            .filter(|w| w.id != self.worker_id() && w.status == WorkerStatus::Online && !w.stale)
            .count();
        SchedulerStats {
            queue: self.spawn_queue().stats(),
            admission_control: "worker_aware_local",
            worker_id: self.worker_id().to_owned(),
            selected_worker_id: self.worker_id().to_owned(),
            eligible_workers: 1 + u64::try_from(others).unwrap_or(0),
        }
    }

    /// The sandbox `existing`, if a caller spawning in `tenant` may hear of it: the owner IDs
    /// of pool mode are shared across tenants, their sandboxes are not (decisions §30).
    async fn named_to(&self, tenant: &str, existing: Option<String>) -> Option<String> {
        let id = SandboxId::parse(existing.as_deref()?).ok()?;
        let sandbox = self.store().get_sandbox(&id).await.ok()??;
        if sandbox.tenant_id == tenant {
            existing
        } else {
            None
        }
    }

    /// Step "admit and record": the owner's quota read, capacity counted, the decision made
    /// and the `creating` record inserted, in one store operation. `Err` inside is the denial.
    pub(super) async fn admit_and_record(
        &self,
        plan: &SpawnPlan,
    ) -> Result<Result<Sandbox, Denial>, Error> {
        let sandbox = self.new_record(plan);
        // Pool mode: a seat first, so a full pool refuses before anything is written.
        let pool = self.providers().pool();
        if let Some(pool) = pool {
            match pool.reserve(plan.owner.as_ref(), &sandbox.id).await {
                Ok(()) => {}
                Err(error @ Error::PoolFull { .. }) => {
                    return Ok(Err(Denial::PoolFull {
                        error,
                        queues: pool.queues(),
                    }))
                }
                Err(Error::OwnerHasSandbox { owner, existing }) => {
                    return Err(Error::OwnerHasSandbox {
                        existing: self.named_to(&plan.tenant, existing).await,
                        owner,
                    })
                }
                Err(error) => return Err(error),
            }
        }
        let admission = self
            .store()
            .admit_sandbox(
                &sandbox,
                plan.ttl,
                self.global_limits(),
                self.config().worker.lease_ttl.as_std(),
            )
            .await;
        let admission = match admission {
            Ok(admission) if admission.allowed => admission,
            other => {
                if let Some(pool) = pool {
                    pool.cancel(&sandbox.id);
                }
                let admission = other?;
                return Ok(Err(Denial::Store(admission)));
            }
        };
        Ok(if admission.allowed {
            // The node chosen holds the lease: this one only when it runs the sandbox.
            if sandbox.worker_id.as_deref() == Some(self.worker_id()) {
                self.inner.held_leases.record(
                    sandbox.id.as_str(),
                    add_duration(sandbox.created_at, self.config().worker.lease_ttl.as_std()),
                );
            }
            Ok(sandbox)
        } else {
            Err(Denial::Store(admission))
        })
    }

    fn new_record(&self, plan: &SpawnPlan) -> Sandbox {
        let now = self.clock().now();
        let id = SandboxId::generate();
        Sandbox {
            preview_domain: format!("{id}.{}", self.config().server.preview_domain),
            id,
            state: SandboxState::Creating,
            provider: plan.provider_name.clone(),
            image: plan.image.clone(),
            memory_mb: plan.memory_mb,
            vcpus: plan.vcpus,
            created_at: now,
            expires_at: add_duration(now, plan.ttl),
            metadata: plan.metadata.clone(),
            worker_id: Some(match &plan.placement {
                Placement::Remote { worker, .. } => worker.clone(),
                _ => self.worker_id().to_owned(),
            }),
            tenant_id: plan.tenant.clone(),
            owner_id: plan.owner.clone(),
            template: plan.template.clone(),
            network: plan.network.clone(),
            destroyed_at: None,
            state_reason: None,
            state_message: None,
            paused_at: None,
            paused_for: std::time::Duration::ZERO,
            egress: plan.egress.clone(),
            env: plan.env.clone(),
            exec_path: None,
        }
    }

    /// The answer to a spawn placed on another worker: its capacity denial when it has one
    /// (decisions §10 order), else the placement's. Publishes `resource.limit`.
    pub(crate) async fn refuse_elsewhere(&self, plan: &SpawnPlan) -> Result<Error, Error> {
        let Placement::Elsewhere {
            reason, message, ..
        } = &plan.placement
        else {
            return Err(Error::internal(
                "placing a spawn",
                "a local spawn was refused as remote",
            ));
        };
        let admission = self
            .store()
            .check_admission(plan.owner.as_ref(), plan.ttl, self.global_limits())
            .await?;
        let denial = admission
            .error(plan.ttl)
            .unwrap_or_else(|| Error::ResourceLimit {
                reason: *reason,
                message: message.clone(),
            });
        self.publish_limit(&denial, plan.owner.as_ref());
        Ok(denial)
    }

    /// A spawn was refused: in `queue` mode a capacity denial waits for capacity (joining the
    /// queue, or keeping its place); anything else fails now. Returns the ticket to retry with.
    pub(crate) async fn wait_for_capacity(
        &self,
        plan: &SpawnPlan,
        denied: Denial,
        queued: Option<Ticket>,
        seen_epoch: u64,
    ) -> Result<Ticket, Error> {
        let (denial, queueable, own_limit) = match denied {
            Denial::Store(admission) => (
                admission.error(plan.ttl).unwrap_or_else(|| {
                    Error::internal("admitting a spawn", "refused without a reason")
                }),
                admission.capacity_denied() && self.capacity_denials_queue(),
                admission.reason == Some(LimitReason::MaxOwnerSandboxes),
            ),
            Denial::PoolFull { error, queues } => (error, queues, false),
        };
        let queue = self.spawn_queue();
        if !queueable {
            self.publish_limit(&denial, plan.owner.as_ref());
            return Err(denial);
        }
        let ticket = match queued {
            Some(ticket) => {
                if own_limit {
                    // This owner is at its own limit; another owner behind may fit.
                    ticket.pass_on();
                }
                ticket
            }
            None => match queue.join(seen_epoch) {
                Ok(ticket) => {
                    self.publish_queue(EventPayload::SpawnQueued, plan.owner.as_ref(), None);
                    ticket
                }
                Err(full) => {
                    let denial = with_message(denial, |m| {
                        format!(
                            "{m}; the spawn queue is full ({} waiting, max_spawn_queue)",
                            full.max
                        )
                    });
                    self.publish_limit(&denial, plan.owner.as_ref());
                    return Err(denial);
                }
            },
        };
        match ticket.wait().await {
            Woken::Retry => Ok(ticket),
            Woken::TimedOut => {
                let waited = ticket.timed_out();
                self.publish_queue(
                    EventPayload::SpawnQueueTimeout,
                    plan.owner.as_ref(),
                    Some(waited),
                );
                Err(with_message(denial, |m| {
                    format!(
                        "no capacity within {} in the spawn queue (spawn_queue_timeout): {m}",
                        queue.timeout()
                    )
                }))
            }
        }
    }

    /// Whether capacity denials wait in the spawn queue (`defaults.spawn_overflow`).
    pub(crate) fn capacity_denials_queue(&self) -> bool {
        self.config().defaults.spawn_overflow == svc_core::config::SpawnOverflow::Queue
    }

    /// A queued spawn was admitted: leaves the queue, records the wait, publishes
    /// `spawn.dequeued`.
    pub(crate) fn leave_queue(&self, ticket: Option<Ticket>, owner: Option<&OwnerId>) {
        if let Some(ticket) = ticket {
            let waited = ticket.dequeued();
            self.publish_queue(EventPayload::SpawnDequeued, owner, Some(waited));
        }
    }

    fn publish_queue(
        &self,
        payload: fn(SpawnQueueEventData) -> EventPayload,
        owner: Option<&OwnerId>,
        waited: Option<std::time::Duration>,
    ) {
        self.events().publish(
            None,
            payload(SpawnQueueEventData {
                owner_id: owner.cloned(),
                wait: waited.map(|w| GoDuration::new(w).to_string()),
            }),
        );
    }

    /// `resource.limit` for a limit error.
    pub(crate) fn publish_limit(&self, error: &Error, owner: Option<&OwnerId>) {
        if let Error::ResourceLimit { reason, .. } = error {
            self.events().publish(
                None,
                EventPayload::ResourceLimit(LimitEventData {
                    reason: *reason,
                    owner_id: owner.cloned(),
                }),
            );
        }
    }
}

/// The same limit error with its message rewritten.
fn with_message(error: Error, rewrite: impl FnOnce(&str) -> String) -> Error {
    match error {
        Error::ResourceLimit { reason, message } => Error::ResourceLimit {
            reason,
            message: rewrite(&message),
        },
        Error::PoolFull { message } => Error::PoolFull {
            message: rewrite(&message),
        },
        other => other,
    }
}
