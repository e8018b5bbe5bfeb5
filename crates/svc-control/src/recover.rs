//! Crash safety of the spawn pipeline, run once at start-up before serving:
//!
//! - sandboxes this worker left in `creating` (the process died between the record and
//!   `running`) are resolved against their provider: a runtime that exists and runs makes the
//!   sandbox `running`; anything else is removed and the record ends as `error` with
//!   `spawn_failed`. A record whose runtime cannot be checked or removed (provider down) stays
//!   `creating` for the next start;
//! - runtimes whose record has already ended (a rollback or destroy whose removal had not
//!   succeeded when the process stopped) are removed.

use std::collections::HashSet;

use svc_core::access::Action;
use svc_core::event::EventPayload;
use svc_core::sandbox::{Sandbox, SandboxState};
use svc_core::{Capability, Error, SandboxId};
use svc_provider::RuntimeStatus;
use svc_store::{SandboxFilter, StateFilter};

use crate::spawn::sandbox_event_data;
use crate::{ControlPlane, Principal};

/// What start-up recovery did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records found in `creating`.
    pub found: usize,
    /// Made `running`: their runtime was there.
    pub resumed: usize,
    /// Ended as `error`: no usable runtime (any leftover was removed).
    pub failed: usize,
    /// Left `creating`: the provider could not be asked or could not remove the runtime.
    pub unresolved: usize,
    /// Runtimes removed because their record had already ended.
    pub swept: usize,
}

enum Resolution {
    Resumed,
    Failed,
    Unresolved,
}

impl ControlPlane {
    /// Resolves this worker's `creating` records and removes runtimes of ended ones; call once
    /// at start-up, before serving, as [`Principal::system`].
    pub async fn recover_interrupted_spawns(
        &self,
        principal: &Principal,
    ) -> Result<RecoveryReport, Error> {
        self.authorize(principal, Action::Reconcile)?;
        let filter = SandboxFilter {
            state: StateFilter::Only(SandboxState::Creating),
            worker_id: Some(self.worker_id().to_owned()),
            ..SandboxFilter::default()
        };
        let interrupted = self.store().list_sandboxes(&filter).await?;
        let mut report = RecoveryReport {
            found: interrupted.len(),
            ..RecoveryReport::default()
        };
        for sandbox in &interrupted {
            match self.resolve_interrupted(sandbox).await {
                Resolution::Resumed => report.resumed += 1,
                Resolution::Failed => report.failed += 1,
                Resolution::Unresolved => report.unresolved += 1,
            }
        }
        report.swept = self.sweep_ended_runtimes().await;
        if report.found > 0 || report.swept > 0 {
            tracing::info!(
                found = report.found,
                resumed = report.resumed,
                failed = report.failed,
                unresolved = report.unresolved,
                swept = report.swept,
                "recovered spawns interrupted by a restart"
            );
        }
        Ok(report)
    }

    /// Removes runtimes whose sandbox record has ended. Runtimes the store does not know are
    /// left alone (reconciliation adopts them). The ended records are read in one listing, not
    /// one lookup per runtime.
    async fn sweep_ended_runtimes(&self) -> usize {
        let mut inventories = Vec::new();
        for provider in self.providers().all_for_cleanup() {
            if !provider
                .capabilities()
                .contains(&Capability::RuntimeInventory)
            {
                continue;
            }
            match provider.inventory().await {
                Ok(runtimes) if !runtimes.is_empty() => inventories.push((provider, runtimes)),
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(provider = provider.name(), error = %err, "listing runtimes at start-up failed");
                }
            }
        }
        if inventories.is_empty() {
            return 0;
        }
        let everything = SandboxFilter {
            state: StateFilter::All,
            ..SandboxFilter::default()
        };
        let ended: HashSet<SandboxId> = match self.store().list_sandboxes(&everything).await {
            Ok(records) => records
                .into_iter()
                .filter(|r| r.state.has_ended())
                .map(|r| r.id)
                .collect(),
            Err(err) => {
                tracing::warn!(error = %err, "listing sandboxes for the start-up sweep failed");
                return 0;
            }
        };
        let mut swept = 0;
        for (provider, runtimes) in inventories {
            for runtime in runtimes.iter().filter(|r| ended.contains(&r.sandbox_id)) {
                match provider.destroy(&runtime.sandbox_id).await {
                    Ok(()) => swept += 1,
                    Err(err) => {
                        tracing::warn!(sandbox_id = %runtime.sandbox_id, error = %err, "removing an ended sandbox's runtime failed");
                    }
                }
            }
        }
        swept
    }

    async fn resolve_interrupted(&self, sandbox: &Sandbox) -> Resolution {
        let Some(provider) = self.providers().for_cleanup(&sandbox.provider) else {
            tracing::warn!(sandbox_id = %sandbox.id, provider = %sandbox.provider, "an interrupted spawn's provider is not configured; left creating");
            return Resolution::Unresolved;
        };
        let status = provider.status(&sandbox.id).await;
        if matches!(status, Ok(RuntimeStatus::Running)) {
            match self.store().mark_sandbox_running(&sandbox.id).await {
                Ok(Some(running)) => {
                    let data = sandbox_event_data(&running);
                    self.events().publish(
                        Some(&running.id),
                        EventPayload::SandboxCreated(data.clone()),
                    );
                    self.events()
                        .publish(Some(&running.id), EventPayload::SandboxRunning(data));
                    return Resolution::Resumed;
                }
                Ok(None) => return Resolution::Unresolved,
                Err(err) => {
                    tracing::warn!(sandbox_id = %sandbox.id, error = %err, "marking a recovered sandbox running failed");
                    return Resolution::Unresolved;
                }
            }
        }
        let message = match &status {
            Ok(RuntimeStatus::Stopped) => "the spawn was interrupted; its runtime had stopped",
            Ok(_) => "the spawn was interrupted before its runtime was ready",
            Err(_) => "the spawn was interrupted and its runtime could not be checked",
        };
        if let Err(err) = provider.destroy(&sandbox.id).await {
            tracing::warn!(sandbox_id = %sandbox.id, error = %err, "removing an interrupted spawn's runtime failed; left creating");
            return Resolution::Unresolved;
        }
        if self.end_failed_spawn(sandbox, message).await {
            Resolution::Failed
        } else {
            Resolution::Unresolved
        }
    }
}
