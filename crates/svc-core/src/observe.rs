//! Shapes shared by diagnostics and metrics (interface "System"; decisions §13).

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

/// Sandbox counts: every record held (ended ones until `destroyed_retention`), those holding a
/// runtime, and the breakdowns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct SandboxCounts {
    /// Every record held.
    pub total: u64,
    /// Records holding a runtime (`creating`, `running`, `paused`).
    pub active: u64,
    /// Records per state (every state present, ended ones included).
    pub by_state: BTreeMap<String, u64>,
    /// Active sandboxes per provider.
    pub by_provider: BTreeMap<String, u64>,
    /// Active sandboxes per worker.
    pub by_worker: BTreeMap<String, u64>,
}

/// One group of the store's `GROUP BY state, provider, worker` count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxGroup {
    /// State (wire name).
    pub state: String,
    /// Provider name.
    pub provider: String,
    /// Worker ID (empty when none).
    pub worker_id: String,
    /// How many.
    pub count: u64,
}

impl SandboxCounts {
    /// Folds the groups; `active` says which states hold a runtime.
    pub fn from_groups(groups: &[SandboxGroup], active: impl Fn(&str) -> bool) -> Self {
        let mut counts = SandboxCounts::default();
        for group in groups {
            counts.total += group.count;
            *counts.by_state.entry(group.state.clone()).or_default() += group.count;
            if active(&group.state) {
                counts.active += group.count;
                *counts
                    .by_provider
                    .entry(group.provider.clone())
                    .or_default() += group.count;
                *counts.by_worker.entry(group.worker_id.clone()).or_default() += group.count;
            }
        }
        counts
    }
}
