//! `events.*`: the in-memory event history kept for replay and diagnostics, and how far a
//! subscriber may fall behind (decisions §2, §12).

use serde::{Deserialize, Serialize};

/// `events.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Events kept in memory; at least 1.
    pub history_size: usize,
    /// Events one SSE subscriber may fall behind before it is told (`event: overflow`) and
    /// dropped; at least 1.
    pub subscriber_buffer: usize,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            history_size: 1000,
            subscriber_buffer: 10_000,
        }
    }
}
