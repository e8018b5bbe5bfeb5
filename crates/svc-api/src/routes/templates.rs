//! `/templates`: CRUD, spawn from a template, and template builds (decisions §17).

use axum::body::Body;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use svc_control::{BuildInput, ControlPlane};
use svc_core::build::{BuildAccepted, BuildLogLine, BuildRequest, TemplateBuild};
use svc_core::sandbox::Sandbox;
use svc_core::template::{Template, TemplateSpawnRequest, TemplateSpec};
use svc_core::BuildId;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::files::{body_stream, content_length};
use super::{paged, PageQuery, StatusBody};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// Creates a template; omitted fields take the server defaults. An OIDC caller's template
/// belongs to its tenant; an API-key or admin caller's is global unless `tenant_id` names a
/// tenant (decisions §30).
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

/// Templates, by name, a page at a time (`limit`, then `cursor` from `X-Next-Cursor`). An OIDC
/// caller sees the global templates and its tenant's.
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
        (status = 404, description = "No such template (or another tenant's)", body = ErrorBody)))]
async fn get(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(name): Path<String>,
) -> Result<Json<Template>, ApiError> {
    Ok(Json(plane.get_template(&principal, &name).await?))
}

/// Replaces a template's fields; its tenant stays. An OIDC caller changes only its tenant's
/// templates (a global one: 403).
#[utoipa::path(put, path = "/templates/{name}", tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    request_body = TemplateSpec,
    responses((status = 200, description = "Updated", body = Template),
        (status = 400, description = "Invalid template", body = ErrorBody),
        (status = 404, description = "No such template (or another tenant's)", body = ErrorBody)))]
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
        (status = 404, description = "No such template (or another tenant's)", body = ErrorBody)))]
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
        (status = 404, description = "No such template (or another tenant's)", body = ErrorBody),
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

/// Builds the template's image from a Dockerfile (decisions §17): a JSON body
/// `{dockerfile, files, encoding}`, or a tar body (`Content-Type: application/x-tar`, up to
/// `server.max_upload_bytes`) holding `Dockerfile` and the context. The build runs in the
/// background; on success the template's `image` becomes `svc-templates/<name>:<build_id>`.
#[utoipa::path(operation_id = "build_template", post, path = "/templates/{name}/build", tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    request_body(content(
        (BuildRequest = "application/json"),
        (Vec<u8> = "application/x-tar")), description = "The Dockerfile and its context"),
    responses((status = 202, description = "Accepted; the build runs", body = BuildAccepted),
        (status = 400, description = "No Dockerfile, or a context entry with an absolute name, a `..` leaving the context or a link pointing outside it (named); no build is recorded", body = ErrorBody),
        (status = 404, description = "No such template (or another tenant's)", body = ErrorBody),
        (status = 413, description = "A tar context over `server.max_upload_bytes`", body = ErrorBody)))]
async fn build(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(name): Path<String>,
    request: Request,
) -> Result<(StatusCode, Json<BuildAccepted>), ApiError> {
    let is_tar = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/x-tar"));
    let input = if is_tar {
        let length = content_length(request.headers());
        BuildInput::Tar(body_stream(request.into_body()), length)
    } else {
        let ApiJson(body) = ApiJson::<BuildRequest>::from_request(request, &plane).await?;
        BuildInput::Json(body)
    };
    let accepted = plane.start_build(&principal, &name, input).await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}

/// The template's builds, newest first.
#[utoipa::path(operation_id = "list_template_builds", get, path = "/templates/{name}/builds", tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    responses((status = 200, description = "Builds", body = Vec<TemplateBuild>),
        (status = 404, description = "No such template (or another tenant's)", body = ErrorBody)))]
async fn builds(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(name): Path<String>,
) -> Result<Json<Vec<TemplateBuild>>, ApiError> {
    Ok(Json(plane.list_builds(&principal, &name).await?))
}

/// One build.
#[utoipa::path(operation_id = "get_template_build", get, path = "/templates/{name}/builds/{build_id}", tag = "templates",
    params(("name" = String, Path, description = "Template name"),
        ("build_id" = String, Path, description = "Build ID")),
    responses((status = 200, description = "The build", body = TemplateBuild),
        (status = 404, description = "No such template (or another tenant's) or build", body = ErrorBody)))]
async fn get_build(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((name, build_id)): Path<(String, String)>,
) -> Result<Json<TemplateBuild>, ApiError> {
    let build_id = BuildId::named(&build_id)?;
    Ok(Json(plane.get_build(&principal, &name, &build_id).await?))
}

/// Cancels a running build: the template stays as it was.
#[utoipa::path(operation_id = "cancel_template_build", delete, path = "/templates/{name}/builds/{build_id}", tag = "templates",
    params(("name" = String, Path, description = "Template name"),
        ("build_id" = String, Path, description = "Build ID")),
    responses((status = 200, description = "Cancelled: the build with `status: \"cancelled\"`", body = TemplateBuild),
        (status = 404, description = "No such template (or another tenant's) or build", body = ErrorBody),
        (status = 409, description = "The build has already ended", body = ErrorBody)))]
async fn cancel_build(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((name, build_id)): Path<(String, String)>,
) -> Result<Json<TemplateBuild>, ApiError> {
    let build_id = BuildId::named(&build_id)?;
    Ok(Json(
        plane.cancel_build(&principal, &name, &build_id).await?,
    ))
}

/// `?follow=` of the build log.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct FollowQuery {
    /// Keep streaming new lines until the build ends (default `true`).
    follow: Option<bool>,
}

/// The build's progress as NDJSON lines: `step`, `output`, `progress`, and last `result`.
#[utoipa::path(operation_id = "template_build_logs", get, path = "/templates/{name}/builds/{build_id}/logs", tag = "templates",
    params(("name" = String, Path, description = "Template name"),
        ("build_id" = String, Path, description = "Build ID"), FollowQuery),
    responses((status = 200, description = "NDJSON lines", content_type = "application/x-ndjson", body = BuildLogLine),
        (status = 404, description = "No such template (or another tenant's) or build", body = ErrorBody)))]
async fn build_logs(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path((name, build_id)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<FollowQuery>,
) -> Result<Response, ApiError> {
    let build_id = BuildId::named(&build_id)?;
    let lines = plane
        .build_logs(&principal, &name, &build_id, query.follow.unwrap_or(true))
        .await?;
    let body = Body::from_stream(lines.map(Ok::<_, std::convert::Infallible>));
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response())
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get, update, delete))
        .routes(routes!(spawn))
        .routes(routes!(build))
        .routes(routes!(builds))
        .routes(routes!(get_build, cancel_build))
        .routes(routes!(build_logs))
}
