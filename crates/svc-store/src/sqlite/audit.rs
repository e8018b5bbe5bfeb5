//! The audit log on SQLite: appended one row at a time, listed newest first in one query.

use rusqlite::{named_params, Connection, Row};
use svc_core::audit::{AuditEntry, AuditFilter, AuditOutcome, MAX_AUDIT_LIMIT};

use super::codec::{backend, conflict_or_backend, micros, timestamp};
use crate::{StoreError, StoreResult};

const AUDIT_COLUMNS: &str =
    "id, timestamp, actor, role, tenant_id, action, resource, outcome, details";

/// The conditions every listing shares: an unset bound is the widest one, so the time range is
/// an index range either way. Newest first, entries of the same microsecond by insertion.
const AUDIT_CONDITIONS: &str = "timestamp BETWEEN :since AND :until \
     AND (:actor IS NULL OR actor = :actor) \
     AND (:action IS NULL OR action = :action) \
     ORDER BY timestamp DESC, seq DESC LIMIT :limit";

/// Two statements rather than one with `(:tenant IS NULL OR ...)`, which no index serves: one
/// tenant's entries walk `audit_log_by_tenant_time`, every tenant's walk `audit_log_by_time`.
fn list_sql(by_tenant: bool) -> String {
    if by_tenant {
        format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE tenant_id = :tenant AND {AUDIT_CONDITIONS}")
    } else {
        format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE {AUDIT_CONDITIONS}")
    }
}

/// An audit row as stored.
pub(super) struct AuditRow {
    id: String,
    timestamp: i64,
    actor: String,
    role: String,
    tenant_id: String,
    action: String,
    resource: String,
    outcome: String,
    details: String,
}

impl AuditRow {
    pub(super) fn from_domain(entry: &AuditEntry) -> StoreResult<Self> {
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

    /// Bound in [`AUDIT_COLUMNS`] order.
    fn params(&self) -> [&dyn rusqlite::ToSql; 9] {
        [
            &self.id,
            &self.timestamp,
            &self.actor,
            &self.role,
            &self.tenant_id,
            &self.action,
            &self.resource,
            &self.outcome,
            &self.details,
        ]
    }

    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(AuditRow {
            id: row.get(0)?,
            timestamp: row.get(1)?,
            actor: row.get(2)?,
            role: row.get(3)?,
            tenant_id: row.get(4)?,
            action: row.get(5)?,
            resource: row.get(6)?,
            outcome: row.get(7)?,
            details: row.get(8)?,
        })
    }

    pub(super) fn into_domain(self) -> StoreResult<AuditEntry> {
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

pub(super) fn insert(conn: &Connection, row: &AuditRow) -> StoreResult<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO audit_log ({AUDIT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    ))
    .and_then(|mut stmt| stmt.execute(row.params()))
    .map_err(conflict_or_backend("insert_audit", "audit entry", &row.id))?;
    Ok(())
}

/// The rows `filter` selects, newest first, in one query; decoded by the caller.
pub(super) fn list(conn: &Connection, filter: &AuditFilter) -> StoreResult<Vec<AuditRow>> {
    const OP: &str = "list_audit";
    let since = filter.since.map_or(i64::MIN, micros);
    let until = filter.until.map_or(i64::MAX, micros);
    let limit = i64::from(filter.limit.clamp(1, MAX_AUDIT_LIMIT));
    let mut stmt = conn
        .prepare_cached(&list_sql(filter.tenant_id.is_some()))
        .map_err(backend(OP))?;
    let rows = match &filter.tenant_id {
        Some(tenant) => stmt.query_map(
            named_params! {
                ":tenant": tenant,
                ":since": since,
                ":until": until,
                ":actor": filter.actor,
                ":action": filter.action,
                ":limit": limit,
            },
            AuditRow::read,
        ),
        None => stmt.query_map(
            named_params! {
                ":since": since,
                ":until": until,
                ":actor": filter.actor,
                ":action": filter.action,
                ":limit": limit,
            },
            AuditRow::read,
        ),
    }
    .map_err(backend(OP))?;
    rows.map(|row| row.map_err(backend(OP))).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The plan of each listing statement: an index range walked backwards, no sort.
    #[test]
    fn listings_walk_an_index_newest_first() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrate::run(&mut conn).unwrap();
        for (by_tenant, index) in [
            (true, "audit_log_by_tenant_time"),
            (false, "audit_log_by_time"),
        ] {
            let mut stmt = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", list_sql(by_tenant)))
                .unwrap();
            // The plan does not depend on the values: every parameter is NULL here.
            for index in 1..=stmt.parameter_count() {
                stmt.raw_bind_parameter(index, rusqlite::types::Null)
                    .unwrap();
            }
            let mut rows = stmt.raw_query();
            let mut plan = String::new();
            while let Some(row) = rows.next().unwrap() {
                plan.push_str(&row.get::<_, String>(3).unwrap());
                plan.push('\n');
            }
            assert!(plan.contains(index), "{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        }
    }
}
