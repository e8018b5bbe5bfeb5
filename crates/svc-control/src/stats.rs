//! `GET /sandboxes/{id}/stats` (decisions §13): one resource sample of a running sandbox,
//! taken by its provider when asked, for providers declaring the `stats` capability.

use svc_core::access::Action;
use svc_core::{Capability, Error, SandboxId};
use svc_provider::SandboxStats;

use crate::door::Operation;
use crate::{ControlPlane, Principal};

const READ_STATS: Operation =
    Operation::new(Action::ReadSandboxes, Capability::Stats, "read stats");

impl ControlPlane {
    /// `GET /stats`: 404 for a sandbox the caller cannot see, 409 when it is not running, 400
    /// naming the provider when it cannot report stats.
    pub async fn sandbox_stats(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<SandboxStats, Error> {
        self.on_running(principal, id, READ_STATS, Ok(()), async |on, ()| {
            Ok(on.provider.stats(on.id()).await?)
        })
        .await
    }
}
