//! Runtimes that end on their own, reported by their provider as it notices (a microVM whose
//! VMM crashed): the sandbox is ended at once as `error`/`provider_failed` with the provider's
//! account as its `state_message`, events `provider.failed` and `sandbox.error`, its remains
//! removed, and the provider shown unhealthy until its next health check. Runtimes nobody
//! watches are found by reconciliation instead.

use std::sync::Arc;

use svc_core::event::{EventPayload, FailureEventData};
use svc_core::sandbox::SandboxState;
use svc_provider::{Provider, RuntimeFailure};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::reconcile::{ReconcileReport, RuntimeLoss};
use crate::ControlPlane;

/// The `operation` of the `provider.failed` event.
const OPERATION: &str = "runtime";

/// Handles `provider`'s failure reports until shutdown.
pub(crate) async fn run(
    plane: ControlPlane,
    provider: Arc<dyn Provider>,
    mut failures: UnboundedReceiver<RuntimeFailure>,
    cancel: CancellationToken,
) {
    loop {
        let failure = tokio::select! {
            _ = cancel.cancelled() => return,
            failure = failures.recv() => match failure {
                Some(failure) => failure,
                None => return,
            },
        };
        plane.runtime_failed(provider.as_ref(), failure).await;
    }
}

impl ControlPlane {
    async fn runtime_failed(&self, provider: &dyn Provider, failure: RuntimeFailure) {
        if failure.provider_wide {
            self.providers()
                .mark_unhealthy(provider.name(), failure.message.clone());
        }
        let record = match self.store().get_sandbox(&failure.sandbox_id).await {
            Ok(Some(record)) => record,
            Ok(None) => return,
            Err(err) => {
                // Reconciliation finds it later.
                tracing::warn!(sandbox_id = %failure.sandbox_id, error = %err, "reading a sandbox whose runtime failed");
                return;
            }
        };
        self.events().publish_in(
            &record.tenant_id,
            Some(&record.id),
            EventPayload::ProviderFailed(FailureEventData {
                operation: OPERATION.to_owned(),
                provider: provider.name().to_owned(),
                error: failure.message.clone(),
            }),
        );
        if record.state == SandboxState::Running {
            self.end_lost_runtime(
                provider,
                &record,
                RuntimeLoss::Stopped,
                Some(&failure.message),
                &mut ReconcileReport::default(),
            )
            .await;
        }
    }
}
