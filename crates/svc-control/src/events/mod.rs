//! The event bus: an in-process broadcast plus a bounded history ring used for `Last-Event-ID`
//! replay and diagnostics. Publishing and subscribing take the same history lock, so a new
//! subscriber's replay and its live feed neither overlap nor leave a gap.

mod bus;
mod filter;
pub(crate) mod relay;

pub use bus::{Delivery, Ended, EventBus, EventStats, Subscription};
pub use filter::{EventFilter, OwnerScope};

use svc_core::access::Action;
use svc_core::Error;

use crate::{ControlPlane, Principal};

impl ControlPlane {
    /// `GET /events`: a subscription, live once this returns; with `last_event_id`, newer
    /// history is replayed first.
    /// In pool mode a caller who sees only its own sandboxes gets only their events.
    pub async fn subscribe_events(
        &self,
        principal: &Principal,
        mut filter: EventFilter,
        last_event_id: Option<&str>,
    ) -> Result<Subscription, Error> {
        self.authorize(principal, Action::ReadEvents)?;
        filter.tenant_id = principal.visible_tenant().map(str::to_owned);
        if self.config().pool.enabled && !principal.sees_every_owner() {
            let owner = principal.acting_owner().unwrap_or_default().to_owned();
            let held = self
                .store()
                .list_sandboxes(&svc_store::SandboxFilter {
                    state: svc_store::StateFilter::All,
                    owner_id: Some(owner.clone()),
                    tenant_id: filter.tenant_id.clone(),
                    ..svc_store::SandboxFilter::default()
                })
                .await?;
            filter.owner = Some(OwnerScope::new(
                owner,
                held.into_iter().map(|sandbox| sandbox.id.to_string()),
            ));
        }
        Ok(self.events().subscribe(filter, last_event_id))
    }
}
