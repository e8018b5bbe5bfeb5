//! Crash safety of the spawn pipeline, run once at start-up before serving:
//!
//! sandboxes this worker left in `creating` (the process died between the record and `running`)
//! are resolved against their provider: a runtime that exists and runs makes the sandbox
//! `running`; anything else is removed and the record ends as `error` with `spawn_failed`. A
//! record whose runtime cannot be checked or removed (provider down) stays `creating` for the
//! next start. Runtimes whose record has already ended are removed by reconciliation, which
//! runs right after (`reconcile.rs`).

use svc_core::access::Action;
use svc_core::event::EventPayload;
use svc_core::sandbox::{Sandbox, SandboxState};
use svc_core::Error;
use svc_provider::RuntimeStatus;
use svc_store::{SandboxFilter, StateFilter};

use crate::sandboxes::sandbox_event_data;
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
}

pub(crate) enum Resolution {
    Resumed,
    Failed,
    Unresolved,
}

impl ControlPlane {
    /// Resolves this worker's `creating` records; call once at start-up, before serving (and
    /// before reconciliation), as [`Principal::system`].
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
        if report.found > 0 {
            tracing::info!(
                found = report.found,
                resumed = report.resumed,
                failed = report.failed,
                unresolved = report.unresolved,
                "recovered spawns interrupted by a restart"
            );
        }
        Ok(report)
    }

    pub(crate) async fn resolve_interrupted(&self, sandbox: &Sandbox) -> Resolution {
        let Some(provider) = self.providers().for_cleanup(&sandbox.provider) else {
            tracing::warn!(sandbox_id = %sandbox.id, provider = %sandbox.provider, "an interrupted spawn's provider is not configured; left creating");
            return Resolution::Unresolved;
        };
        let status = provider.status(&sandbox.id).await;
        if matches!(status, Ok(RuntimeStatus::Running)) {
            let exec_path = provider.exec_path(&sandbox.id).await;
            match self
                .store()
                .mark_sandbox_running(&sandbox.id, exec_path.as_deref())
                .await
            {
                Ok(Some(running)) => {
                    let data = sandbox_event_data(&running);
                    self.events().publish_in(
                        &running.tenant_id,
                        Some(&running.id),
                        EventPayload::SandboxCreated(data.clone()),
                    );
                    self.events().publish_in(
                        &running.tenant_id,
                        Some(&running.id),
                        EventPayload::SandboxRunning(data),
                    );
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
