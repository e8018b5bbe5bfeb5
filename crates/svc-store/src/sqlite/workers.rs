//! The worker registry and leases on SQLite. Every lease change is one statement on the writer
//! connection, so two acquirers never both win; the sandbox lease of a spawn is taken inside
//! the admitting transaction (`acquire` on its connection).

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Row};
use svc_core::clock::add_duration;
use svc_core::worker::{
    Lease, LeaseAcquire, LeaseCounts, Worker, WorkerCapacity, WorkerHeartbeat, WorkerStatus,
};
use svc_core::Timestamp;

use super::codec::{backend, micros, timestamp};
use crate::{StoreError, StoreResult};

pub(super) const WORKER_COLUMNS: &str = "id, hostname, status, providers, capabilities, \
    max_sandboxes, max_sandboxes_per_owner, url, last_heartbeat, created_at, updated_at";

pub(super) const LEASE_COLUMNS: &str = "resource_id, holder_id, generation, expires_at";

/// A worker row as read; decoded after the connection is released.
pub(super) struct WorkerRow {
    id: String,
    hostname: String,
    status: String,
    providers: String,
    capabilities: String,
    max_sandboxes: i64,
    max_sandboxes_per_owner: i64,
    url: Option<String>,
    last_heartbeat: i64,
    created_at: i64,
    updated_at: i64,
}

fn corrupt(key: &str, message: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        entity: "worker",
        key: key.to_owned(),
        message: message.into(),
    }
}

impl WorkerRow {
    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(WorkerRow {
            id: row.get(0)?,
            hostname: row.get(1)?,
            status: row.get(2)?,
            providers: row.get(3)?,
            capabilities: row.get(4)?,
            max_sandboxes: row.get(5)?,
            max_sandboxes_per_owner: row.get(6)?,
            url: row.get(7)?,
            last_heartbeat: row.get(8)?,
            created_at: row.get(9)?,
            updated_at: row.get(10)?,
        })
    }

    pub(super) fn into_domain(self) -> StoreResult<Worker> {
        let list = |text: &str| -> StoreResult<Vec<String>> {
            serde_json::from_str(text).map_err(|e| corrupt(&self.id, e.to_string()))
        };
        Ok(Worker {
            status: WorkerStatus::parse(&self.status)
                .ok_or_else(|| corrupt(&self.id, format!("unknown status {}", self.status)))?,
            providers: list(&self.providers)?,
            capabilities: list(&self.capabilities)?,
            capacity: WorkerCapacity {
                max_sandboxes: u64::try_from(self.max_sandboxes).unwrap_or(0),
                max_sandboxes_per_owner: u64::try_from(self.max_sandboxes_per_owner).unwrap_or(0),
            },
            last_heartbeat: timestamp("worker", &self.id, self.last_heartbeat)?,
            created_at: timestamp("worker", &self.id, self.created_at)?,
            updated_at: timestamp("worker", &self.id, self.updated_at)?,
            stale: false,
            url: self.url,
            hostname: self.hostname,
            id: self.id,
        })
    }
}

fn encode_list(list: &[String]) -> StoreResult<String> {
    serde_json::to_string(list).map_err(|e| StoreError::Backend {
        operation: "encode list",
        source: e.into(),
    })
}

/// Inserts or refreshes a worker from a heartbeat at `at`, keeping `created_at`.
pub(super) fn upsert(
    conn: &Connection,
    id: &str,
    heartbeat: &WorkerHeartbeat,
    at: Timestamp,
) -> StoreResult<WorkerRow> {
    const OP: &str = "upsert_worker";
    let providers = encode_list(&heartbeat.providers)?;
    let capabilities = encode_list(&heartbeat.capabilities)?;
    let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    conn.prepare_cached(&format!(
        "INSERT INTO workers ({WORKER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?9) \
         ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, status = excluded.status, \
         providers = excluded.providers, capabilities = excluded.capabilities, \
         max_sandboxes = excluded.max_sandboxes, \
         max_sandboxes_per_owner = excluded.max_sandboxes_per_owner, url = excluded.url, \
         last_heartbeat = excluded.last_heartbeat, updated_at = excluded.updated_at \
         RETURNING {WORKER_COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                id,
                heartbeat.hostname,
                heartbeat.status.as_str(),
                providers,
                capabilities,
                count(heartbeat.capacity.max_sandboxes),
                count(heartbeat.capacity.max_sandboxes_per_owner),
                heartbeat.url,
                micros(at)
            ],
            WorkerRow::read,
        )
    })
    .map_err(backend(OP))
}

/// A lease row as read.
pub(super) struct LeaseRow {
    resource_id: String,
    holder_id: String,
    generation: i64,
    expires_at: i64,
}

impl LeaseRow {
    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(LeaseRow {
            resource_id: row.get(0)?,
            holder_id: row.get(1)?,
            generation: row.get(2)?,
            expires_at: row.get(3)?,
        })
    }

    pub(super) fn into_domain(self) -> StoreResult<Lease> {
        Ok(Lease {
            expires_at: timestamp("lease", &self.resource_id, self.expires_at)?,
            generation: u64::try_from(self.generation).unwrap_or(0),
            holder_id: self.holder_id,
            resource_id: self.resource_id,
        })
    }
}

/// A lease decision as read, decoded later.
pub(super) enum AcquireRow {
    Acquired(LeaseRow),
    Held(LeaseRow),
}

impl AcquireRow {
    pub(super) fn into_domain(self) -> StoreResult<LeaseAcquire> {
        Ok(match self {
            AcquireRow::Acquired(row) => LeaseAcquire::Acquired(row.into_domain()?),
            AcquireRow::Held(row) => LeaseAcquire::Held(row.into_domain()?),
        })
    }
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
                LeaseRow::read,
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
    .and_then(|mut stmt| stmt.query_row([resource_id], LeaseRow::read).optional())
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
            LeaseRow::read,
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
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut stmt = conn
        .prepare_cached(
            "SELECT holder_id, COUNT(*), COUNT(*) FILTER (WHERE expires_at > ?1) \
             FROM leases GROUP BY holder_id",
        )
        .map_err(backend(OP))?;
    let rows = stmt
        .query_map([micros(now)], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })
        .map_err(backend(OP))?;
    let mut counts = LeaseCounts::default();
    for row in rows {
        let (holder, total, active) = row.map_err(backend(OP))?;
        counts.total += count(total);
        counts.active += count(active);
        if active > 0 {
            counts.by_holder.insert(holder, count(active));
        }
    }
    counts.expired = counts.total - counts.active;
    Ok(counts)
}
