//! `/admin/tenants`: tenants, their members and policies, and the audit log (decisions §6).
//! A `tenant_admin` reaches its own tenant's members, policies and audit; everything else here
//! needs an admin.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use svc_control::audit::{audit_csv, AuditQuery};
use svc_control::tenancy::{MemberRequest, PolicyRequest, TenantRequest};
use svc_control::{ControlPlane, Page};
use svc_core::audit::AuditEntry;
use svc_core::tenant::{Member, Policy, Tenant};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{paged, with_next_cursor, StatusBody};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// Every tenant (a bare array; `default` always among them).
#[utoipa::path(operation_id = "admin_list_tenants", get, path = "/admin/tenants", tag = "tenants",
    responses((status = 200, description = "Tenants", body = Vec<Tenant>)))]
async fn list(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<Vec<Tenant>>, ApiError> {
    Ok(Json(plane.list_tenants(&principal).await?))
}

/// Creates a tenant.
#[utoipa::path(operation_id = "admin_create_tenant", post, path = "/admin/tenants", tag = "tenants", request_body = TenantRequest,
    responses((status = 201, description = "Created", body = Tenant),
        (status = 400, description = "Invalid ID or name", body = ErrorBody),
        (status = 409, description = "The ID is taken", body = ErrorBody)))]
async fn create(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiJson(request): ApiJson<TenantRequest>,
) -> Result<(StatusCode, Json<Tenant>), ApiError> {
    let tenant = plane.create_tenant(&principal, request).await?;
    Ok((StatusCode::CREATED, Json(tenant)))
}

/// One tenant.
#[utoipa::path(operation_id = "admin_get_tenant", get, path = "/admin/tenants/{tenantID}", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID")),
    responses((status = 200, description = "The tenant", body = Tenant),
        (status = 404, description = "No such tenant", body = ErrorBody)))]
async fn get(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(tenant): Path<String>,
) -> Result<Json<Tenant>, ApiError> {
    Ok(Json(plane.get_tenant(&principal, &tenant).await?))
}

/// Deletes a tenant with its members and policies (`default` cannot be deleted).
#[utoipa::path(operation_id = "admin_delete_tenant", delete, path = "/admin/tenants/{tenantID}", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID")),
    responses((status = 200, description = "`{\"status\": \"deleted\"}`", body = StatusBody),
        (status = 400, description = "The default tenant", body = ErrorBody),
        (status = 404, description = "No such tenant", body = ErrorBody)))]
async fn delete(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(tenant): Path<String>,
) -> Result<Json<StatusBody>, ApiError> {
    plane.delete_tenant(&principal, &tenant).await?;
    Ok(Json(StatusBody { status: "deleted" }))
}

/// A tenant's members.
#[utoipa::path(get, path = "/admin/tenants/{tenantID}/members", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID")),
    responses((status = 200, description = "Members", body = Vec<Member>),
        (status = 404, description = "No such tenant", body = ErrorBody)))]
async fn list_members(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(tenant): Path<String>,
) -> Result<Json<Vec<Member>>, ApiError> {
    Ok(Json(plane.list_members(&principal, &tenant).await?))
}

/// Grants an OIDC subject a role inside the tenant (in addition to its groups' roles).
#[utoipa::path(put, path = "/admin/tenants/{tenantID}/members/{subject}", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID"),
        ("subject" = String, Path, description = "OIDC subject (`sub`)")),
    request_body = MemberRequest,
    responses((status = 200, description = "The membership", body = Member),
        (status = 400, description = "Invalid role or subject", body = ErrorBody),
        (status = 404, description = "No such tenant", body = ErrorBody)))]
async fn put_member(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((tenant, subject)): Path<(String, String)>,
    ApiJson(request): ApiJson<MemberRequest>,
) -> Result<Json<Member>, ApiError> {
    Ok(Json(
        plane
            .put_member(&principal, &tenant, &subject, request)
            .await?,
    ))
}

/// Removes a membership.
#[utoipa::path(delete, path = "/admin/tenants/{tenantID}/members/{subject}", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID"),
        ("subject" = String, Path, description = "OIDC subject (`sub`)")),
    responses((status = 200, description = "`{\"status\": \"deleted\"}`", body = StatusBody),
        (status = 404, description = "No such tenant or member", body = ErrorBody)))]
async fn delete_member(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((tenant, subject)): Path<(String, String)>,
) -> Result<Json<StatusBody>, ApiError> {
    plane.delete_member(&principal, &tenant, &subject).await?;
    Ok(Json(StatusBody { status: "deleted" }))
}

/// A tenant's policies, highest priority first.
#[utoipa::path(get, path = "/admin/tenants/{tenantID}/policies", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID")),
    responses((status = 200, description = "Policies", body = Vec<Policy>),
        (status = 404, description = "No such tenant", body = ErrorBody)))]
