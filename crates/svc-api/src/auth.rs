//! Authentication of every API request, once, before its handler: the credentials become a
//! [`Principal`] stored in the request's extensions, where the `Caller` extractor finds it.
//! Probes (`/health`, `/live`, `/ready`) are always open; `/admin/*` routes additionally need
//! the admin permission (decisions §5). Credentials never reach a log or a response.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use svc_control::{Action, ControlPlane, Credentials};
use svc_core::{Error, OwnerId};

use crate::ApiError;

/// The API key header.
pub(crate) static API_KEY_HEADER: HeaderName = HeaderName::from_static("x-api-key");
/// The admin API key header.
static ADMIN_API_KEY_HEADER: HeaderName = HeaderName::from_static("x-admin-api-key");
/// The owner header.
pub(crate) static USER_ID_HEADER: HeaderName = HeaderName::from_static("x-user-id");

/// Routes that never need credentials.
pub(crate) const PROBES: [&str; 3] = ["/api/v1/health", "/api/v1/live", "/api/v1/ready"];
const ADMIN_PREFIX: &str = "/api/v1/admin/";
/// Worker routes authenticate with worker credentials, in their handlers.
pub(crate) const WORKER_PREFIX: &str = "/api/v1/worker/";

/// A header's text; a value that is not UTF-8 matches no key, so it reads as an empty one.
fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap_or(""))
}

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

/// The middleware.
pub(crate) async fn authenticate(
    State(plane): State<ControlPlane>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if PROBES.contains(&path) || path.starts_with(WORKER_PREFIX) {
        return next.run(request).await;
    }
    let admin_route = path.starts_with(ADMIN_PREFIX);
    let headers = request.headers();
    let credentials = Credentials {
        api_key: header(headers, &API_KEY_HEADER),
        admin_api_key: header(headers, &ADMIN_API_KEY_HEADER),
    };
    // Who is calling comes before what they asked: a bad X-User-ID from an unknown caller
    // is still a 401.
    let owner = owner(headers);
    let principal = plane.authenticate(&credentials).and_then(|mut principal| {
        principal.owner = owner?;
        if admin_route {
            plane.authorize(&principal, Action::UseAdminRoutes)?;
        }
        Ok(principal)
    });
    match principal {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(err) => ApiError(err).into_response(),
    }
}
