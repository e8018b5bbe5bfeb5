//! `POST /sandboxes/admission` (decisions §10): the decision a spawn with this body would get
//! now, from the same resolve step and store check as a spawn, creating nothing.

use svc_core::access::Action;
use svc_core::admission::Admission;
use svc_core::sandbox::SpawnRequest;
use svc_core::Error;

use crate::spawn::Placement;
use crate::{ControlPlane, Principal};

impl ControlPlane {
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
            .check_admission(plan.owner.as_ref(), plan.ttl, self.global_limits())
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
}
