//! The audit log on PostgreSQL: appended one row at a time, listed newest first in one query.

use deadpool_postgres::GenericClient;
use svc_core::audit::{AuditEntry, AuditFilter};
use svc_core::error::Resource;
use tokio_postgres::types::ToSql;

use super::codec::{fetch_all, insert, params};
use crate::rows::{audit_list_sql, AuditRow, AuditValue, AUDIT_COLUMNS};
use crate::StoreResult;

pub(super) async fn insert_entry<C: GenericClient>(client: &C, row: &AuditRow) -> StoreResult<()> {
    insert(
        client,
        "insert_audit",
        &format!(
            "INSERT INTO audit_log ({AUDIT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ),
        &params(&row.values()),
        (Resource::AuditEntry, &row.id),
    )
    .await
}

/// The entries `filter` selects, newest first, in one query ([`audit_list_sql`]: each
/// combination of filters is a statement of its own, so its generic plan seeks the index the
/// filters name).
pub(super) async fn list<C: GenericClient>(
    client: &C,
    filter: &AuditFilter,
) -> StoreResult<Vec<AuditEntry>> {
    const OP: &str = "list_audit";
    let (sql, values) = audit_list_sql(filter, '$');
    let values: Vec<&(dyn ToSql + Sync)> = values
        .iter()
        .map(|value| -> &(dyn ToSql + Sync) {
            match value {
                AuditValue::Text(text) => text,
                AuditValue::Int(int) => int,
            }
        })
        .collect();
    fetch_all(client, OP, &sql, &values, AuditRow::into_domain).await
}