async fn list_policies(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(tenant): Path<String>,
) -> Result<Json<Vec<Policy>>, ApiError> {
    Ok(Json(plane.list_policies(&principal, &tenant).await?))
}

/// Creates a policy.
#[utoipa::path(post, path = "/admin/tenants/{tenantID}/policies", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID")),
    request_body = PolicyRequest,
    responses((status = 201, description = "Created", body = Policy),
        (status = 400, description = "Invalid field", body = ErrorBody),
        (status = 404, description = "No such tenant", body = ErrorBody)))]
async fn create_policy(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(tenant): Path<String>,
    ApiJson(request): ApiJson<PolicyRequest>,
) -> Result<(StatusCode, Json<Policy>), ApiError> {
    let policy = plane.create_policy(&principal, &tenant, request).await?;
    Ok((StatusCode::CREATED, Json(policy)))
}

/// One policy.
#[utoipa::path(get, path = "/admin/tenants/{tenantID}/policies/{policyID}", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID"),
        ("policyID" = String, Path, description = "Policy ID")),
    responses((status = 200, description = "The policy", body = Policy),
        (status = 404, description = "No such tenant or policy", body = ErrorBody)))]
async fn get_policy(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((tenant, policy)): Path<(String, String)>,
) -> Result<Json<Policy>, ApiError> {
    Ok(Json(plane.get_policy(&principal, &tenant, &policy).await?))
}

/// Replaces a policy's fields.
#[utoipa::path(put, path = "/admin/tenants/{tenantID}/policies/{policyID}", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID"),
        ("policyID" = String, Path, description = "Policy ID")),
    request_body = PolicyRequest,
    responses((status = 200, description = "The policy", body = Policy),
        (status = 400, description = "Invalid field", body = ErrorBody),
        (status = 404, description = "No such tenant or policy", body = ErrorBody)))]
async fn update_policy(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((tenant, policy)): Path<(String, String)>,
    ApiJson(request): ApiJson<PolicyRequest>,
) -> Result<Json<Policy>, ApiError> {
    Ok(Json(
        plane
            .update_policy(&principal, &tenant, &policy, request)
            .await?,
    ))
}

/// Deletes a policy.
#[utoipa::path(delete, path = "/admin/tenants/{tenantID}/policies/{policyID}", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID"),
        ("policyID" = String, Path, description = "Policy ID")),
    responses((status = 200, description = "`{\"status\": \"deleted\"}`", body = StatusBody),
        (status = 404, description = "No such tenant or policy", body = ErrorBody)))]
async fn delete_policy(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((tenant, policy)): Path<(String, String)>,
) -> Result<Json<StatusBody>, ApiError> {
    plane.delete_policy(&principal, &tenant, &policy).await?;
    Ok(Json(StatusBody { status: "deleted" }))
}

fn audit_response(page: Page<AuditEntry>, csv: bool) -> Result<Response, ApiError> {
    if csv {
        let body = audit_csv(&page.items)?;
        let response = ([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], body).into_response();
        return Ok(with_next_cursor(response, page.next_cursor));
    }
    Ok(paged(page))
}

/// The audit log, newest first, a page at a time (`limit`, then `cursor` from
/// `X-Next-Cursor`); `format=csv` answers `text/csv` with a header row.
#[utoipa::path(get, path = "/admin/audit", tag = "tenants", params(AuditQuery),
    responses((status = 200, description = "Audit entries (JSON array, or CSV)", body = Vec<AuditEntry>,
            headers(("X-Next-Cursor" = String, description = "The next page's cursor; absent on the last page"))),
        (status = 400, description = "Invalid filter", body = ErrorBody)))]
async fn audit(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Response, ApiError> {
    let csv = query.wants_csv()?;
    audit_response(plane.list_audit(&principal, &query).await?, csv)
}

/// One tenant's audit log (the same filters; `tenant_id` is the path's).
#[utoipa::path(get, path = "/admin/tenants/{tenantID}/audit", tag = "tenants",
    params(("tenantID" = String, Path, description = "Tenant ID"), AuditQuery),
    responses((status = 200, description = "Audit entries (JSON array, or CSV)", body = Vec<AuditEntry>,
            headers(("X-Next-Cursor" = String, description = "The next page's cursor; absent on the last page"))),
        (status = 400, description = "Invalid filter", body = ErrorBody)))]
async fn tenant_audit(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(tenant): Path<String>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Response, ApiError> {
    let csv = query.wants_csv()?;
    audit_response(
        plane.list_tenant_audit(&principal, &tenant, &query).await?,
        csv,
    )
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get, delete))
        .routes(routes!(list_members))
        .routes(routes!(put_member, delete_member))
        .routes(routes!(list_policies, create_policy))
        .routes(routes!(get_policy, update_policy, delete_policy))
        .routes(routes!(audit))
        .routes(routes!(tenant_audit))
}
