//! `/providers`, `/snapshots` and `/pool/status`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;
use svc_control::SnapshotInfo;
use svc_control::{ControlPlane, ProviderDetail, ProviderSummary};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{ApiError, ErrorBody};

/// How old a cached health result may be when listing providers.
const LIST_HEALTH_MAX_AGE: Duration = Duration::from_secs(5);

/// Pool status (`{"enabled": false}` until pool mode is configured).
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct PoolStatus {
    /// Whether pooled multi-user mode is on.
    enabled: bool,
}

/// Every provider's summary.
#[utoipa::path(get, path = "/providers", tag = "providers",
    responses((status = 200, description = "Provider summaries", body = Vec<ProviderSummary>)))]
async fn list(State(plane): State<ControlPlane>) -> Json<Vec<ProviderSummary>> {
    Json(plane.providers().summaries(LIST_HEALTH_MAX_AGE, true).await)
}

/// One provider in detail.
#[utoipa::path(get, path = "/providers/{name}", tag = "providers",
    params(("name" = String, Path, description = "Provider name")),
    responses((status = 200, description = "Provider detail", body = ProviderDetail),
        (status = 404, description = "Unknown provider", body = ErrorBody)))]
async fn detail(
    State(plane): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<Json<ProviderDetail>, ApiError> {
    Ok(Json(plane.provider_detail(&name).await?))
}

/// Runs every provider's health check now.
#[utoipa::path(post, path = "/providers/test", tag = "providers",
    responses((status = 200, description = "Provider name to healthy", body = BTreeMap<String, bool>)))]
async fn test(State(plane): State<ControlPlane>) -> Json<BTreeMap<String, bool>> {
    Json(plane.test_providers().await)
}

/// Cached root filesystems of providers that keep them.
#[utoipa::path(get, path = "/snapshots", tag = "providers",
    responses((status = 200, description = "Snapshots", body = Vec<SnapshotInfo>)))]
async fn snapshots(State(plane): State<ControlPlane>) -> Result<Json<Vec<SnapshotInfo>>, ApiError> {
    Ok(Json(plane.snapshots().await?))
}

/// Pooled multi-user mode.
#[utoipa::path(get, path = "/pool/status", tag = "providers",
    responses((status = 200, description = "Pool status", body = PoolStatus)))]
async fn pool_status(State(plane): State<ControlPlane>) -> Json<PoolStatus> {
    Json(PoolStatus {
        enabled: plane.config().pool.enabled,
    })
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(test))
        .routes(routes!(detail))
        .routes(routes!(snapshots))
        .routes(routes!(pool_status))
}
