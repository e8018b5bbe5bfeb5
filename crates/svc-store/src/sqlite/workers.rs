//! The worker registry and leases on SQLite. Every lease change is one statement on the writer
//! connection, so two acquirers never both win; the sandbox lease of a spawn is taken inside
//! the admitting transaction (`acquire` on its connection).

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use svc_core::clock::add_duration;
use svc_core::worker::{LeaseCounts, WorkerHeartbeat};
use svc_core::Timestamp;

use super::codec::{backend, read};
use crate::rows::{
    fold_lease_counts, micros, AcquireRow, LeaseRow, WorkerRow, LEASE_COLUMNS, WORKER_COLUMNS,
};
use crate::{StoreError, StoreResult};

/// Inserts or refreshes a worker from a heartbeat at `at`, keeping `created_at`.
pub(super) fn upsert(
    conn: &Connection,
    id: &str,
    heartbeat: &WorkerHeartbeat,
    at: Timestamp,
) -> StoreResult<WorkerRow> {
    const OP: &str = "upsert_worker";
    let row = WorkerRow::from_heartbeat(id, heartbeat, at)?;
    conn.prepare_cached(&format!(
        "INSERT INTO workers ({WORKER_COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
         ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, \
         status = CASE WHEN workers.status = 'draining' AND excluded.status = 'online' \
                  THEN workers.status ELSE excluded.status END, \
         providers = excluded.providers, capabilities = excluded.capabilities, \
         max_sandboxes = excluded.max_sandboxes, \
         max_sandboxes_per_owner = excluded.max_sandboxes_per_owner, url = excluded.url, \
         last_heartbeat = excluded.last_heartbeat, updated_at = excluded.updated_at \
         RETURNING {WORKER_COLUMNS}"
    ))
    .and_then(|mut stmt| stmt.query_row(row.values(), read::<WorkerRow>))
    .map_err(backend(OP))
}

/// Acquires `resource_id` for `holder` until `now + ttl` when it is free, expired or already
/// the holder's; a new holder bumps the generation. One statement: the condition and the write
/// cannot be separated.
pub(super) fn acquire(
    conn: &Connection,
    operation: &'static str,
    resource_id: &str,
    holder: &str,
    ttl: Duration,
    now: Timestamp,
) -> StoreResult<AcquireRow> {
    let acquired = conn
        .prepare_cached(&format!(
            "INSERT INTO leases ({LEASE_COLUMNS}) VALUES (?1, ?2, 1, ?3) \
             ON CONFLICT (resource_id) DO UPDATE SET \
             generation = CASE WHEN leases.holder_id = excluded.holder_id THEN leases.generation \
                          ELSE leases.generation + 1 END, \
             holder_id = excluded.holder_id, expires_at = excluded.expires_at \
             WHERE leases.holder_id = excluded.holder_id OR leases.expires_at <= ?4 \
             RETURNING {LEASE_COLUMNS}"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    resource_id,
                    holder,
                    micros(add_duration(now, ttl)),
                    micros(now)
                ],
                read::<LeaseRow>,
            )
            .optional()
        })
        .map_err(backend(operation))?;
    if let Some(row) = acquired {
        return Ok(AcquireRow::Acquired(row));
    }
    get(conn, operation, resource_id)?
        .map(AcquireRow::Held)
        .ok_or_else(|| StoreError::Backend {
            operation,
            source: "a lease refused to its acquirer vanished".into(),
        })
}

pub(super) fn get(
    conn: &Connection,
    operation: &'static str,
    resource_id: &str,
) -> StoreResult<Option<LeaseRow>> {
    conn.prepare_cached(&format!(
        "SELECT {LEASE_COLUMNS} FROM leases WHERE resource_id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([resource_id], read::<LeaseRow>).optional())
    .map_err(backend(operation))
}

/// Extends an unexpired lease its holder holds.
pub(super) fn renew(
    conn: &Connection,
    resource_id: &str,
    holder: &str,
    ttl: Duration,
    now: Timestamp,
) -> StoreResult<Option<LeaseRow>> {
    conn.prepare_cached(&format!(
        "UPDATE leases SET expires_at = ?3 \
         WHERE resource_id = ?1 AND holder_id = ?2 AND expires_at > ?4 RETURNING {LEASE_COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                resource_id,
                holder,
                micros(add_duration(now, ttl)),
                micros(now)
            ],
            read::<LeaseRow>,
        )
        .optional()
    })
    .map_err(backend("renew_lease"))
}

/// Extends every unexpired lease `holder` holds; returns how many.
pub(super) fn renew_all(
    conn: &Connection,
    holder: &str,
    ttl: Duration,
    now: Timestamp,
) -> StoreResult<u64> {
    conn.prepare_cached(
        "UPDATE leases SET expires_at = ?2 WHERE holder_id = ?1 AND expires_at > ?3",
    )
    .and_then(|mut stmt| stmt.execute(params![holder, micros(add_duration(now, ttl)), micros(now)]))
    .map(|n| n as u64)
    .map_err(backend("renew_leases_held_by"))
}

/// Lets a lease lapse now (kept, expired, so its generation stays); holder only.
pub(super) fn release(
    conn: &Connection,
    resource_id: &str,
    holder: &str,
    now: Timestamp,
) -> StoreResult<bool> {
    conn.prepare_cached(
        "UPDATE leases SET expires_at = MIN(expires_at, ?3) WHERE resource_id = ?1 AND holder_id = ?2",
    )
    .and_then(|mut stmt| stmt.execute(params![resource_id, holder, micros(now)]))
    .map(|n| n > 0)
    .map_err(backend("release_lease"))
}

pub(super) fn counts(conn: &Connection, now: Timestamp) -> StoreResult<LeaseCounts> {
    const OP: &str = "lease_counts";
    let mut stmt = conn
        .prepare_cached(
            "SELECT holder_id, COUNT(*), COUNT(*) FILTER (WHERE expires_at > ?1) \
             FROM leases GROUP BY holder_id",
        )
        .map_err(backend(OP))?;
    let rows = stmt
        .query_map([micros(now)], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .map_err(backend(OP))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(backend(OP))?;
    Ok(fold_lease_counts(rows))
}
