//! `/diagnostics`, `/metrics` and `/metrics/scrape`, and their `/admin/...` aliases (interface
//! "System" and "Admin"; decisions §13): read-only, redacted.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use svc_control::observe::{Diagnostics, Metrics};
use svc_control::ControlPlane;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::version;
use crate::extract::Caller;
use crate::ApiError;

/// The Prometheus text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Redacted diagnostics: build, process, store, limits, scheduler, quotas, rate limit,
/// providers, workers, leases, sandboxes, events, operations.
#[utoipa::path(get, path = "/diagnostics", tag = "system",
    responses((status = 200, description = "Diagnostics", body = Diagnostics)))]
async fn diagnostics(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<Diagnostics>, ApiError> {
    Ok(Json(plane.diagnostics(&principal, version()).await?))
}

/// The same as `GET /diagnostics`, for admins.
#[utoipa::path(get, path = "/admin/diagnostics", tag = "admin",
    responses((status = 200, description = "Diagnostics", body = Diagnostics)))]
async fn admin_diagnostics(
    state: State<ControlPlane>,
    caller: Caller,
) -> Result<Json<Diagnostics>, ApiError> {
    diagnostics(state, caller).await
}

/// Structured metrics (JSON).
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Metrics", body = Metrics)))]
async fn metrics(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<Metrics>, ApiError> {
    Ok(Json(plane.metrics(&principal).await?))
}

/// The same as `GET /metrics`, for admins.
#[utoipa::path(get, path = "/admin/metrics", tag = "admin",
    responses((status = 200, description = "Metrics", body = Metrics)))]
async fn admin_metrics(
    state: State<ControlPlane>,
    caller: Caller,
) -> Result<Json<Metrics>, ApiError> {
    metrics(state, caller).await
}

/// Prometheus text exposition (format 0.0.4).
#[utoipa::path(get, path = "/metrics/scrape", tag = "system",
    responses((status = 200, description = "Metrics in the Prometheus text format", body = String,
        content_type = "text/plain; version=0.0.4")))]
async fn scrape(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<impl IntoResponse, ApiError> {
    let text = plane.scrape(&principal).await?;
    Ok(([(header::CONTENT_TYPE, TEXT_FORMAT)], text))
}

/// The same as `GET /metrics/scrape`, for admins.
#[utoipa::path(get, path = "/admin/metrics/scrape", tag = "admin",
    responses((status = 200, description = "Metrics in the Prometheus text format", body = String,
        content_type = "text/plain; version=0.0.4")))]
async fn admin_scrape(
    state: State<ControlPlane>,
    caller: Caller,
) -> Result<impl IntoResponse, ApiError> {
    scrape(state, caller).await
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(diagnostics))
        .routes(routes!(admin_diagnostics))
        .routes(routes!(metrics))
        .routes(routes!(admin_metrics))
        .routes(routes!(scrape))
        .routes(routes!(admin_scrape))
}
