//! The audit log on SQLite: appended one row at a time, listed newest first in one query.

use rusqlite::{named_params, Connection};
use svc_core::audit::AuditFilter;

use super::codec::{backend, conflict_or_backend, read};
use crate::rows::{AuditBounds, AuditRow, AUDIT_COLUMNS};
use crate::StoreResult;

/// The conditions every listing shares ([`AuditBounds`]). Newest first, entries of the same microsecond by insertion.
const AUDIT_CONDITIONS: &str = "timestamp BETWEEN :since AND :until \
     AND (:after IS NULL OR timestamp < :until \
          OR seq < (SELECT seq FROM audit_log WHERE id = :after)) \
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

pub(super) fn insert(conn: &Connection, row: &AuditRow) -> StoreResult<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO audit_log ({AUDIT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    ))
    .and_then(|mut stmt| stmt.execute(row.values()))
    .map_err(conflict_or_backend("insert_audit", "audit entry", &row.id))?;
    Ok(())
}

/// The rows `filter` selects, newest first, in one query; decoded by the caller.
pub(super) fn list(conn: &Connection, filter: &AuditFilter) -> StoreResult<Vec<AuditRow>> {
    const OP: &str = "list_audit";
    let bounds = AuditBounds::of(filter);
    let mut stmt = conn
        .prepare_cached(&list_sql(filter.tenant_id.is_some()))
        .map_err(backend(OP))?;
    let rows = match &filter.tenant_id {
        Some(tenant) => stmt.query_map(
            named_params! {
                ":tenant": tenant,
                ":since": bounds.since,
                ":until": bounds.until,
                ":after": bounds.after_id,
                ":actor": filter.actor,
                ":action": filter.action,
                ":limit": bounds.limit,
            },
            read::<AuditRow>,
        ),
        None => stmt.query_map(
            named_params! {
                ":since": bounds.since,
                ":until": bounds.until,
                ":after": bounds.after_id,
                ":actor": filter.actor,
                ":action": filter.action,
                ":limit": bounds.limit,
            },
            read::<AuditRow>,
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
