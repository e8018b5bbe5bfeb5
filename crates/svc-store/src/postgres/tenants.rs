//! Tenants, their members and their policies on PostgreSQL. A tenant's deletion takes its
//! members and policies with it in one statement.

use deadpool_postgres::GenericClient;
use svc_core::error::Resource;
use svc_core::tenant::{Member, Policy, Tenant};

use super::codec::{backend, execute, fetch_all, fetch_one, fetch_opt, insert, params, query_opt};
use crate::rows::{
    MemberRow, PolicyRow, TenantRow, MEMBER_COLUMNS, POLICY_COLUMNS, TENANT_COLUMNS,
};
use crate::StoreResult;

pub(super) async fn create_tenant<C: GenericClient>(
    client: &C,
    tenant: &Tenant,
) -> StoreResult<()> {
    let row = TenantRow::from_domain(tenant);
    insert(
        client,
        "create_tenant",
        &format!("INSERT INTO tenants ({TENANT_COLUMNS}) VALUES ($1, $2, $3)"),
        &params(&row.values()),
        (Resource::Tenant, row.id()),
    )
    .await
}

pub(super) async fn get_tenant<C: GenericClient>(
    client: &C,
    id: &str,
) -> StoreResult<Option<TenantRow>> {
    fetch_opt(
        client,
        "get_tenant",
        &format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE id = $1"),
        &[&id],
    )
    .await
}

pub(super) async fn list_tenants<C: GenericClient>(client: &C) -> StoreResult<Vec<Tenant>> {
    fetch_all(
        client,
        "list_tenants",
        &format!("SELECT {TENANT_COLUMNS} FROM tenants ORDER BY id"),
        &[],
        TenantRow::into_domain,
    )
    .await
}

/// Deletes a tenant, its members and its policies in one statement; false when the tenant did
/// not exist (stray members or policies under its ID are deleted all the same).
pub(super) async fn delete_tenant<C: GenericClient>(client: &C, id: &str) -> StoreResult<bool> {
    execute(
        client,
        "delete_tenant",
        "WITH members AS (DELETE FROM tenant_members WHERE tenant_id = $1), \
         policies AS (DELETE FROM tenant_policies WHERE tenant_id = $1) \
         DELETE FROM tenants WHERE id = $1",
        &[&id],
    )
    .await
    .map(|n| n > 0)
}

/// Inserts or replaces a membership, keeping its `created_at`.
pub(super) async fn put_member<C: GenericClient>(
    client: &C,
    member: &Member,
) -> StoreResult<MemberRow> {
    fetch_one(
        client,
        "put_member",
        &format!(
            "INSERT INTO tenant_members ({MEMBER_COLUMNS}) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant_id, subject) DO UPDATE SET role = EXCLUDED.role \
             RETURNING {MEMBER_COLUMNS}"
        ),
        &params(&MemberRow::from_domain(member).values()),
    )
    .await
}

pub(super) async fn list_members<C: GenericClient>(
    client: &C,
    tenant_id: &str,
) -> StoreResult<Vec<Member>> {
    fetch_all(
        client,
        "list_members",
        &format!(
            "SELECT {MEMBER_COLUMNS} FROM tenant_members WHERE tenant_id = $1 ORDER BY subject"
        ),
        &[&tenant_id],
        MemberRow::into_domain,
    )
    .await
}

pub(super) async fn delete_member<C: GenericClient>(
    client: &C,
    tenant_id: &str,
    subject: &str,
) -> StoreResult<bool> {
    execute(
        client,
        "delete_member",
        "DELETE FROM tenant_members WHERE tenant_id = $1 AND subject = $2",
        &[&tenant_id, &subject],
    )
    .await
    .map(|n| n > 0)
}

/// The role of one membership, as stored (decoded by [`crate::rows::decode_role`]).
pub(super) async fn member_role<C: GenericClient>(
    client: &C,
    tenant_id: &str,
    subject: &str,
) -> StoreResult<Option<String>> {
    const OP: &str = "member_role";
    query_opt(
        client,
        OP,
        "SELECT role FROM tenant_members WHERE tenant_id = $1 AND subject = $2",
        &[&tenant_id, &subject],
    )
    .await?
    .map(|row| row.try_get(0).map_err(backend(OP)))
    .transpose()
}

pub(super) async fn create_policy<C: GenericClient>(
    client: &C,
    row: &PolicyRow,
) -> StoreResult<()> {
    insert(
        client,
        "create_policy",
        &format!(
            "INSERT INTO tenant_policies ({POLICY_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ),
        &params(&row.values()),
        (Resource::Policy, &row.id),
    )
    .await
}

pub(super) async fn get_policy<C: GenericClient>(
    client: &C,
    tenant_id: &str,
    id: &str,
) -> StoreResult<Option<PolicyRow>> {
    fetch_opt(
        client,
        "get_policy",
        &format!("SELECT {POLICY_COLUMNS} FROM tenant_policies WHERE id = $1 AND tenant_id = $2"),
        &[&id, &tenant_id],
    )
    .await
}

pub(super) async fn list_policies<C: GenericClient>(
    client: &C,
    tenant_id: &str,
) -> StoreResult<Vec<Policy>> {
    fetch_all(
        client,
        "list_policies",
        &format!(
            "SELECT {POLICY_COLUMNS} FROM tenant_policies WHERE tenant_id = $1 \
             ORDER BY priority DESC, id"
        ),
        &[&tenant_id],
        PolicyRow::into_domain,
    )
    .await
}

/// Replaces a policy matched by tenant and ID, keeping its `created_at`.
pub(super) async fn update_policy<C: GenericClient>(
    client: &C,
    row: &PolicyRow,
) -> StoreResult<Option<PolicyRow>> {
    let values = row.values();
    let mut bound = params(&values);
    // `created_at` is kept, so not bound: PostgreSQL refuses a parameter no statement uses.
    bound.remove(7);
    fetch_opt(
        client,
        "update_policy",
        &format!(
            "UPDATE tenant_policies SET name = $3, resource = $4, pattern = $5, effect = $6, \
             priority = $7, updated_at = $8 WHERE id = $1 AND tenant_id = $2 \
             RETURNING {POLICY_COLUMNS}"
        ),
        &bound,
    )
    .await
}

pub(super) async fn delete_policy<C: GenericClient>(
    client: &C,
    tenant_id: &str,
    id: &str,
) -> StoreResult<bool> {
    execute(
        client,
        "delete_policy",
        "DELETE FROM tenant_policies WHERE id = $1 AND tenant_id = $2",
        &[&id, &tenant_id],
    )
    .await
    .map(|n| n > 0)
}
