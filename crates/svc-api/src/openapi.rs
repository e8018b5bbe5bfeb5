//! The OpenAPI document, generated from the handlers' annotations as the router is built, so
//! every route is described from the day it lands. Served at `/api/v1/openapi.json` and
//! `/api/v1/openapi.yaml`, and printed by `svc openapi`.

use utoipa::OpenApi;

/// The document's fixed parts; paths and schemas come from the routes.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "svc",
        description = "Self-hosted sandbox orchestration: spawn isolated sandboxes on Docker, Firecracker or a mock provider, run commands and move files in them.",
        license(name = "Apache-2.0")
    ),
    tags(
        (name = "sandboxes", description = "Sandbox lifecycle"),
        (name = "exec", description = "Running commands: buffered, NDJSON streams, WebSocket; logs"),
        (name = "files", description = "Files inside a sandbox"),
        (name = "templates", description = "Named spawn presets"),
        (name = "providers", description = "Providers, snapshots and the pool"),
        (name = "events", description = "Lifecycle events"),
        (name = "system", description = "Health and readiness")
    )
)]
pub(crate) struct ApiDoc;

/// Serialisation formats of the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenApiFormat {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// The full document as text.
pub fn openapi_document(format: OpenApiFormat) -> String {
    let (_, document) = crate::router::api_router().split_for_parts();
    render(&document, format)
}

pub(crate) fn render(document: &utoipa::openapi::OpenApi, format: OpenApiFormat) -> String {
    match format {
        OpenApiFormat::Json => document.to_pretty_json().unwrap_or_default(),
        OpenApiFormat::Yaml => document.to_yaml().unwrap_or_default(),
    }
}
