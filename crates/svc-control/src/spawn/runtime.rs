//! Step "provider spawn" and after: the runtime is made (or a warm one claimed) within the
//! spawn deadline, the record marked running and the events published, all under a
//! [`SpawnUndo`] guard that removes the runtime and ends the record as `error` when any step
//! fails, the task panics or is dropped.

use std::collections::BTreeMap;
use std::sync::Arc;

use svc_core::event::{EventPayload, SandboxEventData};
use svc_core::sandbox::{Ending, Sandbox, StateReason};
use svc_core::{Error, SandboxId};
use svc_provider::{
    Provider, ProviderError, RuntimeInfo, SpawnSpec, LABEL_INSTALLATION, LABEL_MANAGED,
    LABEL_OWNER, LABEL_SANDBOX_ID, LABEL_TENANT, LABEL_WORKER,
};
use svc_store::EndedState;
use tokio::task::JoinHandle;

use super::placement::Placement;
use super::plan::SpawnPlan;
use crate::provider_errors::classify;
use crate::sandboxes::sandbox_event_data;
use crate::ControlPlane;

/// A failed step: the service error and whether the provider was at fault.
pub(crate) struct StepFailure {
    pub(crate) error: Error,
    provider_at_fault: bool,
}

impl ControlPlane {
    /// A ready warm runtime for `plan`, when a pool has one (`warm/`): a local spawn that
    /// names no network, of the spec of the template it names or of any pool.
    pub(super) fn take_warm(&self, plan: &SpawnPlan) -> Option<SandboxId> {
        // Warm runtimes start with the provider's network and any egress.
        if plan.network.is_some()
            || plan.egress != svc_core::egress::Egress::default()
            || self.providers().pool().is_some()
        {
            return None;
        }
        let Placement::Local(provider) = &plan.placement else {
            return None;
        };
        let spec = crate::warm::WarmSpec {
            provider: provider.name().to_owned(),
            image: plan.image.clone(),
            memory_mb: plan.memory_mb,
            vcpus: plan.vcpus,
        };
        self.inner.warm.take(plan.template.as_deref(), &spec)
    }

    /// Steps "provider spawn" (or claiming the `warm` runtime), "mark running" and "publish",
    /// run in a task of their own.
    pub(super) async fn create_runtime(
        self,
        provider: Arc<dyn Provider>,
        record: Sandbox,
        warm: Option<SandboxId>,
    ) -> Result<Sandbox, Error> {
        let undo = SpawnUndo {
            plane: self.clone(),
            sandbox: Some(record.clone()),
            provider: Arc::clone(&provider),
        };
        let claimed = match warm {
            Some(warm) => self.claim_warm(&provider, &warm, &record.id).await,
            None => false,
        };
        let image_pulled = if claimed {
            false
        } else {
            let mut spec = spawn_spec(&record, &self.inner.installation_id);
            spec.progress = self.pull_progress(&record);
            match self.spawn_runtime(&provider, spec).await {
                Ok(runtime) => runtime.image_pulled,
                Err(failure) => return Err(undo.run(failure).await),
            }
        };
        let exec_path = provider.exec_path(&record.id).await;
        let running = match self
            .store()
            .mark_sandbox_running(&record.id, exec_path.as_deref())
            .await
        {
            Ok(Some(running)) => running,
            Ok(None) => {
                let error = Error::internal(
                    "marking a spawned sandbox running",
                    std::io::Error::other("the record left the creating state during the spawn"),
                );
                return Err(undo.run(StepFailure::ours(error)).await);
            }
            Err(err) => return Err(undo.run(StepFailure::ours(err.into())).await),
        };
        undo.disarm();
        let data = sandbox_event_data(&running);
        self.events().publish_in(
            &running.tenant_id,
            Some(&running.id),
            EventPayload::SandboxCreated(SandboxEventData {
                image_pulled,
                ..data.clone()
            }),
        );
        self.events().publish_in(
            &running.tenant_id,
            Some(&running.id),
            EventPayload::SandboxRunning(data),
        );
        tracing::info!(sandbox_id = %running.id, tenant_id = %running.tenant_id, provider = %running.provider, image = %running.image, warm = claimed, "sandbox spawned");
        Ok(running)
    }

