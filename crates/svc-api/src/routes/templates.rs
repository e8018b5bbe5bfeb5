//! `/templates`: CRUD and spawn from a template.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use svc_control::ControlPlane;
use svc_core::sandbox::Sandbox;
use svc_core::template::{Template, TemplateSpawnRequest, TemplateSpec};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{paged, PageQuery, StatusBody};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// Creates a template; omitted fields take the server defaults.
#[utoipa::path(operation_id = "create_template", post, path = "/templates", tag = "templates", request_body = TemplateSpec,
    responses((status = 201, description = "Created", body = Template),
        (status = 400, description = "Invalid template", body = ErrorBody),
        (status = 409, description = "Name exists", body = ErrorBody)))]
async fn create(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiJson(spec): ApiJson<TemplateSpec>,
) -> Result<(StatusCode, Json<Template>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(plane.create_template(&principal, spec).await?),
    ))
}

/// Templates, by name, a page at a time (`limit`, then `cursor` from `X-Next-Cursor`).
#[utoipa::path(operation_id = "list_templates", get, path = "/templates", tag = "templates", params(PageQuery),
    responses((status = 200, description = "Templates", body = Vec<Template>, headers(("X-Next-Cursor" = String, description = "The next page's cursor; absent on the last page"))),
        (status = 400, description = "Invalid limit or cursor", body = ErrorBody)))]
async fn list(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response, ApiError> {
    Ok(paged(plane.list_templates(&principal, query.into()).await?))
}

/// One template.
#[utoipa::path(operation_id = "get_template", get, path = "/templates/{name}", tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    responses((status = 200, description = "The template", body = Template),
        (status = 404, description = "No such template", body = ErrorBody)))]
async fn get(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(name): Path<String>,
) -> Result<Json<Template>, ApiError> {
    Ok(Json(plane.get_template(&principal, &name).await?))
}

/// Replaces a template's fields.
#[utoipa::path(put, path = "/templates/{name}", tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    request_body = TemplateSpec,
    responses((status = 200, description = "Updated", body = Template),
        (status = 400, description = "Invalid template", body = ErrorBody),
        (status = 404, description = "No such template", body = ErrorBody)))]
async fn update(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(name): Path<String>,
    ApiJson(spec): ApiJson<TemplateSpec>,
) -> Result<Json<Template>, ApiError> {
    Ok(Json(plane.update_template(&principal, &name, spec).await?))
}

/// Deletes a template.
#[utoipa::path(operation_id = "delete_template", delete, path = "/templates/{name}", tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    responses((status = 200, description = "`{\"status\": \"deleted\"}`", body = StatusBody),
        (status = 404, description = "No such template", body = ErrorBody)))]
async fn delete(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(name): Path<String>,
) -> Result<Json<StatusBody>, ApiError> {
    plane.delete_template(&principal, &name).await?;
    Ok(Json(StatusBody { status: "deleted" }))
}

/// Spawns a sandbox from a template; the body may override `ttl` and `provider`.
#[utoipa::path(operation_id = "spawn_from_template", post, path = "/templates/{name}/spawn", tag = "templates",
    params(("name" = String, Path, description = "Template name"),
        ("X-User-ID" = Option<String>, Header, description = "Owner")),
    request_body(content = Option<TemplateSpawnRequest>, description = "Optional overrides"),
    responses((status = 201, description = "Running sandbox", body = Sandbox),
        (status = 404, description = "No such template", body = ErrorBody),
        (status = 429, description = "Quota or capacity exceeded", body = ErrorBody)))]
async fn spawn(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(name): Path<String>,
    ApiJson(request): ApiJson<TemplateSpawnRequest>,
) -> Result<(StatusCode, Json<Sandbox>), ApiError> {
    let sandbox = plane
        .spawn_from_template(&principal, &name, request)
        .await?;
    Ok((StatusCode::CREATED, Json(sandbox)))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get, update, delete))
        .routes(routes!(spawn))
}
