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
    /// The keyset bound's values: `created_at <= t AND (created_at < t OR id < i)`, always
    /// present, so the `(created_at, id)` index (or the owner's or tenant's, which end in the
    /// same columns) is sought to the page's start rather than scanned from the newest. Without
    /// a position it admits everything (the largest time; an ID above every ID, which are
    /// ASCII).
    pub(crate) fn keyset(&self) -> (i64, String) {
        match &self.after {
            Some(after) => (crate::rows::micros(after.created_at), after.id.clone()),
            None => (i64::MAX, "\u{7f}".to_owned()),
        }
    }

    /// The equality conditions of the filters that are set, as `(column, value)`, in the
    /// order [`SandboxFilter::list_clause`] numbers their parameters.
    pub(crate) fn equalities(&self) -> Vec<(&'static str, &str)> {
        let mut equalities = Vec::new();
        if let StateFilter::Only(state) = self.state {
            equalities.push(("state", state.as_str()));
        }
        for (column, value) in [
            ("owner_id", &self.owner_id),
            ("provider", &self.provider),
            ("tenant_id", &self.tenant_id),
            ("worker_id", &self.worker_id),
        ] {
            if let Some(value) = value {
                equalities.push((column, value.as_str()));
            }
        }
        equalities
    }

    /// The `WHERE .. ORDER BY .. LIMIT ..` of both backends' list statement for this filter,
    /// with parameters written `{sigil}n` (`?n` for SQLite, `$n` for PostgreSQL): first the
    /// values of [`SandboxFilter::equalities`], then the keyset time, the keyset ID and the
    /// limit.
    ///
    /// Only the filters that are set appear, so each combination is a statement of its own
    /// (prepared and cached once per connection). One statement with `(:x IS NULL OR col =
    /// :x)` for every filter is served by no index in SQLite, and PostgreSQL's generic plan for
    /// it (chosen after five executions) filters every row: the default page went from 0.3 ms
    /// to 12 ms in the review (docs/decisions.md, "Query plans").
    pub(crate) fn list_clause(&self, sigil: char) -> String {
        let mut conditions: Vec<String> = Vec::new();
        let mut number = 0;
        for (column, _) in self.equalities() {
            number += 1;
            conditions.push(format!("{column} = {sigil}{number}"));
        }
        if self.state == StateFilter::Active {
            conditions.push("state <> 'destroyed'".to_owned());
        }
        let (time, id, limit) = (number + 1, number + 2, number + 3);
        conditions.push(format!(
            "created_at <= {sigil}{time} AND (created_at < {sigil}{time} OR id < {sigil}{id})"
        ));
        format!(
            "WHERE {} ORDER BY created_at DESC, id DESC LIMIT {sigil}{limit}",
            conditions.join(" AND ")
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use svc_core::sandbox::SandboxState;

    #[test]
    fn list_clauses_name_only_the_filters_set() {
        let keyset = "created_at <= {t} AND (created_at < {t} OR id < {i}) \
                      ORDER BY created_at DESC, id DESC LIMIT {l}";
        let cases = [
            (
                SandboxFilter::default(),
                '?',
                "WHERE state <> 'destroyed' AND ",
                ("?1", "?2", "?3"),
            ),
            (
                SandboxFilter {
                    state: StateFilter::All,
                    ..SandboxFilter::default()
                },
                '$',
                "WHERE ",
                ("$1", "$2", "$3"),
            ),
            (
                SandboxFilter {
                    owner_id: Some("alice".into()),
                    ..SandboxFilter::default()
                },
                '?',
                "WHERE owner_id = ?1 AND state <> 'destroyed' AND ",
                ("?2", "?3", "?4"),
            ),
            (
                SandboxFilter {
                    state: StateFilter::Only(SandboxState::Running),
                    provider: Some("docker".into()),
                    tenant_id: Some("acme".into()),
                    worker_id: Some("w1".into()),
                    limit: Some(5),
                    ..SandboxFilter::default()
                },
                '$',
                "WHERE state = $1 AND provider = $2 AND tenant_id = $3 AND worker_id = $4 AND ",
                ("$5", "$6", "$7"),
            ),
        ];
        for (filter, sigil, conditions, (t, i, l)) in cases {
            let expected = format!(
                "{conditions}{}",
                keyset.replace("{t}", t).replace("{i}", i).replace("{l}", l)
            );
            assert_eq!(filter.list_clause(sigil), expected, "{filter:?}");
        }
        let filter = SandboxFilter {
            state: StateFilter::Only(SandboxState::Running),
            tenant_id: Some("acme".into()),
            ..SandboxFilter::default()
        };
        assert_eq!(
            filter.equalities(),
            vec![("state", "running"), ("tenant_id", "acme")]
        );
    }
}
