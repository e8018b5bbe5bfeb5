//! `/health`, `/live`, `/ready`: never authenticated, never rate limited.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use svc_control::{ControlPlane, ProviderSummary};
use svc_core::GoDuration;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::version;

/// `/health` and `/live` body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct HealthBody {
    /// `ok` or `alive`.
    status: &'static str,
    /// Build version.
    version: &'static str,
    /// Time since start, as a Go duration.
    #[schema(value_type = String, example = "1h2m3.5s")]
    uptime: GoDuration,
}

/// `/ready` body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ReadyBody {
    /// `ready` or `not_ready`.
    status: &'static str,
    /// Build version.
    version: &'static str,
    /// Time since start.
    #[schema(value_type = String)]
    uptime: GoDuration,
    /// Healthy providers.
    ready_providers: usize,
    /// Configured providers.
    total_providers: usize,
    /// Every provider's summary.
    providers: Vec<ProviderSummary>,
}

fn uptime(plane: &ControlPlane) -> GoDuration {
    GoDuration::new(plane.uptime())
}

/// Service health.
#[utoipa::path(get, path = "/health", tag = "system",
    responses((status = 200, description = "The service answers", body = HealthBody)))]
async fn health(State(plane): State<ControlPlane>) -> Json<HealthBody> {
    Json(HealthBody {
        status: "ok",
        version: version(),
        uptime: uptime(&plane),
    })
}

/// Process liveness only.
#[utoipa::path(get, path = "/live", tag = "system",
    responses((status = 200, description = "The process is alive", body = HealthBody)))]
async fn live(State(plane): State<ControlPlane>) -> Json<HealthBody> {
    Json(HealthBody {
        status: "alive",
        version: version(),
        uptime: uptime(&plane),
    })
}

/// Readiness: at least one configured provider is healthy (checked now).
#[utoipa::path(get, path = "/ready", tag = "system",
    responses(
        (status = 200, description = "At least one provider is healthy", body = ReadyBody),
        (status = 503, description = "No configured provider is healthy", body = ReadyBody)))]
async fn ready(State(plane): State<ControlPlane>) -> impl IntoResponse {
    let readiness = plane.readiness().await;
    let is_ready = readiness.ready_providers > 0;
    let body = ReadyBody {
        status: if is_ready { "ready" } else { "not_ready" },
        version: version(),
        uptime: uptime(&plane),
        ready_providers: readiness.ready_providers,
        total_providers: readiness.providers.len(),
        providers: readiness.providers,
    };
    let status = if is_ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new()
        .routes(routes!(health))
        .routes(routes!(live))
        .routes(routes!(ready))
}
