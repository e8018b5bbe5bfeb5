//! The worker registry and leases on PostgreSQL. Every lease change is one statement: an
//! `INSERT ... ON CONFLICT DO UPDATE ... WHERE` locks the row and re-checks the condition on its
//! latest version, so of replicas racing for a lease exactly one wins, and each new holder
//! increments the generation exactly once.

use std::time::Duration;

use deadpool_postgres::GenericClient;
use svc_core::clock::add_duration;
use svc_core::worker::{LeaseCounts, WorkerHeartbeat, WorkerStatus};
use svc_core::Timestamp;

use super::codec::{backend, execute, fetch_one, fetch_opt, params, query, query_opt, read};
use crate::rows::{
    fold_lease_counts, micros, AcquireRow, LeaseRow, WorkerRow, LEASE_COLUMNS, WORKER_COLUMNS,
};
use crate::{StoreError, StoreResult};

/// Inserts or refreshes a worker from a heartbeat at `at`, keeping `created_at`.
pub(super) async fn upsert<C: GenericClient>(
    client: &C,
    id: &str,
    heartbeat: &WorkerHeartbeat,
    at: Timestamp,
) -> StoreResult<WorkerRow> {
    let worker = WorkerRow::from_heartbeat(id, heartbeat, at)?;
    fetch_one(
        client,
        "upsert_worker",
        &format!(
            "INSERT INTO workers ({WORKER_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (id) DO UPDATE SET hostname = EXCLUDED.hostname, \
             status = CASE WHEN workers.status = 'draining' AND EXCLUDED.status = 'online' \
                      THEN workers.status ELSE EXCLUDED.status END, \
             providers = EXCLUDED.providers, \
             capabilities = EXCLUDED.capabilities, max_sandboxes = EXCLUDED.max_sandboxes, \
             max_sandboxes_per_owner = EXCLUDED.max_sandboxes_per_owner, url = EXCLUDED.url, \
             last_heartbeat = EXCLUDED.last_heartbeat, updated_at = EXCLUDED.updated_at \
             RETURNING {WORKER_COLUMNS}"
        ),
        &params(&worker.values()),
    )
    .await
}

pub(super) async fn set_status<C: GenericClient>(
    client: &C,
    id: &str,
    status: WorkerStatus,
    at: Timestamp,
) -> StoreResult<Option<WorkerRow>> {
    fetch_opt(
        client,
        "set_worker_status",
        &format!(
            "UPDATE workers SET status = $2, updated_at = $3 WHERE id = $1 \
             RETURNING {WORKER_COLUMNS}"
        ),
        &[&id, &status.as_str(), &micros(at)],
    )
    .await
}

pub(super) async fn get_worker<C: GenericClient>(
    client: &C,
    id: &str,
) -> StoreResult<Option<WorkerRow>> {
    fetch_opt(
        client,
        "get_worker",
        &format!("SELECT {WORKER_COLUMNS} FROM workers WHERE id = $1"),
        &[&id],
    )
    .await
}

/// How often an acquirer refused a lease looks again when the lease it was refused is gone by
/// the time it reads it (a purge in between); the next attempt then finds the resource free.
const ACQUIRE_ATTEMPTS: usize = 3;

/// Acquires `resource_id` for `holder` until `now + ttl` when it is free, expired or already
/// the holder's; a new holder bumps the generation. The condition and the write are one
/// statement.
pub(super) async fn acquire<C: GenericClient>(
    client: &C,
    operation: &'static str,
    resource_id: &str,
    holder: &str,
    ttl: Duration,
    now: Timestamp,
) -> StoreResult<AcquireRow> {
    let sql = format!(
        "INSERT INTO leases ({LEASE_COLUMNS}) VALUES ($1, $2, 1, $3) \
         ON CONFLICT (resource_id) DO UPDATE SET \
         generation = CASE WHEN leases.holder_id = EXCLUDED.holder_id THEN leases.generation \
                      ELSE leases.generation + 1 END, \
         holder_id = EXCLUDED.holder_id, expires_at = EXCLUDED.expires_at \
         WHERE leases.holder_id = EXCLUDED.holder_id OR leases.expires_at <= $4 \
         RETURNING {LEASE_COLUMNS}"
    );
    let until = micros(add_duration(now, ttl));
    for _ in 0..ACQUIRE_ATTEMPTS {
        let acquired = query_opt(
            client,
            operation,
            &sql,
            &[&resource_id, &holder, &until, &micros(now)],
        )
        .await?;
        if let Some(row) = acquired {
            return Ok(AcquireRow::Acquired(read(operation, &row)?));
        }
        if let Some(held) = get(client, operation, resource_id).await? {
            return Ok(AcquireRow::Held(held));
        }
    }
    Err(StoreError::Backend {
        operation,
        source: "a lease refused to its acquirer kept vanishing".into(),
    })
}

pub(super) async fn get<C: GenericClient>(
    client: &C,
    operation: &'static str,
    resource_id: &str,
) -> StoreResult<Option<LeaseRow>> {
    fetch_opt(
        client,
        operation,
        &format!("SELECT {LEASE_COLUMNS} FROM leases WHERE resource_id = $1"),
        &[&resource_id],
    )
    .await
}

/// Extends an unexpired lease its holder holds.
pub(super) async fn renew<C: GenericClient>(
    client: &C,
    resource_id: &str,
    holder: &str,
    ttl: Duration,
    now: Timestamp,
) -> StoreResult<Option<LeaseRow>> {
    fetch_opt(
        client,
        "renew_lease",
        &format!(
            "UPDATE leases SET expires_at = $3 \
             WHERE resource_id = $1 AND holder_id = $2 AND expires_at > $4 \
             RETURNING {LEASE_COLUMNS}"
        ),
        &[
            &resource_id,
            &holder,
            &micros(add_duration(now, ttl)),
            &micros(now),
        ],
    )
    .await
}

/// Extends every unexpired lease `holder` holds; returns how many.
pub(super) async fn renew_all<C: GenericClient>(
    client: &C,
    holder: &str,
    ttl: Duration,
    now: Timestamp,
) -> StoreResult<u64> {
    execute(
        client,
        "renew_leases_held_by",
        "UPDATE leases SET expires_at = $2 WHERE holder_id = $1 AND expires_at > $3",
        &[&holder, &micros(add_duration(now, ttl)), &micros(now)],
    )
    .await
}

/// Lets a lease lapse now (kept, expired, so its generation stays); holder only.
pub(super) async fn release<C: GenericClient>(
    client: &C,
    resource_id: &str,
    holder: &str,
    now: Timestamp,
) -> StoreResult<bool> {
    execute(
        client,
        "release_lease",
        "UPDATE leases SET expires_at = LEAST(expires_at, $3) \
         WHERE resource_id = $1 AND holder_id = $2",
        &[&resource_id, &holder, &micros(now)],
    )
    .await
    .map(|n| n > 0)
}

pub(super) async fn counts<C: GenericClient>(
    client: &C,
    now: Timestamp,
) -> StoreResult<LeaseCounts> {
    const OP: &str = "lease_counts";
    let rows = query(
        client,
        OP,
        "SELECT holder_id, COUNT(*), COUNT(*) FILTER (WHERE expires_at > $1) \
         FROM leases GROUP BY holder_id",
        &[&micros(now)],
    )
    .await?;
    let rows = rows
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        .map_err(backend(OP))?;
    Ok(fold_lease_counts(rows))
}
