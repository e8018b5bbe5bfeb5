//! The audit log on PostgreSQL: appended one row at a time, listed newest first in one query.

use deadpool_postgres::GenericClient;
use svc_core::audit::{AuditEntry, AuditFilter};
use tokio_postgres::types::ToSql;

use super::codec::{fetch_all, insert, params};
use crate::rows::{AuditBounds, AuditRow, AUDIT_COLUMNS};
use crate::StoreResult;

/// The conditions every listing shares ([`AuditBounds`]). Newest first, entries of the same
/// microsecond by insertion.
const AUDIT_CONDITIONS: &str = "timestamp BETWEEN $1 AND $2 \
     AND ($6::text IS NULL OR timestamp < $2 \
          OR seq < (SELECT seq FROM audit_log WHERE id = $6)) \
     AND ($3::text IS NULL OR actor = $3) \
     AND ($4::text IS NULL OR action = $4) \
     ORDER BY timestamp DESC, seq DESC LIMIT $5";

/// Two statements rather than one with `($7 IS NULL OR ...)`, which no index serves: one
/// tenant's entries walk `audit_log_by_tenant_time`, every tenant's walk `audit_log_by_time`.
fn list_sql(by_tenant: bool) -> String {
    if by_tenant {
        format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE tenant_id = $7 AND {AUDIT_CONDITIONS}")
    } else {
        format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE {AUDIT_CONDITIONS}")
    }
}

pub(super) async fn insert_entry<C: GenericClient>(client: &C, row: &AuditRow) -> StoreResult<()> {
    insert(
        client,
        "insert_audit",
        &format!(
            "INSERT INTO audit_log ({AUDIT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ),
        &params(&row.values()),
        ("audit entry", &row.id),
    )
    .await
}

/// The entries `filter` selects, newest first, in one query.
pub(super) async fn list<C: GenericClient>(
    client: &C,
    filter: &AuditFilter,
) -> StoreResult<Vec<AuditEntry>> {
    const OP: &str = "list_audit";
    let bounds = AuditBounds::of(filter);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &bounds.since,
        &bounds.until,
        &filter.actor,
        &filter.action,
        &bounds.limit,
        &bounds.after_id,
    ];
    if let Some(tenant) = &filter.tenant_id {
        params.push(tenant);
    }
    fetch_all(
        client,
        OP,
        &list_sql(filter.tenant_id.is_some()),
        &params,
        AuditRow::into_domain,
    )
    .await
}
