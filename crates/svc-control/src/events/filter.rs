//! Which events a subscriber wants (`?types=` and `?sandbox_id=`).

use std::collections::HashSet;

use svc_core::event::{Event, EventType};

/// A subscriber's filter; empty parts match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Types to deliver; empty = all.
    pub types: HashSet<EventType>,
    /// Only this sandbox's events.
    pub sandbox_id: Option<String>,
    /// Only this tenant's events (set for OIDC subscribers, not from the query).
    pub tenant_id: Option<String>,
}

impl EventFilter {
    /// Parses a comma-separated `types` list; unknown names are an error naming them.
    pub fn parse_types(list: &str) -> Result<HashSet<EventType>, String> {
        list.split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(|name| {
                EventType::parse(name).ok_or_else(|| {
                    format!("unknown event type {name:?} (known: sandbox.created, sandbox.running, sandbox.destroyed, ...)")
                })
            })
            .collect()
    }

    /// Whether `event` passes.
    pub fn matches(&self, event: &Event) -> bool {
        (self.types.is_empty() || self.types.contains(&event.event_type))
            && self
                .sandbox_id
                .as_deref()
                .is_none_or(|id| event.sandbox_id.as_ref().is_some_and(|s| s.as_str() == id))
            && self
                .tenant_id
                .as_deref()
                .is_none_or(|tenant| event.tenant_id.as_deref() == Some(tenant))
    }
}
