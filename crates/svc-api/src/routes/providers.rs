//! `/providers`, `/snapshots` and `/pool/status`.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::Json;
use svc_control::SnapshotInfo;
use svc_control::{ControlPlane, PoolStatus, ProviderDetail, ProviderSummary};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::extract::Caller;
use crate::{ApiError, ErrorBody};

/// Every provider's summary.
#[utoipa::path(operation_id = "list_providers", get, path = "/providers", tag = "providers",
    responses((status = 200, description = "Provider summaries", body = Vec<ProviderSummary>)))]
async fn list(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<Vec<ProviderSummary>>, ApiError> {
    Ok(Json(plane.list_providers(&principal).await?))
}

/// One provider in detail.
#[utoipa::path(get, path = "/providers/{name}", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, description = "Provider detail", body = ProviderDetail),
        (status = 404, description = "Unknown provider", body = ErrorBody)))]
async fn detail(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(name): Path<String>,
) -> Result<Json<ProviderDetail>, ApiError> {
    Ok(Json(plane.provider_detail(&principal, &name).await?))
}

/// Runs every provider's health check now.
#[utoipa::path(post, path = "/providers/test", tag = "providers",
    responses((status = 200, description = "Provider name to healthy", body = BTreeMap<String, bool>)))]
async fn test(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<BTreeMap<String, bool>>, ApiError> {
    Ok(Json(plane.test_providers(&principal).await?))
}

/// Every provider's summary (admin alias of `GET /providers`).
#[utoipa::path(operation_id = "admin_list_providers", get, path = "/admin/providers", tag = "admin",
    responses((status = 200, description = "Provider summaries", body = Vec<ProviderSummary>),
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody)))]
async fn admin_list(
    state: State<ControlPlane>,
    caller: Caller,
) -> Result<Json<Vec<ProviderSummary>>, ApiError> {
    list(state, caller).await
}

/// One provider in detail (admin alias of `GET /providers/{name}`).
#[utoipa::path(get, path = "/admin/providers/{name}", tag = "admin",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, description = "Provider detail", body = ProviderDetail),
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 404, description = "Unknown provider", body = ErrorBody)))]
async fn admin_detail(
    state: State<ControlPlane>,
    caller: Caller,
    name: Path<String>,
) -> Result<Json<ProviderDetail>, ApiError> {
    detail(state, caller, name).await
}

/// Runs every provider's health check now (admin alias of `POST /providers/test`).
#[utoipa::path(post, path = "/admin/providers/test", tag = "admin",
    responses((status = 200, description = "Provider name to healthy", body = BTreeMap<String, bool>),
        (status = 401, description = "No valid API key", body = ErrorBody),
        (status = 403, description = "Not an admin", body = ErrorBody)))]
async fn admin_test(
    state: State<ControlPlane>,
    caller: Caller,
) -> Result<Json<BTreeMap<String, bool>>, ApiError> {
    test(state, caller).await
}

/// Cached root filesystems of providers that keep them.
#[utoipa::path(get, path = "/snapshots", tag = "providers",
    responses((status = 200, description = "Snapshots", body = Vec<SnapshotInfo>)))]
async fn snapshots(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<Vec<SnapshotInfo>>, ApiError> {
    Ok(Json(plane.snapshots(&principal).await?))
}

/// Pooled multi-user mode.
#[utoipa::path(get, path = "/pool/status", tag = "providers",
    responses((status = 200, description = "Pool status", body = PoolStatus)))]
async fn pool_status(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<PoolStatus>, ApiError> {
    Ok(Json(plane.pool_status(&principal)?))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(test))
        .routes(routes!(detail))
        .routes(routes!(snapshots))
        .routes(routes!(pool_status))
        .routes(routes!(admin_list))
        .routes(routes!(admin_test))
        .routes(routes!(admin_detail))
}
