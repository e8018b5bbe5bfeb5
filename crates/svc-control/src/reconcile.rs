//! Reconciliation (decisions §11), at start-up and every five minutes: the store and the
//! providers are brought to agree.
//!
//! - A runtime carrying this service's labels and this database's installation ID that the
//!   store does not know (say, after restoring an older backup) is adopted when its lease can
//!   be taken: recorded as a `running` sandbox of this worker (owner and tenant from
//!   its labels, the default TTL from now), event `reconcile.action` `adopted_runtime`.
//! - A runtime whose record has ended (a rollback or destroy whose removal had not succeeded
//!   when the process stopped, or whose background retry gave up at shutdown) is removed.
//! - A `running` record whose runtime is gone from its provider's inventory is ended as
//!   `destroyed` with `state_reason: runtime_vanished` when its lease can be taken, event
//!   `reconcile.action` `marked_destroyed` (and `sandbox.destroyed`).
//! - A `running` record whose runtime is still listed but no longer runs (a container that
//!   exited, was killed or OOM-killed) is ended as `error` with `state_reason:
//!   provider_failed` when its lease can be taken, and the stopped runtime is removed, event
//!   `reconcile.action` `marked_error` (and `sandbox.error`). The record is ended before the
//!   runtime is removed: a removal that fails leaves a runtime whose record has ended, which
//!   the next pass sweeps, whereas the other order would leave a record the next pass would
//!   wrongly call vanished.
//!
//! Every event about a sandbox is published in its tenant, so tenant-scoped subscribers learn
//! what became of their sandboxes (decisions §12).
//!
//! Only providers that list their runtimes take part; one whose listing fails is skipped this
//! round (a provider that cannot answer must not make every record look vanished).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use svc_core::access::Action;
use svc_core::clock::add_duration;
use svc_core::event::{EventPayload, ReconcileEventData, SandboxEventData};
use svc_core::sandbox::{Ending, Sandbox, SandboxState, StateReason};
use svc_core::worker::LeaseAcquire;
use svc_core::{Capability, Error, OwnerId, SandboxId};
use svc_provider::{
    Provider, RuntimeInfo, RuntimeStatus, LABEL_INSTALLATION, LABEL_MANAGED, LABEL_OWNER,
    LABEL_POOL, LABEL_TENANT,
};
use svc_store::{EndedState, SandboxFilter, StateFilter};
use tokio_util::sync::CancellationToken;

use crate::principal::DEFAULT_TENANT;
use crate::sandboxes::sandbox_event_data;
use crate::{ControlPlane, Principal};

/// How often reconciliation runs after start-up.
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// What one reconciliation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Unknown runtimes recorded as sandboxes of this worker.
    pub adopted: usize,
    /// Records whose runtime had vanished, ended as `destroyed`.
    pub marked_destroyed: usize,
    /// Records whose runtime had stopped, ended as `error` (its runtime removed).
    pub marked_error: usize,
    /// Runtimes removed because their record had already ended.
    pub swept: usize,
    /// Changes another worker's lease kept us from making.
    pub fenced: usize,
    /// Dead workers' sandboxes this worker took over (`takeover.rs`).
    pub taken_over: usize,
}

impl ControlPlane {
    /// One reconciliation pass, as [`Principal::system`].
    pub async fn reconcile(&self, principal: &Principal) -> Result<ReconcileReport, Error> {
        self.authorize(principal, Action::Reconcile)?;
        let mut inventories: Vec<(Arc<dyn Provider>, Vec<RuntimeInfo>)> = Vec::new();
        for provider in self.providers().all_for_cleanup() {
            if !provider
                .capabilities()
                .contains(&Capability::RuntimeInventory)
            {
                continue;
            }
            match provider.inventory().await {
                Ok(runtimes) => inventories.push((Arc::clone(provider), runtimes)),
                Err(err) => {
                    tracing::warn!(provider = provider.name(), error = %err, "reconciliation: listing runtimes failed; provider skipped");
                }
            }
        }
        // Records are read after the inventories: a runtime is created after its record, so
        // every runtime listed has its record in this listing unless the store lost it.
        let everything = SandboxFilter {
            state: StateFilter::All,
            ..SandboxFilter::default()
        };
        let records: HashMap<SandboxId, Sandbox> = self
            .store()
            .list_sandboxes(&everything)
            .await?
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect();
        let mut report = ReconcileReport::default();
        for (provider, runtimes) in &inventories {
            let present: HashMap<&SandboxId, &RuntimeInfo> =
                runtimes.iter().map(|r| (&r.sandbox_id, r)).collect();
            for runtime in runtimes {
                if crate::warm::fill::is_unclaimed_warm(runtime) {
                    // A pool's, not a sandbox's (`warm/`).
                    continue;
                }
                if records
                    .get(&runtime.sandbox_id)
                    .is_some_and(|r| r.state.has_ended())
                {
                    match provider.destroy(&runtime.sandbox_id).await {
                        Ok(()) => report.swept += 1,
                        Err(err) => {
                            tracing::warn!(sandbox_id = %runtime.sandbox_id, error = %err, "reconciliation: removing an ended sandbox's runtime failed");
                        }
                    }
                    continue;
                }
                if self.made_here(runtime)
                    && runtime.running
                    && !records.contains_key(&runtime.sandbox_id)
                {
                    self.adopt(provider.as_ref(), runtime, &mut report).await;
                }
            }
            // A worker judges only its own records: another's runtimes may live where this
            // provider cannot see them.
            let own_running = records.values().filter(|r| {
                r.provider == provider.name()
                    && r.state == SandboxState::Running
                    && r.worker_id.as_deref() == Some(self.worker_id())
            });
            for record in own_running {
                let loss = match present.get(&record.id) {
                    None => RuntimeLoss::Vanished,
                    Some(runtime) if !runtime.running => RuntimeLoss::Stopped,
                    Some(_) => continue,
                };
                self.end_lost_runtime(provider.as_ref(), record, loss, None, &mut report)
                    .await;
            }
        }
        if report != ReconcileReport::default() {
            tracing::info!(
                adopted = report.adopted,
                marked_destroyed = report.marked_destroyed,
                marked_error = report.marked_error,
                swept = report.swept,
                fenced = report.fenced,
                "reconciled the store with the providers"
            );
        }
        Ok(report)
    }

