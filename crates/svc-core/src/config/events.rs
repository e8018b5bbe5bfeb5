//! `events.*`: the in-memory event history kept for diagnostics (decisions §2, §12).

use serde::{Deserialize, Serialize};

/// `events.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Events kept in memory; at least 1.
    pub history_size: usize,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig { history_size: 1000 }
    }
}
