//! `/sandboxes`: spawn, list, get, destroy, prune, extend, pause, resume, stats.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde::{Deserialize, Serialize};
use svc_control::{ControlPlane, ListSandboxes, PageRequest, SandboxStats};
use svc_core::admission::Admission;
use svc_core::sandbox::{ExtendRequest, Sandbox, SpawnRequest};
use svc_core::SandboxId;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{paged, StatusBody};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// `GET /sandboxes` query.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// `creating`, `running`, `paused`, `error`, `destroyed` or `all`; default: every sandbox not
    /// destroyed.
    state: Option<String>,
    /// Only this owner's sandboxes.
    owner_id: Option<String>,
    /// Only this provider's sandboxes.
    provider: Option<String>,
    /// A page of at most this many, 1 to 1000 (default 1000).
    limit: Option<u32>,
    /// The next page: the `X-Next-Cursor` of the previous answer (with the same filters).
    cursor: Option<String>,
}

/// `DELETE /sandboxes` body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct PruneBody {
    /// How many expired sandboxes were destroyed.
    pruned: u64,
}

/// Spawns a sandbox.
#[utoipa::path(operation_id = "spawn_sandbox", post, path = "/sandboxes", tag = "sandboxes",
    request_body = SpawnRequest,
    params(("X-User-ID" = Option<String>, Header, description = "Owner; overrides owner_id")),
    responses(
        (status = 201, description = "Running sandbox", body = Sandbox),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 429, description = "Quota or capacity exceeded, or the spawn queue timed out", body = ErrorBody),
        (status = 500, description = "Provider failed", body = ErrorBody),
        (status = 503, description = "Provider unavailable", body = ErrorBody)))]
async fn spawn(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiJson(request): ApiJson<SpawnRequest>,
) -> Result<(StatusCode, Json<Sandbox>), ApiError> {
    let sandbox = plane.spawn_sandbox(&principal, request).await?;
    Ok((StatusCode::CREATED, Json(sandbox)))
}

/// The admission decision a spawn with this body would get now; creates nothing. A denial is
/// a 200 with `allowed: false` and a `reason`.
#[utoipa::path(post, path = "/sandboxes/admission", tag = "sandboxes",
    request_body = SpawnRequest,
    params(("X-User-ID" = Option<String>, Header, description = "Owner; overrides owner_id")),
    responses(
        (status = 200, description = "The decision", body = Admission),
        (status = 400, description = "Invalid request", body = ErrorBody)))]
async fn admission(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiJson(request): ApiJson<SpawnRequest>,
) -> Result<Json<Admission>, ApiError> {
    Ok(Json(plane.check_admission(&principal, request).await?))
}

/// Lists sandboxes, newest first, a page at a time (`limit`, then `cursor` from
/// `X-Next-Cursor` until an answer has none).
#[utoipa::path(operation_id = "list_sandboxes", get, path = "/sandboxes", tag = "sandboxes", params(ListQuery),
    responses((status = 200, description = "Sandboxes", body = Vec<Sandbox>,
            headers(("X-Next-Cursor" = String, description = "The next page's cursor; absent on the last page"))),
        (status = 400, description = "Invalid filter, limit or cursor", body = ErrorBody)))]
async fn list(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    let query = ListSandboxes {
        state: query.state,
        owner_id: query.owner_id,
        provider: query.provider,
        page: PageRequest {
            limit: query.limit,
            cursor: query.cursor,
        },
    };
    Ok(paged(plane.list_sandboxes_page(&principal, query).await?))
}

/// Destroys every expired sandbox now.
#[utoipa::path(delete, path = "/sandboxes", tag = "sandboxes",
    responses((status = 200, description = "Number destroyed", body = PruneBody)))]
async fn prune(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
) -> Result<Json<PruneBody>, ApiError> {
    let pruned = plane.prune_expired(&principal).await?;
    Ok(Json(PruneBody { pruned }))
}

