//! Tenants, their members and their policies on SQLite. Rows are read on the connection and
//! decoded after it is released; a tenant's deletion takes its members and policies with it in
//! one transaction.

use rusqlite::{Connection, OptionalExtension};
use svc_core::error::Resource;
use svc_core::tenant::{Member, Policy, Tenant};

use super::codec::{backend, conflict_or_backend, read};
use super::collect;
use crate::rows::{
    MemberRow, PolicyRow, TenantRow, MEMBER_COLUMNS, POLICY_COLUMNS, TENANT_COLUMNS,
};
use crate::StoreResult;

pub(super) fn create_tenant(conn: &Connection, tenant: &Tenant) -> StoreResult<()> {
    let row = TenantRow::from_domain(tenant);
    conn.prepare_cached(&format!(
        "INSERT INTO tenants ({TENANT_COLUMNS}) VALUES (?1, ?2, ?3)"
    ))
    .and_then(|mut stmt| stmt.execute(row.values()))
    .map_err(conflict_or_backend(
        "create_tenant",
        Resource::Tenant,
        row.id(),
    ))?;
    Ok(())
}

pub(super) fn get_tenant(conn: &Connection, id: &str) -> StoreResult<Option<TenantRow>> {
    conn.prepare_cached(&format!(
        "SELECT {TENANT_COLUMNS} FROM tenants WHERE id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([id], read::<TenantRow>).optional())
    .map_err(backend("get_tenant"))
}

pub(super) fn list_tenants(conn: &Connection) -> StoreResult<Vec<Tenant>> {
    const OP: &str = "list_tenants";
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {TENANT_COLUMNS} FROM tenants ORDER BY id"))
        .map_err(backend(OP))?;
    let rows = stmt.query_map([], read::<TenantRow>).map_err(backend(OP))?;
    collect(OP, rows, TenantRow::into_domain)
}

/// Deletes a tenant, its members and its policies in one transaction; false when the tenant
/// did not exist (stray members or policies under its ID are deleted all the same).
pub(super) fn delete_tenant(conn: &mut Connection, id: &str) -> StoreResult<bool> {
    const OP: &str = "delete_tenant";
    let tx = conn.transaction().map_err(backend(OP))?;
    for sql in [
        "DELETE FROM tenant_members WHERE tenant_id = ?1",
        "DELETE FROM tenant_policies WHERE tenant_id = ?1",
    ] {
        tx.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([id]))
            .map_err(backend(OP))?;
    }
    let deleted = tx
        .prepare_cached("DELETE FROM tenants WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([id]))
        .map_err(backend(OP))?;
    tx.commit().map_err(backend(OP))?;
    Ok(deleted > 0)
}

/// Inserts or replaces a membership, keeping its `created_at`.
pub(super) fn put_member(conn: &Connection, member: &Member) -> StoreResult<MemberRow> {
    conn.prepare_cached(&format!(
        "INSERT INTO tenant_members ({MEMBER_COLUMNS}) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (tenant_id, subject) DO UPDATE SET role = excluded.role \
         RETURNING {MEMBER_COLUMNS}"
    ))
    .and_then(|mut stmt| stmt.query_row(MemberRow::from_domain(member).values(), read::<MemberRow>))
    .map_err(backend("put_member"))
}

pub(super) fn list_members(conn: &Connection, tenant_id: &str) -> StoreResult<Vec<Member>> {
    const OP: &str = "list_members";
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {MEMBER_COLUMNS} FROM tenant_members WHERE tenant_id = ?1 ORDER BY subject"
        ))
        .map_err(backend(OP))?;
    let rows = stmt
        .query_map([tenant_id], read::<MemberRow>)
        .map_err(backend(OP))?;
    collect(OP, rows, MemberRow::into_domain)
}

pub(super) fn delete_member(
    conn: &Connection,
    tenant_id: &str,
    subject: &str,
) -> StoreResult<bool> {
    conn.prepare_cached("DELETE FROM tenant_members WHERE tenant_id = ?1 AND subject = ?2")
        .and_then(|mut stmt| stmt.execute([tenant_id, subject]))
        .map(|n| n > 0)
        .map_err(backend("delete_member"))
}

/// The role of one membership, as stored (decoded by [`decode_role`]).
pub(super) fn member_role(
    conn: &Connection,
    tenant_id: &str,
    subject: &str,
) -> StoreResult<Option<String>> {
    conn.prepare_cached("SELECT role FROM tenant_members WHERE tenant_id = ?1 AND subject = ?2")
        .and_then(|mut stmt| {
            stmt.query_row([tenant_id, subject], |row| row.get(0))
                .optional()
        })
        .map_err(backend("member_role"))
}

pub(super) fn create_policy(conn: &Connection, row: &PolicyRow) -> StoreResult<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO tenant_policies ({POLICY_COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    ))
    .and_then(|mut stmt| stmt.execute(row.values()))
    .map_err(conflict_or_backend(
        "create_policy",
        Resource::Policy,
        &row.id,
    ))?;
    Ok(())
}

pub(super) fn get_policy(
    conn: &Connection,
    tenant_id: &str,
    id: &str,
) -> StoreResult<Option<PolicyRow>> {
    conn.prepare_cached(&format!(
        "SELECT {POLICY_COLUMNS} FROM tenant_policies WHERE id = ?1 AND tenant_id = ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_row([id, tenant_id], read::<PolicyRow>)
            .optional()
    })
    .map_err(backend("get_policy"))
}

pub(super) fn list_policies(conn: &Connection, tenant_id: &str) -> StoreResult<Vec<Policy>> {
    const OP: &str = "list_policies";
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {POLICY_COLUMNS} FROM tenant_policies WHERE tenant_id = ?1 \
             ORDER BY priority DESC, id"
        ))
        .map_err(backend(OP))?;
    let rows = stmt
        .query_map([tenant_id], read::<PolicyRow>)
        .map_err(backend(OP))?;
    collect(OP, rows, PolicyRow::into_domain)
}

/// Replaces a policy matched by tenant and ID, keeping its `created_at`.
pub(super) fn update_policy(conn: &Connection, row: &PolicyRow) -> StoreResult<Option<PolicyRow>> {
    conn.prepare_cached(&format!(
        "UPDATE tenant_policies SET name = ?3, resource = ?4, pattern = ?5, effect = ?6, \
         priority = ?7, updated_at = ?9 WHERE id = ?1 AND tenant_id = ?2 \
         RETURNING {POLICY_COLUMNS}"
    ))
    .and_then(|mut stmt| stmt.query_row(row.values(), read::<PolicyRow>).optional())
    .map_err(backend("update_policy"))
}

pub(super) fn delete_policy(conn: &Connection, tenant_id: &str, id: &str) -> StoreResult<bool> {
    conn.prepare_cached("DELETE FROM tenant_policies WHERE id = ?1 AND tenant_id = ?2")
        .and_then(|mut stmt| stmt.execute([id, tenant_id]))
        .map(|n| n > 0)
        .map_err(backend("delete_policy"))
}