    /// Hands the warm runtime `warm` to sandbox `id`. False when the provider could not (the
    /// runtime died, say): the runtime is removed and the spawn starts cold.
    async fn claim_warm(
        &self,
        provider: &Arc<dyn Provider>,
        warm: &SandboxId,
        id: &SandboxId,
    ) -> bool {
        match provider.claim(warm, id).await {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(sandbox_id = %id, runtime = %warm, error = %err, "claiming a warm runtime failed; spawning cold");
                if provider.destroy(warm).await.is_err() {
                    self.retry_runtime_removal(warm, provider);
                }
                false
            }
        }
    }

    /// Asks the provider for the runtime, within `defaults.spawn_timeout`. The provider call
    /// runs as its own task: past the deadline it keeps going, and whatever it creates late is
    /// destroyed when it finishes.
    pub(crate) async fn spawn_runtime(
        &self,
        provider: &Arc<dyn Provider>,
        spec: SpawnSpec,
    ) -> Result<RuntimeInfo, StepFailure> {
        let deadline = self.config().defaults.spawn_timeout;
        let id = spec.id.clone();
        let mut call = {
            let provider = Arc::clone(provider);
            tokio::spawn(async move { provider.spawn(&spec).await })
        };
        match tokio::time::timeout(deadline.as_std(), &mut call).await {
            Ok(Ok(Ok(runtime))) => Ok(runtime),
            Ok(Ok(Err(err))) => Err(StepFailure::provider(classify(
                provider.name(),
                "spawn",
                err,
            ))),
            Ok(Err(joined)) => {
                // The panic's payload may hold internal detail: it goes to the log only.
                tracing::error!(sandbox_id = %id, error = %joined, "the provider's spawn panicked");
                Err(StepFailure::provider(Error::provider(
                    provider.name(),
                    "spawn",
                    ProviderError::failed("the provider's spawn task panicked"),
                )))
            }
            Err(_) => {
                // Whatever the call still creates is removed once it returns.
                self.remove_runtime_later(id, Arc::clone(provider), call);
                Err(StepFailure::provider(Error::provider(
                    provider.name(),
                    "spawn",
                    ProviderError::failed(format!(
                        "the runtime was not ready within {deadline} (defaults.spawn_timeout)"
                    )),
                )))
            }
        }
    }

    /// Undoes a spawn whose record exists, in reverse: removes the runtime, ends the record as
    /// `error` (`spawn_failed`), publishes `sandbox.error` and the failure. A runtime that
    /// cannot be removed now (provider unreachable), or a record that cannot be ended now
    /// (store unreachable), is retried in the background; the record is ended first either
    /// way, so a spawn reported failed never comes back to life, and the start-up sweep
    /// (`recover.rs`) removes what a restart in between left behind.
    async fn undo_spawn(
        &self,
        sandbox: &Sandbox,
        provider: &Arc<dyn Provider>,
        failure: &StepFailure,
    ) {
        let removal = provider.destroy(&sandbox.id).await;
        let mut message = failure.error.public_message();
        if let Err(err) = &removal {
            tracing::warn!(sandbox_id = %sandbox.id, error = %err, "rolling back a spawn: the runtime could not be removed yet; retrying in the background");
            message.push_str("; removing its runtime had to be retried");
        }
        if !self.end_failed_spawn(sandbox, &message).await {
            let (record, message) = (sandbox.clone(), message.clone());
            self.retry_in_background(format!("end-failed:{}", sandbox.id), move |plane| {
                let (record, message) = (record.clone(), message.clone());
                async move { plane.end_failed_spawn(&record, &message).await }
            });
        }
        self.publish_failure(
            Some(&sandbox.id),
            "spawn",
            &sandbox.provider,
            &failure.error,
            failure.provider_at_fault,
        );
        if removal.is_err() {
            self.retry_runtime_removal(&sandbox.id, provider);
        }
        tracing::warn!(sandbox_id = %sandbox.id, tenant_id = %sandbox.tenant_id, error = %failure.error, "spawn failed and was rolled back");
    }

    /// Removes a runtime in the background until it is gone.
    pub(crate) fn retry_runtime_removal(&self, id: &SandboxId, provider: &Arc<dyn Provider>) {
        let (id, provider) = (id.clone(), Arc::clone(provider));
        self.retry_in_background(format!("remove-runtime:{id}"), move |_| {
            let (id, provider) = (id.clone(), Arc::clone(&provider));
            async move { provider.destroy(&id).await.is_ok() }
        });
    }

    /// Removes whatever a provider call still in flight creates: waits for `call` to return,
    /// then removes the runtime (retrying in the background when that fails).
    fn remove_runtime_later(
        &self,
        id: SandboxId,
        provider: Arc<dyn Provider>,
        call: JoinHandle<Result<RuntimeInfo, ProviderError>>,
    ) {
        let plane = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = plane.shutdown_token().cancelled() => return,
                _ = call => {}
            }
            if provider.destroy(&id).await.is_err() {
                plane.retry_runtime_removal(&id, &provider);
            }
        });
    }

    /// Ends the record of a failed spawn as `error` and publishes `sandbox.error`, once. False
    /// when the store could not be written.
    pub(crate) async fn end_failed_spawn(&self, sandbox: &Sandbox, message: &str) -> bool {
        let ending = Ending {
            reason: StateReason::SpawnFailed,
            message: message.to_owned(),
        };
        match self
            .store()
            .end_sandbox(&sandbox.id, EndedState::Error, &ending, self.clock().now())
            .await
        {
            Ok(Some(ended)) => {
                self.inner.held_leases.forget(ended.id.as_str());
                self.inner.exec_jobs.forget(&ended.id);
                self.spawn_queue().capacity_changed();
                let mut data = sandbox_event_data(&ended);
                data.error = Some(message.to_owned());
                self.events().publish_in(
                    &ended.tenant_id,
                    Some(&ended.id),
                    EventPayload::SandboxError(data),
                );
                true
            }
            Ok(None) => true,
            Err(err) => {
                tracing::error!(sandbox_id = %sandbox.id, error = %err, "rolling back a spawn: the record could not be marked error; retrying in the background");
                false
            }
        }
    }
}
impl StepFailure {
    fn provider(error: Error) -> Self {
        let provider_at_fault = matches!(error, Error::Provider { .. });
        StepFailure {
            error,
            provider_at_fault,
        }
    }

