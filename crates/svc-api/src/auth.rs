//! Authentication of every API request, once, before its handler: the credentials (API keys or
//! an OIDC bearer token) become a [`Principal`] stored in the request's extensions, where the
//! `Caller` extractor finds it. Probes (`/health`, `/live`, `/ready`) are always open;
//! `/admin/*` routes additionally need the admin permission, or for a tenant's own members,
//! policies and audit the tenant-admin one (decisions §5). Every mutating admin request and
//! quota change is written to the audit log here, whatever its outcome. Credentials never reach
//! a log or a response.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use svc_control::audit::AuditRecord;
use svc_control::{Action, ControlPlane, Offered, Principal};
use svc_core::audit::AuditOutcome;
use svc_core::{Error, OwnerId};

use crate::permissions::{API_PREFIX, PROBES, WORKER_PREFIX};
use crate::ApiError;

/// The owner header.
pub(crate) static USER_ID_HEADER: HeaderName = HeaderName::from_static("x-user-id");

const ADMIN_PREFIX: &str = "/api/v1/admin/";
const TENANTS_PREFIX: &str = "/api/v1/admin/tenants/";
fn owner(headers: &HeaderMap) -> Result<Option<OwnerId>, Error> {
    let Some(value) = headers.get(&USER_ID_HEADER) else {
        return Ok(None);
    };
    let text = std::str::from_utf8(value.as_bytes())
        .map_err(|_| Error::invalid("X-User-ID", "header must be UTF-8"))?;
    OwnerId::parse(text)
        .map(Some)
        .map_err(|e| Error::invalid("X-User-ID", format!("header invalid: {e}")))
}

/// Whether `path` is a sandbox route: in pool mode each needs the user it acts for
/// (decisions §15). Spawning from a template makes a sandbox too.
fn acts_on_sandboxes(path: &str) -> bool {
    let path = path.strip_prefix("/api/v1").unwrap_or(path);
    path == "/sandboxes"
        || path.starts_with("/sandboxes/")
        || (path.starts_with("/templates/") && path.ends_with("/spawn"))
}

/// The tenant of an `/admin/tenants/{tenantID}/...` path, and whether the path goes below the
/// tenant itself (members, policies, audit: the tenant admin's routes).
fn tenant_in_path(path: &str) -> Option<(&str, bool)> {
    let rest = path.strip_prefix(TENANTS_PREFIX)?;
    let (tenant, below) = rest.split_once('/').unwrap_or((rest, ""));
    (!tenant.is_empty()).then_some((tenant, !below.is_empty()))
}

/// The audit action of a request, if it is audited: mutating admin routes and quota writes.
fn audit_action(method: &Method, path: &str, template: Option<&str>) -> Option<String> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    let template = template?;
    match crate::permissions::audit_name(method, template) {
        Some(action) => Some(action.to_owned()),
        None if path.starts_with(ADMIN_PREFIX) => Some(format!(
            "{method} {}",
            template.strip_prefix(API_PREFIX).unwrap_or(template)
        )),
        None => None,
    }
}

fn outcome(status: StatusCode) -> AuditOutcome {
    match status {
        s if s.is_success() => AuditOutcome::Success,
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => AuditOutcome::Denied,
        _ => AuditOutcome::Failure,
    }
}

/// The middleware. The route's template goes into the response's extensions too, for the
/// request metrics of the outer observation layer (which runs before routing).
pub(crate) async fn authenticate(
    State(plane): State<ControlPlane>,
    request: Request,
    next: Next,
) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let mut response = authenticate_routed(plane, request, next).await;
    if let Some(route) = route {
        response.extensions_mut().insert(route);
    }
    response
}

/// The caller a request's credentials name, with its `X-User-ID` owner.
pub(crate) async fn principal_of(
    plane: &ControlPlane,
    headers: &HeaderMap,
) -> Result<Principal, Error> {
    let offered = Offered::from_headers(headers);
    // Who is calling comes before what they asked: a bad X-User-ID from an unknown caller
    // is still a 401.
    let owner = owner(headers);
    let mut principal = plane.authenticate(&offered.credentials()).await?;
    principal.owner = owner?;
    if let Some(owner) = &principal.owner {
        principal.check_may_act_as("X-User-ID", owner.as_str())?;
    }
    Ok(principal)
}

