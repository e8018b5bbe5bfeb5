//! The OpenAPI document, generated from the handlers' annotations as the router is built, so
//! every route is described from the day it lands. Served at `/api/v1/openapi.json` and
//! `/api/v1/openapi.yaml`, and printed by `svc openapi`.

use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{Content, Ref, RefOr, Response, ResponseBuilder};
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
        (name = "quotas", description = "Per-owner limits and usage"),
        (name = "workers", description = "The worker registry"),
        (name = "tenants", description = "Tenants, members, policies and the audit log"),
        (name = "previews", description = "Ports inside a sandbox through svc: preview tokens; the proxy itself is /sandboxes/{id}/proxy/{port}/... and <port>-<id>.<preview_domain>"),
        (name = "events", description = "Lifecycle events"),
        (name = "system", description = "Health and readiness"),
        (name = "admin", description = "Admin aliases; need the admin API key")
    )
)]
pub(crate) struct ApiDoc;

/// The API-key and OIDC bearer schemes (decisions §5), and 401/403 on every route but the probes. Applied to the
/// finished document (see [`crate::router::api_parts`]), since it walks every operation.
pub(crate) struct ApiKeys;

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
        components.add_security_scheme(
            "worker_token",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Worker-Token",
                "worker routes: a signed, static or shared worker token, with X-Worker-ID",
            ))),
        );
        components.add_security_scheme(
            "oidc_bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "an OIDC token of the auth.oidc_issuer (RS256, ES256, ES384, ES512);                          role from its groups and tenant memberships",
                    ))
                    .build(),
            ),
        );
        openapi.security = Some(vec![
            SecurityRequirement::new("api_key", Vec::<String>::new()),
            SecurityRequirement::new("admin_api_key", Vec::<String>::new()),
            SecurityRequirement::new("oidc_bearer", Vec::<String>::new()),
        ]);
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                if crate::permissions::PROBES.contains(&path.as_str()) {
                    // An empty requirement: the probes need no credentials.
                    operation.security = Some(vec![SecurityRequirement::default()]);
                    continue;
                }
                rate_limited(&mut operation.responses.responses);
                if path.starts_with(crate::permissions::WORKER_PREFIX) {
                    operation.security = Some(vec![SecurityRequirement::new(
                        "worker_token",
                        Vec::<String>::new(),
                    )]);
                    continue;
                }
                for (status, description) in [
                    (
                        "401",
                        "Authentication is on and no valid API key or bearer token was sent",
                    ),
                    (
                        "403",
                        "The caller's role (or tenant) does not allow this route",
                    ),
                ] {
                    operation
                        .responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error_response(description));
                }
            }
        }
    }
}

/// Every route but the probes may answer 429 for the API rate limit (decisions §10); routes
/// with limits of their own keep their description, extended.
fn rate_limited(responses: &mut std::collections::BTreeMap<String, RefOr<Response>>) {
    const RATE: &str = "the API rate limit (rate_limit.enabled): see Retry-After";
    let description = match responses.get("429") {
        Some(RefOr::T(own)) => format!("{}; or {RATE}", own.description),
        _ => format!("Over {RATE}"),
    };
    let header = |description: &str| {
        utoipa::openapi::HeaderBuilder::new()
            .schema(
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::Integer),
            )
            .description(Some(description))
            .build()
    };
    let response = ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            Content::new(Some(RefOr::Ref(Ref::from_schema_name("ErrorBody")))),
        )
        .header(
            "Retry-After",
            header("Whole seconds until a request may succeed"),
        )
        .header(
            "X-RateLimit-Limit",
            header("rate_limit.requests_per_minute"),
        )
        .header("X-RateLimit-Remaining", header("Whole tokens left (0)"))
        .build();
    responses.insert("429".to_owned(), RefOr::T(response));
}

fn error_response(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                Content::new(Some(RefOr::Ref(Ref::from_schema_name("ErrorBody")))),
            )
            .build(),
    )
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
    let (_, document) = crate::router::api_parts();
    render(&document, format)
}

pub(crate) fn render(document: &utoipa::openapi::OpenApi, format: OpenApiFormat) -> String {
    match format {
        OpenApiFormat::Json => document.to_pretty_json().unwrap_or_default(),
        OpenApiFormat::Yaml => document.to_yaml().unwrap_or_default(),
    }
}