    fn ours(error: Error) -> Self {
        StepFailure {
            error,
            provider_at_fault: false,
        }
    }
}

/// Undoes a spawn unless disarmed. Dropped while armed (the task panicked or was aborted), it
/// starts the undo on the runtime by itself.
struct SpawnUndo {
    plane: ControlPlane,
    sandbox: Option<Sandbox>,
    provider: Arc<dyn Provider>,
}

impl SpawnUndo {
    async fn run(mut self, failure: StepFailure) -> Error {
        if let Some(sandbox) = self.sandbox.take() {
            self.plane
                .undo_spawn(&sandbox, &self.provider, &failure)
                .await;
        }
        failure.error
    }

    fn disarm(mut self) {
        self.sandbox = None;
    }
}

impl Drop for SpawnUndo {
    fn drop(&mut self) {
        let Some(sandbox) = self.sandbox.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(sandbox_id = %sandbox.id, "a spawn ended without its undo and no runtime is left to run it; recovery will at the next start");
            return;
        };
        let plane = self.plane.clone();
        let provider = Arc::clone(&self.provider);
        runtime.spawn(async move {
            let failure = StepFailure::ours(Error::internal(
                "spawning a sandbox",
                std::io::Error::other("the spawn task ended before it finished"),
            ));
            plane.undo_spawn(&sandbox, &provider, &failure).await;
        });
    }
}

/// What the provider is asked to create for `sandbox`.
fn spawn_spec(sandbox: &Sandbox, installation: &str) -> SpawnSpec {
    let worker = sandbox.worker_id.clone().unwrap_or_default();
    SpawnSpec {
        id: sandbox.id.clone(),
        image: sandbox.image.clone(),
        memory_mb: sandbox.memory_mb,
        vcpus: sandbox.vcpus,
        env: sandbox.env.clone(),
        network: sandbox.network.clone(),
        labels: BTreeMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_SANDBOX_ID.to_owned(), sandbox.id.to_string()),
            (
                LABEL_OWNER.to_owned(),
                // An anonymous sandbox's label is empty.
                sandbox
                    .owner_id
                    .as_ref()
                    .map(|owner| owner.as_str().to_owned())
                    .unwrap_or_default(),
            ),
            (LABEL_TENANT.to_owned(), sandbox.tenant_id.clone()),
            (LABEL_WORKER.to_owned(), worker),
            (LABEL_INSTALLATION.to_owned(), installation.to_owned()),
        ]),
        multi_user: false,
        egress: sandbox.egress.clone(),
        progress: Default::default(),
    }
}
