//! The spawn pipeline, one named step at a time (ARCHITECTURE, "The spawn pipeline"):
//!
//! authorize → resolve ([`plan`]) → place ([`placement`]) → admit and record, or wait for
//! capacity ([`capacity`]) → provider spawn with a deadline, mark running, publish
//! ([`runtime`]).
//!
//! Every check that can answer 400 happens in resolve, before anything is written. Admission and
//! the record are ONE store operation (the capacity rule lives in the store contract). From
//! admission on, the steps run in a task the HTTP handler does not own, under a guard that
//! undoes them: a client that disconnects, a handler that times out or a panic never leaves a
//! runtime without a record or a record without a runtime. A failure undoes the earlier steps
//! in reverse (decisions §4): the runtime is removed, the record ends as `error` with
//! `spawn_failed`, and `sandbox.error` and `operation.failed` are published.

mod capacity;
mod checks;
mod placement;
mod plan;
mod runtime;

use std::sync::Arc;

use svc_core::access::Action;
use svc_core::sandbox::{Sandbox, SpawnRequest};
use svc_core::template::TemplateSpawnRequest;
use svc_core::Error;
use tokio::sync::oneshot;

pub use capacity::SchedulerStats;
pub(crate) use checks::{check_egress_for, check_image_for, check_sizes};
pub(crate) use placement::Placement;

use crate::queue::Ticket;
use crate::{ControlPlane, Principal};

impl ControlPlane {
    /// `POST /sandboxes`.
    pub async fn spawn_sandbox(
        &self,
        principal: &Principal,
        request: SpawnRequest,
    ) -> Result<Sandbox, Error> {
        self.spawn(principal, request, None).await
    }

    /// `POST /templates/{name}/spawn`.
    pub async fn spawn_from_template(
        &self,
        principal: &Principal,
        name: &str,
        request: TemplateSpawnRequest,
    ) -> Result<Sandbox, Error> {
        let spawn = SpawnRequest {
            ttl: request.ttl,
            provider: request.provider,
            env: request.env,
            metadata: request.metadata,
            ..SpawnRequest::default()
        };
        self.spawn(principal, spawn, Some(name)).await
    }

    /// The pipeline, with or without a template named in the path.
    async fn spawn(
        &self,
        principal: &Principal,
        request: SpawnRequest,
        template: Option<&str>,
    ) -> Result<Sandbox, Error> {
        self.authorize(principal, Action::Spawn)?;
        let template = match template {
            Some(name) => Some(self.visible_template(principal, name).await?),
            None => None,
        };
        let plan = self.resolve(principal, request, template).await?;
        if let Placement::Local(provider) = &plan.placement {
            self.ensure_healthy(provider).await?;
        }
        self.admit_and_create(plan).await
    }

    /// Admission (waiting in the spawn queue when it is on and capacity is full), then the
    /// runtime. The handler may be dropped at any await (client gone, timeout): while queued,
    /// that leaves the queue at once; from the admitting write on, the work runs in a task the
    /// handler does not own (a write handed to the store completes even when its caller is
    /// gone), and a panic inside surfaces as an internal error with the undo started.
    async fn admit_and_create(&self, plan: plan::SpawnPlan) -> Result<Sandbox, Error> {
        let provider = match &plan.placement {
            Placement::Local(provider) | Placement::Remote { provider, .. } => Arc::clone(provider),
            Placement::Elsewhere { .. } => return Err(self.refuse_elsewhere(&plan).await?),
        };
        let plan = Arc::new(plan);
        let mut queued: Option<Ticket> = None;
        loop {
            let epoch = self.spawn_queue().epoch();
            let (admitted_tx, mut admitted_rx) = oneshot::channel();
            let attempt = {
                let plan = Arc::clone(&plan);
                let provider = Arc::clone(&provider);
                self.detached(move |plane| async move {
                    let record = match plane.admit_and_record(&plan).await? {
                        Ok(record) => record,
                        Err(admission) => return Ok(Err(admission)),
                    };
                    let _ = admitted_tx.send(());
                    let warm = plane.take_warm(&plan);
                    plane.create_runtime(provider, record, warm).await.map(Ok)
                })
            };
            tokio::pin!(attempt);
            // A waiter leaves the queue as soon as it is admitted, not when its runtime is
            // ready: the baton passes on while the runtime is being made.
            let outcome = tokio::select! {
                outcome = &mut attempt => outcome,
                Ok(()) = &mut admitted_rx => {
                    self.leave_queue(queued.take(), plan.owner.as_ref());
                    attempt.await
                }
            };
            if admitted_rx.try_recv().is_ok() {
                self.leave_queue(queued.take(), plan.owner.as_ref());
            }
            let denial = match outcome? {
                Ok(sandbox) => return Ok(sandbox),
                Err(denial) => denial,
            };
            queued = Some(
                self.wait_for_capacity(&plan, denial, queued.take(), epoch)
                    .await?,
            );
        }
    }
}
