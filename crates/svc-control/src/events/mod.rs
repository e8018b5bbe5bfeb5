//! The event bus: an in-process broadcast plus a bounded history ring used for `Last-Event-ID`
//! replay and diagnostics. Publishing and subscribing take the same history lock, so a new
//! subscriber's replay and its live feed neither overlap nor leave a gap.

mod bus;
mod filter;

pub use bus::{EventBus, EventStats, Subscription};
pub use filter::EventFilter;
