//! `/quotas`: owner quotas, their summary and usage, and the `/admin/quotas...` aliases, which
//! answer identically (interface "Owner quotas"; the aliases additionally need an admin).

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use svc_control::ControlPlane;
use svc_core::quota::{OwnerQuota, OwnerUsage, QuotaRequest, QuotaSummary};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{paged, PageQuery, StatusBody};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// Owner quotas, by owner ID, a page at a time (`limit`, then `cursor` from `X-Next-Cursor`).
#[utoipa::path(operation_id = "list_quotas", get, path = "/quotas", tag = "quotas", params(PageQuery),
    responses((status = 200, description = "Owner quotas", body = Vec<OwnerQuota>, headers(("X-Next-Cursor" = String, description = "The next page's cursor; absent on the last page"))),
        (status = 400, description = "Invalid limit or cursor", body = ErrorBody)))]
async fn list(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response, ApiError> {
    Ok(paged(plane.list_quotas(&principal, query.into()).await?))
}

/// How many quotas set which limits (no owner IDs).
#[utoipa::path(get, path = "/quotas/summary", tag = "quotas",
    responses((status = 200, description = "Quota summary", body = QuotaSummary)))]
async fn summary(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<QuotaSummary>, ApiError> {
    Ok(Json(plane.quota_summary(&principal).await?))
}

/// One owner's quota.
#[utoipa::path(operation_id = "get_quota", get, path = "/quotas/{ownerID}", tag = "quotas",
    params(("ownerID" = String, Path, description = "Owner ID")),
    responses((status = 200, description = "The quota", body = OwnerQuota),
        (status = 400, description = "Invalid owner ID", body = ErrorBody),
        (status = 404, description = "The owner has no quota", body = ErrorBody)))]
async fn get(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(owner): Path<String>,
) -> Result<Json<OwnerQuota>, ApiError> {
    Ok(Json(plane.get_quota(&principal, &owner).await?))
}

/// Saves an owner's quota; `0`, `0s` or an omitted field inherits the global limit.
#[utoipa::path(put, path = "/quotas/{ownerID}", tag = "quotas",
    params(("ownerID" = String, Path, description = "Owner ID")),
    request_body = QuotaRequest,
    responses((status = 200, description = "The saved quota", body = OwnerQuota),
        (status = 400, description = "Invalid owner ID or field", body = ErrorBody)))]
async fn put(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(owner): Path<String>,
    ApiJson(request): ApiJson<QuotaRequest>,
) -> Result<Json<OwnerQuota>, ApiError> {
    Ok(Json(plane.put_quota(&principal, &owner, request).await?))
}

/// Deletes an owner's quota; the global limits apply to it again.
#[utoipa::path(operation_id = "delete_quota", delete, path = "/quotas/{ownerID}", tag = "quotas",
    params(("ownerID" = String, Path, description = "Owner ID")),
    responses((status = 200, description = "`{\"status\": \"deleted\"}`", body = StatusBody),
        (status = 404, description = "The owner has no quota", body = ErrorBody)))]
async fn delete(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(owner): Path<String>,
) -> Result<Json<StatusBody>, ApiError> {
    plane.delete_quota(&principal, &owner).await?;
    Ok(Json(StatusBody { status: "deleted" }))
}

/// What an owner holds and the limits in force for it (with or without a quota).
#[utoipa::path(get, path = "/quotas/{ownerID}/usage", tag = "quotas",
    params(("ownerID" = String, Path, description = "Owner ID")),
    responses((status = 200, description = "Owner usage", body = OwnerUsage),
        (status = 400, description = "Invalid owner ID", body = ErrorBody)))]
async fn usage(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(owner): Path<String>,
) -> Result<Json<OwnerUsage>, ApiError> {
    Ok(Json(plane.quota_usage(&principal, &owner).await?))
}

/// Admin alias of `GET /quotas`.
#[utoipa::path(operation_id = "admin_list_quotas", get, path = "/admin/quotas", tag = "admin", params(PageQuery),
    responses((status = 200, description = "Owner quotas", body = Vec<OwnerQuota>, headers(("X-Next-Cursor" = String, description = "The next page's cursor; absent on the last page"))),
        (status = 400, description = "Invalid limit or cursor", body = ErrorBody)))]
async fn admin_list(
    state: State<ControlPlane>,
    caller: Caller,
    query: ApiQuery<PageQuery>,
) -> Result<Response, ApiError> {
    list(state, caller, query).await
}

/// Admin alias of `GET /quotas/summary`.
#[utoipa::path(get, path = "/admin/quotas/summary", tag = "admin",
    responses((status = 200, description = "Quota summary", body = QuotaSummary)))]
async fn admin_summary(
    state: State<ControlPlane>,
    caller: Caller,
) -> Result<Json<QuotaSummary>, ApiError> {
    summary(state, caller).await
}

/// Admin alias of `GET /quotas/{ownerID}`.
#[utoipa::path(get, path = "/admin/quotas/{ownerID}", tag = "admin",
    params(("ownerID" = String, Path, description = "Owner ID")),
    responses((status = 200, description = "The quota", body = OwnerQuota),
        (status = 400, description = "Invalid owner ID", body = ErrorBody),
        (status = 404, description = "The owner has no quota", body = ErrorBody)))]
async fn admin_get(
    state: State<ControlPlane>,
    caller: Caller,
    owner: Path<String>,
) -> Result<Json<OwnerQuota>, ApiError> {
    get(state, caller, owner).await
}

/// Admin alias of `PUT /quotas/{ownerID}`.
#[utoipa::path(put, path = "/admin/quotas/{ownerID}", tag = "admin",
    params(("ownerID" = String, Path, description = "Owner ID")),
    request_body = QuotaRequest,
    responses((status = 200, description = "The saved quota", body = OwnerQuota),
        (status = 400, description = "Invalid owner ID or field", body = ErrorBody)))]
async fn admin_put(
    state: State<ControlPlane>,
    caller: Caller,
    owner: Path<String>,
    request: ApiJson<QuotaRequest>,
) -> Result<Json<OwnerQuota>, ApiError> {
    put(state, caller, owner, request).await
}

/// Admin alias of `DELETE /quotas/{ownerID}`.
#[utoipa::path(operation_id = "admin_delete_quota", delete, path = "/admin/quotas/{ownerID}", tag = "admin",
    params(("ownerID" = String, Path, description = "Owner ID")),
    responses((status = 200, description = "`{\"status\": \"deleted\"}`", body = StatusBody),
        (status = 404, description = "The owner has no quota", body = ErrorBody)))]
async fn admin_delete(
    state: State<ControlPlane>,
    caller: Caller,
    owner: Path<String>,
) -> Result<Json<StatusBody>, ApiError> {
    delete(state, caller, owner).await
}

/// Admin alias of `GET /quotas/{ownerID}/usage`.
#[utoipa::path(get, path = "/admin/quotas/{ownerID}/usage", tag = "admin",
    params(("ownerID" = String, Path, description = "Owner ID")),
    responses((status = 200, description = "Owner usage", body = OwnerUsage),
        (status = 400, description = "Invalid owner ID", body = ErrorBody)))]
async fn admin_usage(
    state: State<ControlPlane>,
    caller: Caller,
    owner: Path<String>,
) -> Result<Json<OwnerUsage>, ApiError> {
    usage(state, caller, owner).await
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(summary))
        .routes(routes!(get, put, delete))
        .routes(routes!(usage))
        .routes(routes!(admin_list))
        .routes(routes!(admin_summary))
        .routes(routes!(admin_get, admin_put, admin_delete))
        .routes(routes!(admin_usage))
}
