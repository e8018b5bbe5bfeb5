//! `/workers`: the worker registry, and its admin repair routes.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use svc_control::identity::{WorkerToken, WorkerTokenRequest};
use svc_control::workers::{LeaseBody, RenewRequest, WorkerCredentials};
use svc_control::ControlPlane;
use svc_core::worker::{Worker, WorkerHeartbeat};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{paged, PageQuery, StatusBody};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// Registered workers, by ID, with `stale` computed now, a page at a time (`limit`, then
/// `cursor` from `X-Next-Cursor`).
#[utoipa::path(operation_id = "list_workers", get, path = "/workers", tag = "workers", params(PageQuery),
    responses((status = 200, description = "Workers", body = Vec<Worker>, headers(("X-Next-Cursor" = String, description = "The next page's cursor; absent on the last page"))),
        (status = 400, description = "Invalid limit or cursor", body = ErrorBody)))]
async fn list(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response, ApiError> {
    Ok(paged(plane.list_workers(&principal, query.into()).await?))
}

/// One worker.
#[utoipa::path(operation_id = "get_worker", get, path = "/workers/{workerID}", tag = "workers",
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

/// Drains a worker: it takes no new sandboxes and keeps serving its own (its heartbeats do not
/// undo it).
#[utoipa::path(post, path = "/admin/workers/{workerID}/drain", tag = "admin",
    params(("workerID" = String, Path, description = "Worker ID")),
    responses((status = 200, description = "The worker, `draining`", body = Worker),
        (status = 404, description = "No such worker", body = ErrorBody)))]
async fn drain(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<Worker>, ApiError> {
    Ok(Json(plane.set_draining(&principal, &id, true).await?))
}

/// Undrains a worker: it is `online` and takes new sandboxes again.
#[utoipa::path(post, path = "/admin/workers/{workerID}/undrain", tag = "admin",
    params(("workerID" = String, Path, description = "Worker ID")),
    responses((status = 200, description = "The worker, `online`", body = Worker),
        (status = 404, description = "No such worker", body = ErrorBody)))]
async fn undrain(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<Worker>, ApiError> {
    Ok(Json(plane.set_draining(&principal, &id, false).await?))
}

/// Removes a worker from the registry.
#[utoipa::path(operation_id = "admin_delete_worker", delete, path = "/admin/workers/{workerID}", tag = "admin",
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

fn worker_credentials(headers: &HeaderMap) -> WorkerCredentials<'_> {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or(""));
    WorkerCredentials {
        worker_id: text("x-worker-id"),
        token: text("x-worker-token"),
    }
}

/// A worker's heartbeat, authenticated as that worker (`X-Worker-ID`, `X-Worker-Token`).
#[utoipa::path(post, path = "/worker/{workerID}/heartbeat", tag = "workers",
    params(("workerID" = String, Path, description = "Worker ID"),
        ("X-Worker-ID" = String, Header, description = "Must equal workerID"),
        ("X-Worker-Token" = String, Header, description = "Signed, static or shared worker token")),
    request_body = WorkerHeartbeat,
    responses((status = 200, description = "The updated worker", body = Worker),
        (status = 400, description = "Invalid worker ID or body", body = ErrorBody),
        (status = 401, description = "Missing or invalid worker credentials", body = ErrorBody)))]
async fn heartbeat(
    State(plane): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(heartbeat): ApiJson<WorkerHeartbeat>,
) -> Result<Json<Worker>, ApiError> {
    Ok(Json(
        plane
            .worker_heartbeat(&id, worker_credentials(&headers), heartbeat)
            .await?,
    ))
}

/// Renews a lease the worker holds; the answer carries the generation for fencing.
#[utoipa::path(post, path = "/worker/{workerID}/leases/{resourceID}/renew", tag = "workers",
    params(("workerID" = String, Path, description = "Worker ID"),
        ("resourceID" = String, Path, description = "Leased resource (a sandbox ID)"),
        ("X-Worker-ID" = String, Header, description = "Must equal workerID"),
        ("X-Worker-Token" = String, Header, description = "Signed, static or shared worker token")),
    request_body = RenewRequest,
    responses((status = 200, description = "`{lease}`", body = LeaseBody),
        (status = 401, description = "Missing or invalid worker credentials", body = ErrorBody),
        (status = 409, description = "The worker does not hold the lease unexpired", body = ErrorBody)))]
async fn renew(
    State(plane): State<ControlPlane>,
    Path((id, resource)): Path<(String, String)>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<RenewRequest>,
) -> Result<Json<LeaseBody>, ApiError> {
    Ok(Json(
        plane
            .renew_worker_lease(&id, worker_credentials(&headers), &resource, request)
            .await?,
    ))
}

/// Mints a short-lived signed worker token (HS256 with `auth.worker_signing_key`).
#[utoipa::path(post, path = "/admin/worker-tokens", tag = "admin",
    request_body = WorkerTokenRequest,
    responses((status = 200, description = "The token", body = WorkerToken),
        (status = 400, description = "Invalid worker, scope or ttl", body = ErrorBody),
        (status = 503, description = "No signing key configured", body = ErrorBody)))]
async fn mint_token(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiJson(request): ApiJson<WorkerTokenRequest>,
) -> Result<Json<WorkerToken>, ApiError> {
    Ok(Json(plane.mint_worker_token(&principal, &request)?))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(get))
        .routes(routes!(admin_heartbeat))
        .routes(routes!(drain))
        .routes(routes!(undrain))
        .routes(routes!(admin_delete))
        .routes(routes!(heartbeat))
        .routes(routes!(renew))
        .routes(routes!(mint_token))
}
