//! The event bus: an in-process broadcast plus a bounded history ring used for `Last-Event-ID`
//! replay and diagnostics. Publishing and subscribing take the same history lock, so a new
//! subscriber's replay and its live feed neither overlap nor leave a gap.

mod bus;
mod filter;
pub(crate) mod relay;

pub use bus::{Delivery, Ended, EventBus, EventStats, Subscription};
pub use filter::EventFilter;

use svc_core::access::Action;
use svc_core::Error;

use crate::{ControlPlane, Principal};

impl ControlPlane {
    /// `GET /events`: a subscription, live once this returns; with `last_event_id`, newer
    /// history is replayed first.
    pub fn subscribe_events(
        &self,
        principal: &Principal,
        mut filter: EventFilter,
        last_event_id: Option<&str>,
    ) -> Result<Subscription, Error> {
        self.authorize(principal, Action::ReadEvents)?;
        filter.tenant_id = principal.visible_tenant().map(str::to_owned);
        Ok(self.events().subscribe(filter, last_event_id))
    }
}