/// One sandbox (destroyed ones too, until `destroyed_retention` passes).
#[utoipa::path(operation_id = "get_sandbox", get, path = "/sandboxes/{id}", tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox ID")),
    responses((status = 200, description = "The sandbox", body = Sandbox),
        (status = 404, description = "No such sandbox", body = ErrorBody)))]
async fn get(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let id = SandboxId::named(&id)?;
    Ok(Json(plane.get_sandbox(&principal, &id).await?))
}

/// Destroys a sandbox; destroying it again answers the same.
#[utoipa::path(delete, path = "/sandboxes/{id}", tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox ID")),
    responses((status = 200, description = "`{\"status\": \"destroyed\"}`", body = StatusBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 500, description = "Provider failed; nothing changed", body = ErrorBody)))]
async fn destroy(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<StatusBody>, ApiError> {
    let id = SandboxId::named(&id)?;
    plane.destroy_sandbox(&principal, &id).await?;
    Ok(Json(StatusBody {
        status: "destroyed",
    }))
}

/// Sets `expires_at` to now + `ttl`, within the maximum TTL counted from creation.
#[utoipa::path(post, path = "/sandboxes/{id}/extend", tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox ID")),
    request_body = ExtendRequest,
    responses((status = 200, description = "The sandbox with its new expiry", body = Sandbox),
        (status = 400, description = "Invalid ttl", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "Sandbox destroyed", body = ErrorBody),
        (status = 429, description = "Over the maximum TTL", body = ErrorBody)))]
async fn extend(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<ExtendRequest>,
) -> Result<Json<Sandbox>, ApiError> {
    let id = SandboxId::named(&id)?;
    Ok(Json(plane.extend_sandbox(&principal, &id, request).await?))
}

/// Freezes the sandbox's processes and memory (decisions §7): exec and files answer 409 until
/// it is resumed, and it does not expire meanwhile. Pausing a paused sandbox is no change.
#[utoipa::path(post, path = "/sandboxes/{id}/pause", tag = "sandboxes",
    operation_id = "pause_sandbox",
    params(("id" = String, Path, description = "Sandbox ID")),
    responses((status = 200, description = "The sandbox, `paused`", body = Sandbox),
        (status = 400, description = "The provider cannot pause", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "Sandbox not running", body = ErrorBody),
        (status = 500, description = "Provider failed", body = ErrorBody)))]
async fn pause(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let id = SandboxId::named(&id)?;
    Ok(Json(plane.pause_sandbox(&principal, &id).await?))
}

/// Thaws a paused sandbox; `expires_at` moves later by the time it spent paused. Resuming a
/// running sandbox is no change.
#[utoipa::path(post, path = "/sandboxes/{id}/resume", tag = "sandboxes",
    operation_id = "resume_sandbox",
    params(("id" = String, Path, description = "Sandbox ID")),
    responses((status = 200, description = "The sandbox, `running`", body = Sandbox),
        (status = 400, description = "The provider cannot pause", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "Sandbox not paused or running", body = ErrorBody),
        (status = 500, description = "Provider failed", body = ErrorBody)))]
async fn resume(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<Sandbox>, ApiError> {
    let id = SandboxId::named(&id)?;
    Ok(Json(plane.resume_sandbox(&principal, &id).await?))
}

/// The sandbox's resource usage, sampled now by its provider (docker: the engine's stats; mock:
/// its host processes). `cpu_percent` is in percent of one CPU.
#[utoipa::path(get, path = "/sandboxes/{id}/stats", tag = "sandboxes",
    params(("id" = String, Path, description = "Sandbox ID")),
    responses((status = 200, description = "One sample", body = SandboxStats),
        (status = 400, description = "The provider does not report stats", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "Sandbox not running", body = ErrorBody),
        (status = 500, description = "Provider failed", body = ErrorBody)))]
async fn stats(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<SandboxStats>, ApiError> {
    let id = SandboxId::named(&id)?;
    Ok(Json(plane.sandbox_stats(&principal, &id).await?))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(spawn, list, prune))
        .routes(routes!(get, destroy))
        .routes(routes!(extend))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(stats))
        .routes(routes!(admission))
}
