//! A dead worker's sandboxes (decisions §11, several replicas on one database). A worker is
//! dead when its heartbeat is older than `worker.stale_after` or it recorded itself `offline`.
//! After every heartbeat, each live replica looks for sandboxes still assigned to a dead
//! worker and, once their lease has lapsed (the lease is what makes exactly one replica act),
//! settles each against its own providers:
//!
//! - a `running` or `paused` sandbox whose runtime still exists and runs (or is frozen) here
//!   (one Docker engine, or one shared mock directory) is taken over: its record names this
//!   worker, which renews its lease from now on (and answers its resume), event
//!   `reconcile.action` `taken_over`;
//! - one whose runtime is gone is ended as `destroyed`/`runtime_vanished` (`marked_destroyed`),
//!   one whose runtime stopped as `error`/`provider_failed` (`marked_error`), as reconciliation
//!   does for a worker's own records;
//! - a `creating` one (the worker died mid-spawn) is resolved as start-up recovery resolves
//!   one's own, and taken over when its runtime turned out to be running.
//!
//! A worker that only lost the database for longer than its lease loses its sandboxes this
//! way: fencing, not a guess about whether it will come back. When it does, its own
//! reconciliation sweeps runtimes whose records ended meanwhile.

use svc_core::access::Action;
use svc_core::sandbox::{Sandbox, SandboxState};
use svc_core::worker::WorkerStatus;
use svc_core::Error;
use svc_provider::RuntimeStatus;
use svc_store::{SandboxFilter, StateFilter};

use crate::reconcile::RuntimeLoss;
use crate::recover::Resolution;
use crate::{ControlPlane, Principal, ReconcileReport};

impl ControlPlane {
    /// Settles the sandboxes of dead workers (module docs), as [`Principal::system`]. Costs
    /// one query when no worker is dead.
    pub async fn take_over_dead_workers(
        &self,
        principal: &Principal,
    ) -> Result<ReconcileReport, Error> {
        self.authorize(principal, Action::Reconcile)?;
        let dead: Vec<String> = self
            .workers_now()
            .await?
            .into_iter()
            .filter(|w| w.id != self.worker_id() && (w.stale || w.status == WorkerStatus::Offline))
            .map(|w| w.id)
            .collect();
        let mut report = ReconcileReport::default();
        for worker in &dead {
            let filter = SandboxFilter {
                state: StateFilter::Active,
                worker_id: Some(worker.clone()),
                ..SandboxFilter::default()
            };
            for orphan in self.store().list_sandboxes(&filter).await? {
                self.settle_orphan(worker, orphan, &mut report).await;
            }
        }
        if report != ReconcileReport::default() {
            tracing::info!(
                taken_over = report.taken_over,
                marked_destroyed = report.marked_destroyed,
                marked_error = report.marked_error,
                fenced = report.fenced,
                "settled the sandboxes of dead workers"
            );
        }
        Ok(report)
    }

    async fn settle_orphan(&self, dead: &str, orphan: Sandbox, report: &mut ReconcileReport) {
        let Some(provider) = self.providers().for_cleanup(&orphan.provider).cloned() else {
            return;
        };
        match orphan.state {
            SandboxState::Creating => {
                if !self.lease_for_reconcile(&orphan.id, report).await {
                    return;
                }
                if let Resolution::Resumed = self.resolve_interrupted(&orphan).await {
                    self.take_over(dead, &orphan, report).await;
                }
            }
            SandboxState::Running | SandboxState::Paused => match provider.status(&orphan.id).await
            {
                Ok(RuntimeStatus::Running) => {
                    if self.lease_for_reconcile(&orphan.id, report).await {
                        self.take_over(dead, &orphan, report).await;
                    }
                }
                Ok(RuntimeStatus::Stopped) => {
                    self.end_lost_runtime(
                        provider.as_ref(),
                        &orphan,
                        RuntimeLoss::Stopped,
                        None,
                        report,
                    )
                    .await;
                }
                Ok(RuntimeStatus::Missing) => {
                    self.end_lost_runtime(
                        provider.as_ref(),
                        &orphan,
                        RuntimeLoss::Vanished,
                        None,
                        report,
                    )
                    .await;
                }
                Err(err) => {
                    tracing::warn!(sandbox_id = %orphan.id, worker_id = dead, error = %err, "a dead worker's sandbox could not be checked; retried after the next heartbeat");
                }
            },
            _ => {}
        }
    }

    /// Moves `orphan` (whose lease this worker now holds) from `dead` to this worker.
    async fn take_over(&self, dead: &str, orphan: &Sandbox, report: &mut ReconcileReport) {
        match self
            .store()
            .reassign_sandbox(&orphan.id, dead, self.worker_id())
            .await
        {
            Ok(Some(mine)) => {
                report.taken_over += 1;
                self.publish_reconcile(&mine, "taken_over");
                tracing::info!(sandbox_id = %mine.id, previous_worker_id = dead, "took over a dead worker's sandbox");
            }
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(sandbox_id = %orphan.id, worker_id = dead, error = %err, "taking over a dead worker's sandbox failed; retried after the next heartbeat");
            }
        }
    }
}
