//! The OpenAPI document, generated from the handlers' annotations as the router is built, so
//! every route is described from the day it lands. Served at `/api/v1/openapi.json` and
//! `/api/v1/openapi.yaml`, and printed by `svc openapi`.

use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityRequirement, SecurityScheme};
use utoipa::{Modify, OpenApi};

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
        (name = "system", description = "Health and readiness"),
        (name = "admin", description = "Admin aliases; need the admin API key")
    ),
    modifiers(&ApiKeys)
)]
pub(crate) struct ApiDoc;

/// The API-key schemes (decisions §5): required on every route but the probes when
/// `auth.enabled` is true.
struct ApiKeys;

impl Modify for ApiKeys {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-API-Key",
                "auth.api_key (role api) or auth.admin_api_key (role admin)",
            ))),
        );
        components.add_security_scheme(
            "admin_api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Admin-API-Key",
                "auth.admin_api_key, for /admin routes",
            ))),
        );
        openapi.security = Some(vec![
            SecurityRequirement::new("api_key", Vec::<String>::new()),
            SecurityRequirement::new("admin_api_key", Vec::<String>::new()),
        ]);
    }
}

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
