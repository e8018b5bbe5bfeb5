//! Worker and lease rows.

use svc_core::worker::{
    Lease, LeaseAcquire, LeaseCounts, Worker, WorkerCapacity, WorkerHeartbeat, WorkerStatus,
};
use svc_core::Timestamp;

use super::{count, micros, stored_count, stored_row, timestamp};
use crate::{StoreError, StoreResult};

pub(crate) const WORKER_COLUMNS: &str = WorkerRow::COLUMNS;

pub(crate) const LEASE_COLUMNS: &str = LeaseRow::COLUMNS;

stored_row! {
    /// A worker row as stored.
    struct WorkerRow {
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
}

fn corrupt(key: &str, message: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        entity: "worker",
        key: key.to_owned(),
        message: message.into(),
    }
}

fn encode_list(list: &[String]) -> StoreResult<String> {
    serde_json::to_string(list).map_err(|e| StoreError::Backend {
        operation: "encode list",
        source: e.into(),
    })
}

impl WorkerRow {
    /// The row a heartbeat from `id` at `at` writes (an upsert keeps the stored `created_at`).
    pub(crate) fn from_heartbeat(
        id: &str,
        heartbeat: &WorkerHeartbeat,
        at: Timestamp,
    ) -> StoreResult<Self> {
        Ok(WorkerRow {
            id: id.to_owned(),
            hostname: heartbeat.hostname.clone(),
            status: heartbeat.status.as_str().to_owned(),
            providers: encode_list(&heartbeat.providers)?,
            capabilities: encode_list(&heartbeat.capabilities)?,
            max_sandboxes: stored_count(heartbeat.capacity.max_sandboxes),
            max_sandboxes_per_owner: stored_count(heartbeat.capacity.max_sandboxes_per_owner),
            url: heartbeat.url.clone(),
            last_heartbeat: micros(at),
            created_at: micros(at),
            updated_at: micros(at),
        })
    }

    pub(crate) fn into_domain(self) -> StoreResult<Worker> {
        let list = |text: &str| -> StoreResult<Vec<String>> {
            serde_json::from_str(text).map_err(|e| corrupt(&self.id, e.to_string()))
        };
        Ok(Worker {
            status: WorkerStatus::parse(&self.status)
                .ok_or_else(|| corrupt(&self.id, format!("unknown status {}", self.status)))?,
            providers: list(&self.providers)?,
            capabilities: list(&self.capabilities)?,
            capacity: WorkerCapacity {
                max_sandboxes: count(self.max_sandboxes),
                max_sandboxes_per_owner: count(self.max_sandboxes_per_owner),
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

stored_row! {
    /// A lease row as stored.
    struct LeaseRow {
        resource_id: String,
        holder_id: String,
        generation: i64,
        expires_at: i64,
    }
}

impl LeaseRow {
    pub(crate) fn into_domain(self) -> StoreResult<Lease> {
        Ok(Lease {
            expires_at: timestamp("lease", &self.resource_id, self.expires_at)?,
            generation: count(self.generation),
            holder_id: self.holder_id,
            resource_id: self.resource_id,
        })
    }
}

/// A lease decision as read, decoded later.
pub(crate) enum AcquireRow {
    Acquired(LeaseRow),
    Held(LeaseRow),
}

impl AcquireRow {
    pub(crate) fn into_domain(self) -> StoreResult<LeaseAcquire> {
        Ok(match self {
            AcquireRow::Acquired(row) => LeaseAcquire::Acquired(row.into_domain()?),
            AcquireRow::Held(row) => LeaseAcquire::Held(row.into_domain()?),
        })
    }
}

/// Lease counts from per-holder rows of (holder, leases, unexpired leases).
pub(crate) fn fold_lease_counts(rows: impl IntoIterator<Item = (String, i64, i64)>) -> LeaseCounts {
    let mut counts = LeaseCounts::default();
    for (holder, total, active) in rows {
        counts.total += count(total);
        counts.active += count(active);
        if active > 0 {
            counts.by_holder.insert(holder, count(active));
        }
    }
    counts.expired = counts.total - counts.active;
    counts
}
