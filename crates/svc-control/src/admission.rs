//! Spawn admission beyond the store's decision (decisions §10): the admission check endpoint,
//! what a denied spawn does (wait in the spawn queue or fail with 429 `resource_limit`), and
//! the events of both.

use svc_core::access::Action;
use svc_core::admission::Admission;
use svc_core::error::LimitReason;
use svc_core::event::{EventPayload, LimitEventData, SpawnQueueEventData};
use svc_core::sandbox::SpawnRequest;
use svc_core::worker::{Worker, WorkerStatus};
use svc_core::{Error, GoDuration};
use svc_store::KeyPage;

use crate::queue::{QueueStats, Ticket, Woken};
use crate::spawn::{Placement, SpawnPlan};
use crate::{ControlPlane, Principal};

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
        let now = self.clock().now();
        let window = self.config().worker.stale_after.as_std();
        let workers: Vec<svc_core::worker::Worker> = self
            .store()
            .list_workers(&KeyPage::ALL)
            .await?
            .into_iter()
            .map(|w| w.with_staleness(now, window))
            .collect();
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

    /// `POST /sandboxes/admission`: the decision a spawn with this body would get now. Validates
    /// like a spawn (400s) and creates nothing.
    pub async fn check_admission(
        &self,
        principal: &Principal,
        request: SpawnRequest,
    ) -> Result<Admission, Error> {
        self.authorize(principal, Action::CheckAdmission)?;
        let plan = self.resolve(principal, request, None).await?;
        let mut admission = self
            .store()
            .check_admission(&plan.owner, plan.ttl, self.global_limits())
            .await?;
        if let (true, Placement::Elsewhere { reason, .. }) = (admission.allowed, &plan.placement) {
            // Placement is the last check (decisions §10).
            admission.allowed = false;
            admission.reason = Some(*reason);
        }
        admission.queueable = admission.capacity_denied()
            && self.capacity_denials_queue()
            && self.spawn_queue().has_room();
        Ok(admission)
    }

    /// Where a spawn on provider `name` (default: the default provider) runs: here when this
    /// worker runs it; otherwise on another online, fresh worker that offers it and has room,
    /// which admission must refuse (`remote_worker_rpc_unavailable`), or nowhere
    /// (`no_eligible_worker`). A provider no online, fresh worker offers is 400.
    pub(crate) async fn place(&self, name: Option<&str>) -> Result<Placement, Error> {
        let unknown = match self.spawn_provider(name) {
            Ok(provider) => return Ok(Placement::Local(provider)),
            Err(unknown) => unknown,
        };
        let Some(name) = name else {
            return Err(unknown);
        };
        let now = self.clock().now();
        let window = self.config().worker.stale_after.as_std();
        let offering: Vec<Worker> = self
            .store()
            .list_workers(&KeyPage::ALL)
            .await?
            .into_iter()
            .map(|w| w.with_staleness(now, window))
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
            .check_admission(&plan.owner, plan.ttl, self.global_limits())
            .await?;
        let denial = admission
            .error(plan.ttl)
            .unwrap_or_else(|| Error::ResourceLimit {
                reason: *reason,
                message: message.clone(),
            });
        self.publish_limit(&denial, &plan.owner);
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
            self.publish_limit(&denial, &plan.owner);
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
                    self.publish_queue(EventPayload::SpawnQueued, &plan.owner, None);
                    ticket
                }
                Err(full) => {
                    let denial = with_message(denial, |m| {
                        format!(
                            "{m}; the spawn queue is full ({} waiting, max_spawn_queue)",
                            full.max
                        )
                    });
                    self.publish_limit(&denial, &plan.owner);
                    return Err(denial);
                }
            },
        };
        match ticket.wait().await {
            Woken::Retry => Ok(ticket),
            Woken::TimedOut => {
                let waited = ticket.timed_out();
                self.publish_queue(EventPayload::SpawnQueueTimeout, &plan.owner, Some(waited));
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
    fn capacity_denials_queue(&self) -> bool {
        self.config().defaults.spawn_overflow == svc_core::config::SpawnOverflow::Queue
    }

    /// A queued spawn was admitted: leaves the queue, records the wait, publishes
    /// `spawn.dequeued`.
    pub(crate) fn leave_queue(&self, ticket: Option<Ticket>, owner: &str) {
        if let Some(ticket) = ticket {
            let waited = ticket.dequeued();
            self.publish_queue(EventPayload::SpawnDequeued, owner, Some(waited));
        }
    }

    fn publish_queue(
        &self,
        payload: fn(SpawnQueueEventData) -> EventPayload,
        owner: &str,
        waited: Option<std::time::Duration>,
    ) {
        self.events().publish(
            None,
            payload(SpawnQueueEventData {
                owner_id: owner.to_owned(),
                wait: waited.map(|w| GoDuration::new(w).to_string()),
            }),
        );
    }

    /// `resource.limit` for a limit error.
    pub(crate) fn publish_limit(&self, error: &Error, owner: &str) {
        if let Error::ResourceLimit { reason, .. } = error {
            self.events().publish(
                None,
                EventPayload::ResourceLimit(LimitEventData {
                    reason: *reason,
                    owner_id: owner.to_owned(),
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
