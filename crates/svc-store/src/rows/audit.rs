//! Audit log rows and the bounds of a listing.

use svc_core::audit::{AuditEntry, AuditFilter, AuditOutcome, MAX_AUDIT_LIMIT};

use super::{micros, stored_row, timestamp};
use crate::{StoreError, StoreResult};

pub(crate) const AUDIT_COLUMNS: &str = AuditRow::COLUMNS;

/// The time range and row limit of a listing: an unset bound is the widest one, so the time
/// range is an index range either way; the limit is taken as 1..=[`MAX_AUDIT_LIMIT`].
/// A page's start narrows `until` to the previous page's last entry; of the entries at that
/// very time, only those written before it (`seq` below its) follow.
pub(crate) struct AuditBounds {
    pub(crate) since: i64,
    pub(crate) until: i64,
    pub(crate) limit: i64,
    pub(crate) after_id: Option<String>,
}

impl AuditBounds {
    pub(crate) fn of(filter: &AuditFilter) -> Self {
        let until = filter.until.map_or(i64::MAX, micros);
        AuditBounds {
            since: filter.since.map_or(i64::MIN, micros),
            until: filter
                .after
                .as_ref()
                .map_or(until, |after| until.min(micros(after.timestamp))),
            // One more than a page tells whether another follows.
            limit: i64::from(filter.limit.clamp(1, MAX_AUDIT_LIMIT + 1)),
            after_id: filter.after.as_ref().map(|after| after.id.clone()),
        }
    }
}

stored_row! {
    /// An audit row as stored.
    struct AuditRow {
        pub(crate) id: String,
        timestamp: i64,
        actor: String,
        role: String,
        tenant_id: String,
        action: String,
        resource: String,
        outcome: String,
        details: String,
    }
}

impl AuditRow {
    pub(crate) fn from_domain(entry: &AuditEntry) -> StoreResult<Self> {
        Ok(AuditRow {
            id: entry.id.clone(),
            timestamp: micros(entry.timestamp),
            actor: entry.actor.clone(),
            role: entry.role.clone(),
            tenant_id: entry.tenant_id.clone(),
            action: entry.action.clone(),
            resource: entry.resource.clone(),
            outcome: entry.outcome.as_str().to_owned(),
            details: serde_json::to_string(&entry.details).map_err(|e| StoreError::Backend {
                operation: "encode audit details",
                source: e.into(),
            })?,
        })
    }

    pub(crate) fn into_domain(self) -> StoreResult<AuditEntry> {
        const E: &str = "audit entry";
        let corrupt = |message: String| StoreError::Corrupt {
            entity: E,
            key: self.id.clone(),
            message,
        };
        Ok(AuditEntry {
            timestamp: timestamp(E, &self.id, self.timestamp)?,
            outcome: AuditOutcome::parse(&self.outcome)
                .ok_or_else(|| corrupt(format!("unknown outcome {:?}", self.outcome)))?,
            details: serde_json::from_str(&self.details)
                .map_err(|e| corrupt(format!("details: {e}")))?,
            actor: self.actor,
            role: self.role,
            tenant_id: self.tenant_id,
            action: self.action,
            resource: self.resource,
            id: self.id,
        })
    }
}
