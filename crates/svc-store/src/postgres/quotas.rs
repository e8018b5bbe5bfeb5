//! Owner quotas and admission on PostgreSQL. A spawn reads the owner's quota and counts what
//! its limits need inside the admitting transaction, after the admission lock, so no other
//! replica's spawn can land between the decision and the insert. Counting walks every live
//! sandbox, and the lock serialises admissions across replicas, so nothing is counted that no
//! limit asks for: with 10,000 live sandboxes an unconditional count capped every replica
//! together at about 360 spawns a second.

use std::time::Duration;

use deadpool_postgres::GenericClient;
use svc_core::admission::{ActiveCounts, Admission};
use svc_core::quota::{GlobalLimits, QuotaLimits, QuotaSummary};
use svc_core::{OwnerId, Timestamp};

use super::codec::{count_at, fetch_one, fetch_opt, params, query_one};
use crate::rows::{AdmissionPlan, QuotaRow, QUOTA_COLUMNS};
use crate::StoreResult;

/// Serialises admissions: every admitting transaction takes it first and holds it to its end.
/// The key is this lock's class ("svca" in ASCII) and the store's schema, so stores in different
/// schemas of one database do not wait for each other.
pub(super) const ADMISSION_LOCK: &str =
    "SELECT pg_advisory_xact_lock(1937138529, hashtext(COALESCE(current_schema(), '')))";

/// The sandboxes holding a runtime, in all and the owner's, in one snapshot.
const COUNT_BOTH: &str = "SELECT COUNT(*), COUNT(*) FILTER (WHERE owner_id = $1) \
     FROM sandboxes WHERE state IN ('creating', 'running', 'paused')";

/// The sandboxes holding a runtime.
const COUNT_ALL: &str =
    "SELECT COUNT(*) FROM sandboxes WHERE state IN ('creating', 'running', 'paused')";

/// The owner's sandboxes holding a runtime.
const COUNT_OWNER: &str = "SELECT COUNT(*) FROM sandboxes \
     WHERE owner_id = $1 AND state IN ('creating', 'running', 'paused')";

/// The admission decision for a spawn of `owner` (none: anonymous) living `lifetime`, as
/// the database is now to `client` (a transaction holding the admission lock, for a spawn), and
/// whether sandbox counts took part in it (then only the lock keeps it true until commit).
pub(super) async fn decide<C: GenericClient>(
    client: &C,
    operation: &'static str,
    owner: Option<&OwnerId>,
    lifetime: Duration,
    limits: GlobalLimits,
    report: bool,
) -> StoreResult<(Admission, bool)> {
    let quota = match owner {
        Some(owner) => get(client, owner.as_str()).await?.map(|row| row.limits()),
        None => None,
    };
    let plan = AdmissionPlan::new(owner, limits, quota, report);
    // The plan never counts an anonymous caller's own sandboxes.
    let owner_id = owner.map(OwnerId::as_str).unwrap_or_default();
    let (all, own) = plan.counts_needed();
    let counts = match (all, own) {
        (false, false) => ActiveCounts::default(),
        (true, true) => {
            let row = query_one(client, operation, COUNT_BOTH, &[&owner_id]).await?;
            ActiveCounts {
                active: count_at(operation, &row, 0)?,
                owner_active: count_at(operation, &row, 1)?,
            }
        }
        (true, false) => ActiveCounts {
            active: count_at(
                operation,
                &query_one(client, operation, COUNT_ALL, &[]).await?,
                0,
            )?,
            owner_active: 0,
        },
        (false, true) => ActiveCounts {
            active: 0,
            owner_active: count_at(
                operation,
                &query_one(client, operation, COUNT_OWNER, &[&owner_id]).await?,
                0,
            )?,
        },
    };
    Ok((plan.decide(lifetime, counts), all || own))
}

pub(super) async fn get<C: GenericClient>(
    client: &C,
    owner_id: &str,
) -> StoreResult<Option<QuotaRow>> {
    fetch_opt(
        client,
        "get_quota",
        &format!("SELECT {QUOTA_COLUMNS} FROM owner_quotas WHERE owner_id = $1"),
        &[&owner_id],
    )
    .await
}

/// Inserts or replaces the quota of `owner_id`, keeping its `created_at`.
pub(super) async fn put<C: GenericClient>(
    client: &C,
    owner_id: &str,
    limits: QuotaLimits,
    at: Timestamp,
) -> StoreResult<QuotaRow> {
    let quota = QuotaRow::new(owner_id, limits, at);
    fetch_one(
        client,
        "put_quota",
        &format!(
            "INSERT INTO owner_quotas ({QUOTA_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (owner_id) DO UPDATE SET max_sandboxes = EXCLUDED.max_sandboxes, \
             max_ttl_secs = EXCLUDED.max_ttl_secs, \
             max_exec_timeout_secs = EXCLUDED.max_exec_timeout_secs, \
             updated_at = EXCLUDED.updated_at \
             RETURNING {QUOTA_COLUMNS}"
        ),
        &params(&quota.values()),
    )
    .await
}

pub(super) async fn summary<C: GenericClient>(client: &C) -> StoreResult<QuotaSummary> {
    const OP: &str = "quota_summary";
    let row = query_one(
        client,
        OP,
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE max_sandboxes > 0), \
         COUNT(*) FILTER (WHERE max_ttl_secs > 0), \
         COUNT(*) FILTER (WHERE max_exec_timeout_secs > 0) FROM owner_quotas",
        &[],
    )
    .await?;
    Ok(QuotaSummary {
        total: count_at(OP, &row, 0)?,
        with_max_sandboxes: count_at(OP, &row, 1)?,
        with_max_ttl: count_at(OP, &row, 2)?,
        with_max_exec_timeout: count_at(OP, &row, 3)?,
    })
}
