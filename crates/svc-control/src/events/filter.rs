//! Which events a subscriber wants (`?types=` and `?sandbox_id=`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use svc_core::event::{Event, EventType};

/// Pool mode's separation on the event stream (decisions §30): only the events of one owner's
/// sandboxes, those it held when it subscribed and those whose `sandbox.*` events name it as
/// their owner since.
#[derive(Debug)]
pub struct OwnerScope {
    owner: String,
    sandboxes: Mutex<HashSet<String>>,
}

impl OwnerScope {
    /// The scope of `owner`, who holds `sandboxes` now.
    pub fn new(owner: String, sandboxes: impl IntoIterator<Item = String>) -> Arc<Self> {
        Arc::new(OwnerScope {
            owner,
            sandboxes: Mutex::new(sandboxes.into_iter().collect()),
        })
    }

    fn admits(&self, event: &Event) -> bool {
        let Some(id) = &event.sandbox_id else {
            // Events about no sandbox (quotas, providers) are not one owner's.
            return false;
        };
        let mut known = self
            .sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if known.contains(id.as_str()) {
            return true;
        }
        let owned = event
            .data
            .as_ref()
            .and_then(|data| data.get("owner_id"))
            .and_then(serde_json::Value::as_str)
            == Some(self.owner.as_str());
        if owned {
            known.insert(id.as_str().to_owned());
        }
        owned
    }
}

impl PartialEq for OwnerScope {
    fn eq(&self, other: &Self) -> bool {
        self.owner == other.owner
    }
}

impl Eq for OwnerScope {}

/// A subscriber's filter; empty parts match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Types to deliver; empty = all.
    pub types: HashSet<EventType>,
    /// Only this sandbox's events.
    pub sandbox_id: Option<String>,
    /// Only this tenant's events (set for OIDC subscribers, not from the query).
    pub tenant_id: Option<String>,
    /// Only this owner's sandboxes' events (set in pool mode, not from the query).
    pub owner: Option<Arc<OwnerScope>>,
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
            && self.owner.as_ref().is_none_or(|scope| scope.admits(event))
    }
}
