//! The router: every API route under `/api/v1`, JSON errors for unknown routes and methods,
//! the body limit, CORS and request observation.

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderName, HeaderValue};
use axum::routing::{any, get};
use axum::Router;
use svc_control::ControlPlane;
use svc_core::error::Resource;
use svc_core::Error;
use tower_http::cors::{AllowHeaders, AllowOrigin, Any, CorsLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::openapi::{render, ApiDoc, OpenApiFormat};
use crate::{routes, ApiError};

/// Every documented route, relative to the server root.
fn api_router() -> OpenApiRouter<ControlPlane> {
    let api = OpenApiRouter::new()
        .merge(routes::system::routes())
        .merge(routes::sandboxes::routes())
        .merge(routes::exec::routes())
        .merge(routes::files::routes())
        .merge(routes::templates::routes())
        .merge(routes::providers::routes())
        .merge(routes::quotas::routes())
        .merge(routes::workers::routes())
        .merge(routes::tenants::routes())
        .merge(routes::observe::routes())
        .merge(routes::preview::routes())
        .merge(routes::events::routes());
    OpenApiRouter::with_openapi(ApiDoc::openapi()).nest("/api/v1", api)
}

/// The routes and the finished OpenAPI document describing them.
pub(crate) fn api_parts() -> (Router<ControlPlane>, utoipa::openapi::OpenApi) {
    let (api, mut document) = api_router().split_for_parts();
    utoipa::Modify::modify(&crate::openapi::ApiKeys, &mut document);
    (api, document)
}

async fn route_not_found(request: Request) -> ApiError {
    ApiError(Error::not_found(Resource::Route, request.uri().path()))
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError(Error::MethodNotAllowed {
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
    })
}

/// CORS (interface Authentication 12): origins from `server.cors_allowed_origins` (`*` = any).
/// Requested headers are mirrored rather than answered with `*`, which browsers do not apply
/// to `Authorization`: bearer tokens must pass a preflight.
fn cors(origins: &[String]) -> CorsLayer {
    let exposed = [
        HeaderName::from_static("x-request-id"),
        header::RETRY_AFTER,
        HeaderName::from_static("x-ratelimit-limit"),
        HeaderName::from_static("x-ratelimit-remaining"),
        // Streamed and WebSocket execs name their exec only here; a browser client needs it
        // to reattach.
        HeaderName::from_static("x-exec-id"),
        // Paged lists name their next page only here.
        HeaderName::from_static("x-next-cursor"),
    ];
    let layer = CorsLayer::new()
        .allow_methods(Any)
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers(exposed);
    if origins.is_empty() || origins.iter().any(|o| o == "*") {
        return layer.allow_origin(Any);
    }
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    layer.allow_origin(AllowOrigin::list(origins))
}

/// The header naming the worker that served a sandbox-scoped answer (decisions §22).
const SERVED_BY: HeaderName = HeaderName::from_static("x-svc-worker");

/// `X-Svc-Worker` on every answer about one sandbox (`/sandboxes/{id}` and below, the preview
/// proxy aside): which node of a fleet served it.
async fn served_by(
    axum::extract::State(worker): axum::extract::State<Option<HeaderValue>>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let scoped = request
        .uri()
        .path()
        .strip_prefix("/api/v1/sandboxes/")
        .is_some_and(|rest| !rest.is_empty());
    let mut response = next.run(request).await;
    if let (true, Some(worker)) = (scoped, worker) {
        response.headers_mut().insert(SERVED_BY, worker);
    }
    response
}

/// The whole HTTP application for `plane`.
pub fn router(plane: ControlPlane) -> Router {
    let (api, document) = api_parts();
    let json = Bytes::from(render(&document, OpenApiFormat::Json));
    let yaml = Bytes::from(render(&document, OpenApiFormat::Yaml));
    let max_body = usize::try_from(plane.config().server.max_body_bytes).unwrap_or(usize::MAX);
    let cors = cors(&plane.config().server.cors_allowed_origins);
    let ui_enabled = plane.config().server.ui_enabled;
    let observed = plane.clone();
    let previews = routes::preview::Previews::new(plane.clone());
    let allowed_hosts =
        crate::hosts::AllowedHosts::for_listener(plane.config(), &plane.config().server.host);
    // Every API route authenticates (probes excepted, see auth.rs); the interface description
    // is public.
    let mut app = api
        .route_layer(axum::middleware::from_fn_with_state(
            plane.clone(),
            crate::auth::authenticate,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            // Made once: a worker ID (no control characters, checked at start-up) is a valid
            // header value.
            HeaderValue::from_str(plane.worker_id()).ok(),
            served_by,
        ));
    // The preview proxy authenticates for itself: credentials, or a preview token.
    for template in crate::permissions::PREVIEW_ROUTES {
        app = app.route(
            &format!("{}{template}", crate::permissions::API_PREFIX),
            any(routes::preview::by_path).with_state(previews.clone()),
        );
    }
    let app = app
        .route(
            "/api/v1/openapi.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], json) }),
        )
        .route(
            "/api/v1/openapi.yaml",
            get(move || async move { ([(header::CONTENT_TYPE, "application/yaml")], yaml) }),
        )
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            plane.clone(),
            crate::ratelimit::limit,
        ))
        .layer(axum::middleware::from_fn(crate::error::json_errors));
    // Tests check every JSON answer against the document; production never adds the layer.
    let app = if crate::openapi_check::enabled() {
        app.layer(axum::middleware::from_fn(crate::openapi_check::check))
    } else {
        app
    };
    let app = app
        // The console (decisions §21): its own files, outside the API's authentication and rate
        // limit (the data comes from the API, with the caller's credential); a preview host still
        // reaches its sandbox first.
        .merge(if ui_enabled {
            svc_ui::router()
        } else {
            Router::new()
        })
        .layer(axum::middleware::from_fn_with_state(
            previews,
            routes::preview::by_host,
        ))
        .with_state(plane)
        .layer(cors);
    // Without authentication, only the allowed hosts get past here (decisions §30).
    let app = match allowed_hosts {
        Some(allowed) => app.layer(axum::middleware::from_fn_with_state(
            allowed,
            crate::hosts::check,
        )),
        None => app,
    };
    app.layer(axum::middleware::from_fn_with_state(
        observed,
        crate::observe::observe,
    ))
}
