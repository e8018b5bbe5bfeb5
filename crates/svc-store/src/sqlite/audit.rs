//! The audit log on SQLite: appended one row at a time, listed newest first in one query.

use rusqlite::{Connection, ToSql};
use svc_core::audit::AuditFilter;
use svc_core::error::Resource;

use super::codec::{backend, conflict_or_backend, read};
use crate::rows::{audit_list_sql, AuditRow, AuditValue, AUDIT_COLUMNS};
use crate::StoreResult;

pub(super) fn insert(conn: &Connection, row: &AuditRow) -> StoreResult<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO audit_log ({AUDIT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    ))
    .and_then(|mut stmt| stmt.execute(row.values()))
    .map_err(conflict_or_backend(
        "insert_audit",
        Resource::AuditEntry,
        &row.id,
    ))?;
    Ok(())
}

/// The rows `filter` selects, newest first, in one query ([`audit_list_sql`]); decoded by the
/// caller.
pub(super) fn list(conn: &Connection, filter: &AuditFilter) -> StoreResult<Vec<AuditRow>> {
    const OP: &str = "list_audit";
    let (sql, values) = audit_list_sql(filter, '?');
    let values: Vec<&dyn ToSql> = values
        .iter()
        .map(|value| -> &dyn ToSql {
            match value {
                AuditValue::Text(text) => text,
                AuditValue::Int(int) => int,
            }
        })
        .collect();
    let mut stmt = conn.prepare_cached(&sql).map_err(backend(OP))?;
    let rows = stmt
        .query_map(values.as_slice(), read::<AuditRow>)
        .map_err(backend(OP))?;
    rows.map(|row| row.map_err(backend(OP))).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use svc_core::audit::AuditPosition;

    use super::*;

    /// The plan of each listing statement: the range of the index its filters name, walked
    /// backwards, no sort; with or without a page's start, and whatever action is asked for.
    #[test]
    fn listings_walk_an_index_newest_first() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrate::run(&mut conn).unwrap();
        for (tenant, actor, index) in [
            (
                true,
                false,
                "audit_log_by_tenant_time (tenant_id=? AND timestamp>? AND timestamp<?)",
            ),
            (
                false,
                true,
                "audit_log_by_actor_time (actor=? AND timestamp>? AND timestamp<?)",
            ),
            (
                false,
                false,
                "audit_log_by_time (timestamp>? AND timestamp<?)",
            ),
        ] {
            for (action, after) in [(false, false), (true, false), (false, true), (true, true)] {
                let filter = AuditFilter {
                    tenant_id: tenant.then(|| "acme".into()),
                    actor: actor.then(|| "alice".into()),
                    action: action.then(|| "sandbox.create".into()),
                    after: after.then(|| AuditPosition {
                        timestamp: chrono::DateTime::from_timestamp(1_000_000, 0).unwrap(),
                        id: "au-1".into(),
                    }),
                    ..AuditFilter::default()
                };
                let (sql, params) = audit_list_sql(&filter, '?');
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
                assert_eq!(stmt.parameter_count(), params.len(), "{sql}");
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
                assert!(
                    plan.starts_with(&format!("SEARCH audit_log USING INDEX {index}")),
                    "{filter:?}: {plan}"
                );
                assert!(!plan.contains("TEMP B-TREE"), "{filter:?}: {plan}");
            }
        }
    }
}
