//! One module per resource. Each exposes `routes()` for the router, with every handler
//! registered together with its OpenAPI description.

pub(crate) mod events;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod observe;
pub(crate) mod preview;
pub(crate) mod providers;
pub(crate) mod quotas;
pub(crate) mod sandboxes;
pub(crate) mod system;
pub(crate) mod templates;
pub(crate) mod tenants;
pub(crate) mod workers;

use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use svc_control::{Page, PageRequest};

/// The response header naming the next page of a list.
static NEXT_CURSOR: HeaderName = HeaderName::from_static("x-next-cursor");

/// The page of a list route without other filters.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageQuery {
    /// A page of at most this many, 1 to 1000 (default 1000).
    limit: Option<u32>,
    /// The next page: the `X-Next-Cursor` of the previous answer.
    cursor: Option<String>,
}

impl From<PageQuery> for PageRequest {
    fn from(query: PageQuery) -> Self {
        PageRequest {
            limit: query.limit,
            cursor: query.cursor,
        }
    }
}

/// A list page as decisions §7 shapes it: the items as a plain array, the next page's cursor in
/// `X-Next-Cursor` while one follows.
pub(crate) fn paged<T: Serialize>(page: Page<T>) -> Response {
    with_next_cursor(Json(page.items).into_response(), page.next_cursor)
}

/// `response` naming the next page, if any, in `X-Next-Cursor`.
pub(crate) fn with_next_cursor(mut response: Response, cursor: Option<String>) -> Response {
    if let Some(cursor) = cursor.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(NEXT_CURSOR.clone(), cursor);
    }
    response
}

/// `{status}` bodies (`destroyed`, `deleted`, ...).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct StatusBody {
    /// What happened.
    pub status: &'static str,
}

/// The crate version, plus the git revision when the build knew it.
pub fn version() -> &'static str {
    env!("SVC_VERSION")
}
