//! Tenants, their members and their policies on SQLite. Rows are read on the connection and
//! decoded after it is released; a tenant's deletion takes its members and policies with it in
//! one transaction.

use rusqlite::{params, Connection, OptionalExtension, Row};
use svc_core::access::Role;
use svc_core::tenant::{Member, Policy, PolicyEffect, PolicyResource, Tenant};

use super::codec::{backend, conflict_or_backend, micros, timestamp};
use super::collect;
use crate::{StoreError, StoreResult};

const TENANT_COLUMNS: &str = "id, name, created_at";

const MEMBER_COLUMNS: &str = "tenant_id, subject, role, created_at";

const POLICY_COLUMNS: &str =
    "id, tenant_id, name, resource, pattern, effect, priority, created_at, updated_at";

fn corrupt(entity: &'static str, key: &str, message: String) -> StoreError {
    StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message,
    }
}

/// A role from its wire name.
fn parse_role(text: &str) -> Option<Role> {
    Role::ALL.into_iter().find(|role| role.as_str() == text)
}

/// A tenant row as read; decoded after the connection is released.
pub(super) struct TenantRow {
    id: String,
    name: String,
    created_at: i64,
}

impl TenantRow {
    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(TenantRow {
            id: row.get(0)?,
            name: row.get(1)?,
            created_at: row.get(2)?,
        })
    }

    pub(super) fn into_domain(self) -> StoreResult<Tenant> {
        Ok(Tenant {
            created_at: timestamp("tenant", &self.id, self.created_at)?,
            name: self.name,
            id: self.id,
        })
    }
}

/// A member row as read.
pub(super) struct MemberRow {
    tenant_id: String,
    subject: String,
    role: String,
    created_at: i64,
}

impl MemberRow {
    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(MemberRow {
            tenant_id: row.get(0)?,
            subject: row.get(1)?,
            role: row.get(2)?,
            created_at: row.get(3)?,
        })
    }

    pub(super) fn into_domain(self) -> StoreResult<Member> {
        let key = format!("{}/{}", self.tenant_id, self.subject);
        Ok(Member {
            role: parse_role(&self.role)
                .ok_or_else(|| corrupt("member", &key, format!("unknown role {:?}", self.role)))?,
            created_at: timestamp("member", &key, self.created_at)?,
            tenant_id: self.tenant_id,
            subject: self.subject,
        })
    }
}

/// A policy row as stored.
pub(super) struct PolicyRow {
    id: String,
    tenant_id: String,
    name: String,
    resource: String,
    pattern: String,
    effect: String,
    priority: i64,
    created_at: i64,
    updated_at: i64,
}

impl PolicyRow {
    pub(super) fn from_domain(policy: &Policy) -> Self {
        PolicyRow {
            id: policy.id.clone(),
            tenant_id: policy.tenant_id.clone(),
            name: policy.name.clone(),
            resource: policy.resource.as_str().to_owned(),
            pattern: policy.pattern.clone(),
            effect: policy.effect.as_str().to_owned(),
            priority: policy.priority,
            created_at: micros(policy.created_at),
            updated_at: micros(policy.updated_at),
        }
    }

    /// Bound in [`POLICY_COLUMNS`] order.
    fn params(&self) -> [&dyn rusqlite::ToSql; 9] {
        [
            &self.id,
            &self.tenant_id,
            &self.name,
            &self.resource,
            &self.pattern,
            &self.effect,
            &self.priority,
            &self.created_at,
            &self.updated_at,
        ]
    }

    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(PolicyRow {
            id: row.get(0)?,
            tenant_id: row.get(1)?,
            name: row.get(2)?,
            resource: row.get(3)?,
            pattern: row.get(4)?,
            effect: row.get(5)?,
            priority: row.get(6)?,
            created_at: row.get(7)?,
            updated_at: row.get(8)?,
        })
    }

    pub(super) fn into_domain(self) -> StoreResult<Policy> {
        const E: &str = "policy";
        Ok(Policy {
            resource: PolicyResource::parse(&self.resource).ok_or_else(|| {
                corrupt(E, &self.id, format!("unknown resource {:?}", self.resource))
            })?,
            effect: PolicyEffect::parse(&self.effect)
                .ok_or_else(|| corrupt(E, &self.id, format!("unknown effect {:?}", self.effect)))?,
            created_at: timestamp(E, &self.id, self.created_at)?,
            updated_at: timestamp(E, &self.id, self.updated_at)?,
            tenant_id: self.tenant_id,
            name: self.name,
            pattern: self.pattern,
            priority: self.priority,
            id: self.id,
        })
    }
}

pub(super) fn create_tenant(conn: &Connection, tenant: &Tenant) -> StoreResult<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO tenants ({TENANT_COLUMNS}) VALUES (?1, ?2, ?3)"
    ))
    .and_then(|mut stmt| stmt.execute(params![tenant.id, tenant.name, micros(tenant.created_at)]))
    .map_err(conflict_or_backend("create_tenant", "tenant", &tenant.id))?;
    Ok(())
}

pub(super) fn get_tenant(conn: &Connection, id: &str) -> StoreResult<Option<TenantRow>> {
    conn.prepare_cached(&format!(
        "SELECT {TENANT_COLUMNS} FROM tenants WHERE id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([id], TenantRow::read).optional())
    .map_err(backend("get_tenant"))
}

pub(super) fn list_tenants(conn: &Connection) -> StoreResult<Vec<Tenant>> {
    const OP: &str = "list_tenants";
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {TENANT_COLUMNS} FROM tenants ORDER BY id"))
        .map_err(backend(OP))?;
    let rows = stmt.query_map([], TenantRow::read).map_err(backend(OP))?;
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
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                member.tenant_id,
                member.subject,
                member.role.as_str(),
                micros(member.created_at)
            ],
            MemberRow::read,
        )
    })
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
        .query_map([tenant_id], MemberRow::read)
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

pub(super) fn decode_role(tenant_id: &str, subject: &str, role: &str) -> StoreResult<Role> {
    parse_role(role).ok_or_else(|| {
        corrupt(
            "member",
            &format!("{tenant_id}/{subject}"),
            format!("unknown role {role:?}"),
        )
    })
}

pub(super) fn create_policy(conn: &Connection, row: &PolicyRow) -> StoreResult<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO tenant_policies ({POLICY_COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    ))
    .and_then(|mut stmt| stmt.execute(row.params()))
    .map_err(conflict_or_backend("create_policy", "policy", &row.id))?;
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
    .and_then(|mut stmt| stmt.query_row([id, tenant_id], PolicyRow::read).optional())
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
        .query_map([tenant_id], PolicyRow::read)
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
    .and_then(|mut stmt| stmt.query_row(row.params(), PolicyRow::read).optional())
    .map_err(backend("update_policy"))
}

pub(super) fn delete_policy(conn: &Connection, tenant_id: &str, id: &str) -> StoreResult<bool> {
    conn.prepare_cached("DELETE FROM tenant_policies WHERE id = ?1 AND tenant_id = ?2")
        .and_then(|mut stmt| stmt.execute([id, tenant_id]))
        .map(|n| n > 0)
        .map_err(backend("delete_policy"))
}
