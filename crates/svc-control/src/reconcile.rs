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
//!
//! Only providers that list their runtimes take part; one whose listing fails is skipped this
//! round (a provider that cannot answer must not make every record look vanished).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use svc_core::access::Action;
use svc_core::clock::add_duration;
use svc_core::event::{EventPayload, ReconcileEventData};
use svc_core::sandbox::{Ending, Sandbox, SandboxState, StateReason};
use svc_core::worker::LeaseAcquire;
use svc_core::{Capability, Error, SandboxId};
use svc_provider::{
    Provider, RuntimeInfo, RuntimeStatus, LABEL_INSTALLATION, LABEL_MANAGED, LABEL_OWNER,
    LABEL_TENANT,
};
use svc_store::{EndedState, SandboxFilter, StateFilter};
use tokio_util::sync::CancellationToken;

use crate::principal::DEFAULT_TENANT;
use crate::spawn::sandbox_event_data;
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
    /// Runtimes removed because their record had already ended.
    pub swept: usize,
    /// Changes another worker's lease kept us from making.
    pub fenced: usize,
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
            let present: HashSet<&SandboxId> = runtimes.iter().map(|r| &r.sandbox_id).collect();
            for runtime in runtimes {
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
            let vanished = records.values().filter(|r| {
                r.provider == provider.name()
                    && r.state == SandboxState::Running
                    && r.worker_id.as_deref() == Some(self.worker_id())
                    && !present.contains(&r.id)
            });
            for record in vanished {
                self.mark_vanished(provider.as_ref(), record, &mut report)
                    .await;
            }
        }
        if report != ReconcileReport::default() {
            tracing::info!(
                adopted = report.adopted,
                marked_destroyed = report.marked_destroyed,
                swept = report.swept,
                fenced = report.fenced,
                "reconciled the store with the providers"
            );
        }
        Ok(report)
    }

    /// True for a runtime this deployment made: svc's label and this database's installation
    /// ID. Another deployment's runtimes on a shared engine are never adopted.
    fn made_here(&self, runtime: &RuntimeInfo) -> bool {
        let label = |key: &str| runtime.labels.get(key).map(String::as_str);
        label(LABEL_MANAGED) == Some("true")
            && label(LABEL_INSTALLATION) == Some(self.inner.installation_id.as_str())
    }

    /// Takes the lease of `id` for this worker; false (counted as fenced) when another holds it.
    async fn lease_for_reconcile(&self, id: &SandboxId, report: &mut ReconcileReport) -> bool {
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
        let record = self.adopted_record(provider, runtime);
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
            owner_id: label(LABEL_OWNER),
            template: None,
            network: None,
            destroyed_at: None,
            state_reason: None,
            state_message: None,
            env: BTreeMap::new(),
        }
    }

    async fn mark_vanished(
        &self,
        provider: &dyn Provider,
        record: &Sandbox,
        report: &mut ReconcileReport,
    ) {
        // The inventory was taken before the records were read: a runtime made in between
        // is absent from it but present now.
        if !matches!(
            provider.status(&record.id).await,
            Ok(RuntimeStatus::Missing)
        ) {
            return;
        }
        if !self.lease_for_reconcile(&record.id, report).await {
            return;
        }
        let ending = Ending {
            reason: StateReason::RuntimeVanished,
            message: format!("the runtime was gone from provider {}", record.provider),
        };
        let ended = self
            .store()
            .end_sandbox(
                &record.id,
                EndedState::Destroyed,
                &ending,
                self.clock().now(),
            )
            .await;
        match ended {
            Ok(Some(ended)) => {
                self.inner.held_leases.forget(ended.id.as_str());
                report.marked_destroyed += 1;
                self.spawn_queue().capacity_changed();
                self.publish_reconcile(&ended, "marked_destroyed");
                self.events().publish(
                    Some(&ended.id),
                    EventPayload::SandboxDestroyed(sandbox_event_data(&ended)),
                );
            }
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(sandbox_id = %record.id, error = %err, "reconciliation: ending a vanished sandbox failed");
            }
        }
    }

    fn publish_reconcile(&self, sandbox: &Sandbox, action: &str) {
        self.events().publish(
            Some(&sandbox.id),
            EventPayload::ReconcileAction(ReconcileEventData {
                action: action.to_owned(),
                provider: sandbox.provider.clone(),
                image: sandbox.image.clone(),
            }),
        );
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
