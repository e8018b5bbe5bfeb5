//! Which sandboxes a list call returns.

/// The state part of a sandbox filter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StateFilter {
    /// Every sandbox that is not destroyed (the list default).
    #[default]
    Active,
    /// Only sandboxes in this state.
    Only(svc_core::sandbox::SandboxState),
    /// Everything still stored.
    All,
}

impl StateFilter {
    /// The condition as both backends' list statements take it: (exact state, or any; whether
    /// `destroyed` ones are left out).
    pub(crate) fn condition(self) -> (Option<&'static str>, bool) {
        match self {
            StateFilter::Active => (None, true),
            StateFilter::Only(state) => (Some(state.as_str()), false),
            StateFilter::All => (None, false),
        }
    }
}

/// Filters for listing sandboxes; `None` fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxFilter {
    /// State selection.
    pub state: StateFilter,
    /// Exact owner.
    pub owner_id: Option<String>,
    /// Exact provider name.
    pub provider: Option<String>,
    /// Exact tenant.
    pub tenant_id: Option<String>,
    /// Exact worker.
    pub worker_id: Option<String>,
    /// Only sandboxes after this one in the list order (keyset paging: stable while others
    /// are created or destroyed).
    pub after: Option<SandboxPosition>,
    /// At most this many.
    pub limit: Option<u32>,
}

impl SandboxFilter {
    /// The keyset bound as both backends' list statements take it: `created_at <= t AND
    /// (created_at < t OR id < i)`, always present, so the `(created_at, id)` index is sought
    /// to the page's start rather than scanned from the newest. Without a position it admits
    /// everything (the largest time; an ID above every ID, which are ASCII).
    pub(crate) fn keyset(&self) -> (i64, String) {
        match &self.after {
            Some(after) => (crate::rows::micros(after.created_at), after.id.clone()),
            None => (i64::MAX, "\u{7f}".to_owned()),
        }
    }
}

/// A page of a list ordered by a unique text key (templates by name, quotas by owner, workers
/// by ID): the keys after `after`, at most `limit` of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPage {
    /// Only keys above this one.
    pub after: Option<String>,
    /// At most this many.
    pub limit: Option<u32>,
}

impl KeyPage {
    /// Every item.
    pub const ALL: KeyPage = KeyPage {
        after: None,
        limit: None,
    };

    /// The lower bound as the list statements take it; every key is above the empty one.
    pub(crate) fn after(&self) -> &str {
        self.after.as_deref().unwrap_or_default()
    }

    /// The limit for PostgreSQL (`NULL`: none).
    pub(crate) fn pg_limit(&self) -> Option<i64> {
        self.limit.map(i64::from)
    }

    /// The limit for SQLite (`-1`: none).
    pub(crate) fn sqlite_limit(&self) -> i64 {
        self.limit.map_or(-1, i64::from)
    }
}

/// A place in the list order, newest first: `created_at` descending, then `id` descending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPosition {
    /// The sandbox's creation time.
    pub created_at: svc_core::Timestamp,
    /// Its ID, which orders sandboxes created in the same microsecond.
    pub id: String,
}
