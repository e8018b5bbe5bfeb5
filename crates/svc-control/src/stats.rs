//! `GET /sandboxes/{id}/stats` (decisions §13): one resource sample of a running sandbox,
//! taken by its provider when asked, for providers declaring the `stats` capability.

use svc_core::access::Action;
use svc_core::{Capability, Error};
use svc_provider::SandboxStats;

use crate::{ControlPlane, Principal};

impl ControlPlane {
    /// `GET /stats`: 404 for a sandbox the caller cannot see, 409 when it is not running, 400
    /// naming the provider when it cannot report stats.
    pub async fn sandbox_stats(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<SandboxStats, Error> {
        self.authorize(principal, Action::ReadSandboxes)?;
        let sandbox = self.running_sandbox(principal, id).await?;
        let provider = self.capable_provider(&sandbox.provider, Capability::Stats)?;
        provider
            .stats(&sandbox.id)
            .await
            .map_err(|e| self.provider_failure(Some(&sandbox.id), provider.name(), "read stats", e))
    }
}
