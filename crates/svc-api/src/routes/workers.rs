//! `/workers`: the worker registry, and its admin repair routes.

use axum::extract::{Path, State};
use axum::Json;
use svc_control::ControlPlane;
use svc_core::worker::{Worker, WorkerHeartbeat};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::StatusBody;
use crate::extract::{ApiJson, Caller};
use crate::{ApiError, ErrorBody};

/// Every registered worker, by ID, with `stale` computed now.
#[utoipa::path(get, path = "/workers", tag = "workers",
    responses((status = 200, description = "Workers", body = Vec<Worker>)))]
async fn list(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<Vec<Worker>>, ApiError> {
    Ok(Json(plane.list_workers(&principal).await?))
}

/// One worker.
#[utoipa::path(get, path = "/workers/{workerID}", tag = "workers",
    params(("workerID" = String, Path, description = "Worker ID")),
    responses((status = 200, description = "The worker", body = Worker),
        (status = 404, description = "No such worker", body = ErrorBody)))]
async fn get(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<Worker>, ApiError> {
    Ok(Json(plane.get_worker(&principal, &id).await?))
}

/// Upserts a worker's record as if it had sent this heartbeat (registry repair).
#[utoipa::path(post, path = "/admin/workers/{workerID}/heartbeat", tag = "admin",
    params(("workerID" = String, Path, description = "Worker ID")),
    request_body = WorkerHeartbeat,
    responses((status = 200, description = "The worker", body = Worker),
        (status = 400, description = "Invalid worker ID or body", body = ErrorBody)))]
async fn admin_heartbeat(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiJson(heartbeat): ApiJson<WorkerHeartbeat>,
) -> Result<Json<Worker>, ApiError> {
    Ok(Json(
        plane.admin_heartbeat(&principal, &id, heartbeat).await?,
    ))
}

/// Removes a worker from the registry.
#[utoipa::path(delete, path = "/admin/workers/{workerID}", tag = "admin",
    params(("workerID" = String, Path, description = "Worker ID")),
    responses((status = 200, description = "`{\"status\": \"deleted\"}`", body = StatusBody),
        (status = 404, description = "No such worker", body = ErrorBody)))]
async fn admin_delete(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<StatusBody>, ApiError> {
    plane.delete_worker(&principal, &id).await?;
    Ok(Json(StatusBody { status: "deleted" }))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(get))
        .routes(routes!(admin_heartbeat))
        .routes(routes!(admin_delete))
}
