//! Owner quotas and the admission decision that reads them. The decision runs on whatever
//! connection the caller holds: a read transaction for a check, the write transaction that
//! inserts the sandbox for a spawn.

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Row};
use svc_core::admission::{ActiveCounts, Admission};
use svc_core::quota::{GlobalLimits, OwnerQuota, QuotaLimits, QuotaSummary};
use svc_core::{GoDuration, Timestamp};

use super::codec::{backend, micros, timestamp};
use crate::StoreResult;

pub(super) const QUOTA_COLUMNS: &str =
    "owner_id, max_sandboxes, max_ttl_secs, max_exec_timeout_secs, created_at, updated_at";

/// A quota row as read; decoded after the connection is released.
pub(super) struct QuotaRow {
    owner_id: String,
    max_sandboxes: i64,
    max_ttl_secs: i64,
    max_exec_timeout_secs: i64,
    created_at: i64,
    updated_at: i64,
}

impl QuotaRow {
    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(QuotaRow {
            owner_id: row.get(0)?,
            max_sandboxes: row.get(1)?,
            max_ttl_secs: row.get(2)?,
            max_exec_timeout_secs: row.get(3)?,
            created_at: row.get(4)?,
            updated_at: row.get(5)?,
        })
    }

    fn limits(&self) -> QuotaLimits {
        // The table's CHECK constraints keep every value >= 0.
        let secs = |v: i64| GoDuration::from_secs(u64::try_from(v).unwrap_or(0));
        QuotaLimits {
            max_sandboxes: u64::try_from(self.max_sandboxes).unwrap_or(0),
            max_ttl: secs(self.max_ttl_secs),
            max_exec_timeout: secs(self.max_exec_timeout_secs),
        }
    }

    pub(super) fn into_domain(self) -> StoreResult<OwnerQuota> {
        let limits = self.limits();
        Ok(OwnerQuota {
            created_at: timestamp("quota", &self.owner_id, self.created_at)?,
            updated_at: timestamp("quota", &self.owner_id, self.updated_at)?,
            owner_id: self.owner_id,
            max_sandboxes: limits.max_sandboxes,
            max_ttl: limits.max_ttl,
            max_exec_timeout: limits.max_exec_timeout,
        })
    }
}

fn secs(value: GoDuration) -> i64 {
    i64::try_from(value.as_std().as_secs()).unwrap_or(i64::MAX)
}

pub(super) fn get(
    conn: &Connection,
    operation: &'static str,
    owner_id: &str,
) -> StoreResult<Option<QuotaRow>> {
    conn.prepare_cached(&format!(
        "SELECT {QUOTA_COLUMNS} FROM owner_quotas WHERE owner_id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([owner_id], QuotaRow::read).optional())
    .map_err(backend(operation))
}

/// Inserts or replaces the quota of `owner_id`, keeping its `created_at`.
pub(super) fn put(
    conn: &Connection,
    owner_id: &str,
    limits: QuotaLimits,
    at: Timestamp,
) -> StoreResult<QuotaRow> {
    const OP: &str = "put_quota";
    conn.prepare_cached(&format!(
        "INSERT INTO owner_quotas ({QUOTA_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?5) \
         ON CONFLICT (owner_id) DO UPDATE SET max_sandboxes = excluded.max_sandboxes, \
         max_ttl_secs = excluded.max_ttl_secs, \
         max_exec_timeout_secs = excluded.max_exec_timeout_secs, updated_at = excluded.updated_at \
         RETURNING {QUOTA_COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                owner_id,
                i64::try_from(limits.max_sandboxes).unwrap_or(i64::MAX),
                secs(limits.max_ttl),
                secs(limits.max_exec_timeout),
                micros(at)
            ],
            QuotaRow::read,
        )
    })
    .map_err(backend(OP))
}

pub(super) fn summary(conn: &Connection) -> StoreResult<QuotaSummary> {
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    conn.prepare_cached(
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE max_sandboxes > 0), \
         COUNT(*) FILTER (WHERE max_ttl_secs > 0), \
         COUNT(*) FILTER (WHERE max_exec_timeout_secs > 0) FROM owner_quotas",
    )
    .and_then(|mut stmt| {
        stmt.query_row([], |row| {
            Ok(QuotaSummary {
                total: count(row.get(0)?),
                with_max_sandboxes: count(row.get(1)?),
                with_max_ttl: count(row.get(2)?),
                with_max_exec_timeout: count(row.get(3)?),
            })
        })
    })
    .map_err(backend("quota_summary"))
}

/// Sandboxes holding a runtime, optionally of one owner.
pub(super) fn count_holding(
    conn: &Connection,
    operation: &'static str,
    owner_id: Option<&str>,
) -> StoreResult<u64> {
    let count: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM sandboxes WHERE state IN ('creating', 'running') \
             AND (?1 IS NULL OR owner_id = ?1)",
        )
        .and_then(|mut stmt| stmt.query_row([owner_id], |row| row.get(0)))
        .map_err(backend(operation))?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Both counts in one pass over the sandboxes holding a runtime (the writer is held meanwhile).
fn count_both(
    conn: &Connection,
    operation: &'static str,
    owner_id: &str,
) -> StoreResult<ActiveCounts> {
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    conn.prepare_cached(
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE owner_id = ?1) FROM sandboxes \
         WHERE state IN ('creating', 'running')",
    )
    .and_then(|mut stmt| {
        stmt.query_row([owner_id], |row| {
            Ok(ActiveCounts {
                active: count(row.get(0)?),
                owner_active: count(row.get(1)?),
            })
        })
    })
    .map_err(backend(operation))
}

/// The admission decision for a spawn of `owner_id` (empty: anonymous) living `lifetime`, on
/// `conn` as it is now. `report` counts everything the decision object shows; otherwise only
/// what a non-zero limit compares against is counted.
pub(super) fn decide(
    conn: &Connection,
    operation: &'static str,
    owner_id: &str,
    lifetime: Duration,
    limits: GlobalLimits,
    report: bool,
) -> StoreResult<Admission> {
    let anonymous = owner_id.is_empty();
    let quota = if anonymous {
        None
    } else {
        get(conn, operation, owner_id)?.map(|row| row.limits())
    };
    let effective = limits.effective(quota.as_ref());
    let counts = match effective.counts_needed(anonymous, report) {
        (true, true) => count_both(conn, operation, owner_id)?,
        (true, false) => ActiveCounts {
            active: count_holding(conn, operation, None)?,
            owner_active: 0,
        },
        (false, true) => ActiveCounts {
            active: 0,
            owner_active: count_holding(conn, operation, Some(owner_id))?,
        },
        (false, false) => ActiveCounts::default(),
    };
    Ok(effective.decide(lifetime, counts, anonymous))
}