    /// True for a runtime this deployment made: svc's label and this database's installation
    /// ID. Another deployment's runtimes on a shared engine are never adopted, nor are pool VMs
    /// (a replica in pool mode keeps them; they are never sandboxes).
    pub(crate) fn made_here(&self, runtime: &RuntimeInfo) -> bool {
        let label = |key: &str| runtime.labels.get(key).map(String::as_str);
        label(LABEL_MANAGED) == Some("true")
            && label(LABEL_INSTALLATION) == Some(self.inner.installation_id.as_str())
            && label(LABEL_POOL).is_none()
    }

    /// Takes the lease of `id` for this worker; false (counted as fenced) when another holds it.
    pub(crate) async fn lease_for_reconcile(
        &self,
        id: &SandboxId,
        report: &mut ReconcileReport,
    ) -> bool {
        let acquired = self
            .store()
            .acquire_lease(
                id.as_str(),
                self.worker_id(),
                self.config().worker.lease_ttl.as_std(),
                self.clock().now(),
            )
            .await;
        match acquired {
            Ok(LeaseAcquire::Acquired(lease)) => {
                self.inner.held_leases.record(id.as_str(), lease.expires_at);
                true
            }
            Ok(LeaseAcquire::Held(_)) => {
                report.fenced += 1;
                false
            }
            Err(err) => {
                tracing::warn!(sandbox_id = %id, error = %err, "reconciliation: taking a lease failed");
                false
            }
        }
    }

    async fn adopt(
        &self,
        provider: &dyn Provider,
        runtime: &RuntimeInfo,
        report: &mut ReconcileReport,
    ) {
        if !self.lease_for_reconcile(&runtime.sandbox_id, report).await {
            return;
        }
        let mut record = self.adopted_record(provider, runtime);
        record.exec_path = provider.exec_path(&record.id).await;
        if let Err(err) = self.store().insert_sandbox(&record).await {
            // The lease is left to lapse: a record that appeared meanwhile is its holder's.
            tracing::warn!(sandbox_id = %record.id, error = %err, "reconciliation: recording an adopted runtime failed");
            return;
        }
        report.adopted += 1;
        self.publish_reconcile(&record, "adopted_runtime");
        self.spawn_queue().capacity_changed();
        tracing::info!(sandbox_id = %record.id, provider = provider.name(), "adopted a runtime the store did not know");
    }