async fn authenticate_routed(plane: ControlPlane, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    if PROBES.contains(&path.as_str()) || path.starts_with(WORKER_PREFIX) {
        return next.run(request).await;
    }
    let principal = match principal_of(&plane, request.headers()).await {
        Ok(principal) => principal,
        Err(err) => return ApiError(err).into_response(),
    };
    if plane.config().pool.enabled && principal.acting_owner().is_none() && acts_on_sandboxes(&path)
    {
        return ApiError(Error::invalid(
            "X-User-ID",
            "header is required on sandbox routes when pool mode is on (pool.enabled)",
        ))
        .into_response();
    }
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned());
    let audited = audit_action(request.method(), &path, template.as_deref());
    let refused = authorize_route(
        &plane,
        &principal,
        request.method(),
        template.as_deref(),
        &path,
    )
    .err();
    // The audit entry needs the caller after the handler took it.
    let auditor = audited.as_ref().map(|_| principal.clone());
    let response = match refused {
        Some(err) => ApiError(err).into_response(),
        None => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
    };
    if let (Some(action), Some(principal)) = (&audited, &auditor) {
        audit(&plane, principal, action, &path, response.status()).await;
    }
    response
}

/// The route's permission (see [`crate::permissions`]), before any handler or extractor; for a
/// tenant's own administration routes, also the tenant.
fn authorize_route(
    plane: &ControlPlane,
    principal: &Principal,
    method: &Method,
    template: Option<&str>,
    path: &str,
) -> Result<(), Error> {
    let action = template.map_or(Action::UseAdminRoutes, |t| {
        crate::permissions::route_action(method, t)
    });
    match (action, tenant_in_path(path)) {
        (Action::AdministerTenant, Some((tenant, _))) => plane.authorize_tenant(principal, tenant),
        _ => plane.authorize(principal, action),
    }
}

async fn audit(
    plane: &ControlPlane,
    principal: &Principal,
    action: &str,
    path: &str,
    status: StatusCode,
) {
    let tenant_id = tenant_in_path(path).map_or(&*principal.tenant_id, |(t, _)| t);
    let mut details = serde_json::Map::new();
    details.insert("status".into(), status.as_u16().into());
    plane
        .record_audit(AuditRecord {
            principal,
            tenant_id,
            action,
            resource: path.strip_prefix(API_PREFIX).unwrap_or(path).to_owned(),
            outcome: outcome(status),
            details,
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_are_read_from_admin_paths() {
        assert_eq!(
            tenant_in_path("/api/v1/admin/tenants/acme/policies"),
            Some(("acme", true))
        );
        assert_eq!(
            tenant_in_path("/api/v1/admin/tenants/acme"),
            Some(("acme", false))
        );
        assert_eq!(tenant_in_path("/api/v1/admin/tenants"), None);
        assert_eq!(tenant_in_path("/api/v1/sandboxes"), None);
    }

    #[test]
    fn mutating_admin_requests_and_quota_writes_are_audited() {
        let post = Method::POST;
        assert_eq!(
            audit_action(
                &post,
                "/api/v1/admin/tenants",
                Some("/api/v1/admin/tenants")
            )
            .as_deref(),
            Some("tenant.create")
        );
        assert_eq!(
            audit_action(
                &Method::PUT,
                "/api/v1/quotas/alice",
                Some("/api/v1/quotas/{ownerID}")
            )
            .as_deref(),
            Some("quota.save")
        );
        assert_eq!(
            audit_action(
                &post,
                "/api/v1/admin/providers/test",
                Some("/api/v1/admin/providers/test")
            )
            .as_deref(),
            Some("POST /admin/providers/test")
        );
        assert_eq!(
            audit_action(
                &Method::GET,
                "/api/v1/admin/tenants",
                Some("/api/v1/admin/tenants")
            ),
            None
        );
        assert_eq!(
            audit_action(&post, "/api/v1/sandboxes", Some("/api/v1/sandboxes")),
            None
        );
    }
}
