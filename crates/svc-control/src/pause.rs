//! `POST /sandboxes/{id}/pause` and `/resume` (decisions §7). The provider freezes or thaws the
//! runtime first and the record follows, so a record never says `running` over a frozen
//! runtime for longer than a failed write takes to undo. The store moves `expires_at` on
//! resume by the time spent paused, so a paused sandbox neither expires nor ages.

use svc_core::access::Action;
use svc_core::event::EventPayload;
use svc_core::sandbox::{Sandbox, SandboxState};
use svc_core::{Capability, Error, SandboxId};

use crate::door::{Operation, Target};
use crate::sandboxes::sandbox_event_data;
use crate::{ControlPlane, Principal};

const PAUSE: Operation = Operation::new(Action::Pause, Capability::Pause, "pause");
const RESUME: Operation = Operation::new(Action::Pause, Capability::Pause, "resume");

impl ControlPlane {
    /// `POST /sandboxes/{id}/pause`: idempotent; 409 unless running or paused, 400 naming the
    /// provider when it cannot pause.
    pub async fn pause_sandbox(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<Sandbox, Error> {
        let sandbox = self.visible(principal, id, PAUSE).await?;
        match sandbox.state {
            SandboxState::Paused => return Ok(sandbox),
            SandboxState::Running => {}
            _ => return Err(sandbox.not_running_error()),
        }
        let on = self.open(sandbox, PAUSE).await?;
        on.call((), async |on, ()| Ok(on.provider.pause(on.id()).await?))
            .await?;
        let Target {
            sandbox, provider, ..
        } = on;
        let recorded = self
            .store()
            .pause_sandbox(&sandbox.id, self.clock().now())
            .await;
        match recorded {
            Ok(Some(paused)) => {
                self.publish_sandbox(&paused, EventPayload::SandboxPaused);
                Ok(paused)
            }
            Ok(None) => self.settled(&sandbox, SandboxState::Paused).await,
            Err(err) => {
                // The runtime must not stay frozen under a record that says it runs.
                if let Err(undo) = provider.resume(&sandbox.id).await {
                    tracing::warn!(sandbox_id = %sandbox.id, error = %undo, "could not thaw a sandbox whose pause was not recorded");
                }
                Err(err.into())
            }
        }
    }

    /// `POST /sandboxes/{id}/resume`: idempotent; 409 unless paused or running.
    pub async fn resume_sandbox(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<Sandbox, Error> {
        let sandbox = self.visible(principal, id, RESUME).await?;
        match sandbox.state {
            SandboxState::Running => return Ok(sandbox),
            SandboxState::Paused => {}
            _ => return Err(sandbox.not_running_error()),
        }
        let on = self.open(sandbox, RESUME).await?;
        on.call((), async |on, ()| Ok(on.provider.resume(on.id()).await?))
            .await?;
        let sandbox = on.sandbox;
        // A failed write leaves the record paused over a thawed runtime: operations answer 409
        // until a retried resume (idempotent at the provider) records it.
        match self
            .store()
            .resume_sandbox(&sandbox.id, self.clock().now())
            .await?
        {
            Some(resumed) => {
                self.publish_sandbox(&resumed, EventPayload::SandboxResumed);
                Ok(resumed)
            }
            None => self.settled(&sandbox, SandboxState::Running).await,
        }
    }

    /// The answer when the record changed under a pause or resume: a concurrent call that
    /// reached `wanted` first is success; anything else (destroyed meanwhile) is its 409.
    async fn settled(&self, sandbox: &Sandbox, wanted: SandboxState) -> Result<Sandbox, Error> {
        match self.store().get_sandbox(&sandbox.id).await? {
            Some(now) if now.state == wanted => Ok(now),
            _ => Err(self.ended_meanwhile(sandbox).await),
        }
    }

    fn publish_sandbox(
        &self,
        sandbox: &Sandbox,
        payload: fn(svc_core::event::SandboxEventData) -> EventPayload,
    ) {
        self.events().publish_in(
            &sandbox.tenant_id,
            Some(&sandbox.id),
            payload(sandbox_event_data(sandbox)),
        );
        tracing::info!(sandbox_id = %sandbox.id, state = sandbox.state.as_str(), "sandbox paused or resumed");
    }
}