    /// The record of an adopted runtime: what its labels and the defaults say.
    fn adopted_record(&self, provider: &dyn Provider, runtime: &RuntimeInfo) -> Sandbox {
        let defaults = &self.config().defaults;
        let now = self.clock().now();
        let label = |key: &str| runtime.labels.get(key).cloned().unwrap_or_default();
        let tenant = Some(label(LABEL_TENANT))
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| DEFAULT_TENANT.to_owned());
        let id = runtime.sandbox_id.clone();
        Sandbox {
            preview_domain: format!("{id}.{}", self.config().server.preview_domain),
            id,
            state: SandboxState::Running,
            provider: provider.name().to_owned(),
            image: runtime.image.clone(),
            memory_mb: u32::try_from(defaults.memory_mb).unwrap_or(u32::MAX),
            vcpus: defaults.vcpus,
            created_at: now,
            expires_at: add_duration(now, defaults.ttl.as_std()),
            metadata: BTreeMap::new(),
            worker_id: Some(self.worker_id().to_owned()),
            tenant_id: tenant,
            owner_id: OwnerId::parse(&label(LABEL_OWNER)).ok(),
            template: None,
            network: None,
            destroyed_at: None,
            state_reason: None,
            state_message: None,
            paused_at: None,
            paused_for: std::time::Duration::ZERO,
            egress: svc_core::egress::Egress::default(),
            env: BTreeMap::new(),
            exec_path: None,
        }
    }

    /// Ends a `running` record whose runtime is lost (`loss`), once the provider confirms it
    /// and the lease is ours: `destroyed`/`runtime_vanished` for a vanished runtime,
    /// `error`/`provider_failed` for a stopped one, whose runtime is then removed. `reported`
    /// is the provider's own account when it noticed the loss itself (no reconciliation pass
    /// found it, so no `reconcile.action` is published).
    pub(crate) async fn end_lost_runtime(
        &self,
        provider: &dyn Provider,
        record: &Sandbox,
        loss: RuntimeLoss,
        reported: Option<&str>,
        report: &mut ReconcileReport,
    ) {
        // The inventory was taken before the records were read: a runtime made in between
        // is absent from it but present now, and one may have started again since.
        match provider.status(&record.id).await {
            Ok(status) if status == loss.status() => {}
            _ => return,
        }
        if !self.lease_for_reconcile(&record.id, report).await {
            return;
        }
        let mut ending = loss.ending(&record.provider);
        if let Some(reported) = reported {
            ending.message = reported.to_owned();
        }
        let ended = self
            .store()
            .end_sandbox(&record.id, loss.ended_state(), &ending, self.clock().now())
            .await;
        let ended = match ended {
            Ok(Some(ended)) => ended,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(sandbox_id = %record.id, reason = ending.reason.as_str(), error = %err, "reconciliation: ending a sandbox whose runtime was lost failed");
                return;
            }
        };
        self.inner.held_leases.forget(ended.id.as_str());
        self.inner.exec_jobs.forget(&ended.id);
        match loss {
            RuntimeLoss::Vanished => report.marked_destroyed += 1,
            RuntimeLoss::Stopped => {
                report.marked_error += 1;
                if let Err(err) = provider.destroy(&ended.id).await {
                    // Its record has ended: the next pass sweeps it.
                    tracing::warn!(sandbox_id = %ended.id, error = %err, "reconciliation: removing a stopped runtime failed; retried at the next pass");
                }
            }
        }
        self.spawn_queue().capacity_changed();
        if reported.is_none() {
            self.publish_reconcile(&ended, loss.action());
        }
        let data = sandbox_event_data(&ended);
        let payload = match loss {
            RuntimeLoss::Vanished => EventPayload::SandboxDestroyed(data),
            RuntimeLoss::Stopped => EventPayload::SandboxError(SandboxEventData {
                error: Some(ending.message.clone()),
                ..data
            }),
        };
        self.events()
            .publish_in(&ended.tenant_id, Some(&ended.id), payload);
        tracing::warn!(sandbox_id = %ended.id, tenant_id = %ended.tenant_id, provider = %ended.provider, reason = ending.reason.as_str(), state_message = %ending.message, "ended a sandbox whose runtime was lost");
    }

    pub(crate) fn publish_reconcile(&self, sandbox: &Sandbox, action: &str) {
        self.events().publish_in(
            &sandbox.tenant_id,
            Some(&sandbox.id),
            EventPayload::ReconcileAction(ReconcileEventData {
                action: action.to_owned(),
                provider: sandbox.provider.clone(),
                image: sandbox.image.clone(),
            }),
        );
    }
}

/// How a `running` record's runtime was found lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RuntimeLoss {
    /// Gone from the provider's inventory.
    Vanished,
    /// Listed, but no longer running.
    Stopped,
}

impl RuntimeLoss {
    /// What the provider must still answer for the loss to be acted on.
    fn status(self) -> RuntimeStatus {
        match self {
            RuntimeLoss::Vanished => RuntimeStatus::Missing,
            RuntimeLoss::Stopped => RuntimeStatus::Stopped,
        }
    }

    fn ended_state(self) -> EndedState {
        match self {
            RuntimeLoss::Vanished => EndedState::Destroyed,
            RuntimeLoss::Stopped => EndedState::Error,
        }
    }

    fn ending(self, provider: &str) -> Ending {
        match self {
            RuntimeLoss::Vanished => Ending {
                reason: StateReason::RuntimeVanished,
                message: format!("the runtime was gone from provider {provider}"),
            },
            RuntimeLoss::Stopped => Ending {
                reason: StateReason::ProviderFailed,
                message: format!("the runtime stopped on provider {provider}"),
            },
        }
    }

    /// The `reconcile.action` action.
    fn action(self) -> &'static str {
        match self {
            RuntimeLoss::Vanished => "marked_destroyed",
            RuntimeLoss::Stopped => "marked_error",
        }
    }
}

/// Reconciles every [`RECONCILE_INTERVAL`] until shutdown (the start-up pass runs before
/// serving, from the server).
pub(crate) async fn run(plane: ControlPlane, cancel: CancellationToken) {
    let start = tokio::time::Instant::now() + RECONCILE_INTERVAL;
    let mut tick = tokio::time::interval_at(start, RECONCILE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = tick.tick() => {
                if let Err(err) = plane.reconcile(&Principal::system()).await {
                    tracing::warn!(error = %err, "reconciliation failed; retried at the next interval");
                }
            }
        }
    }
}
