//! The one place where service errors become HTTP statuses and `{code, message}` bodies.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use svc_core::{Error, ErrorKind};

/// The JSON body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Machine-readable code (`bad_request`, `not_found`, ...).
    pub code: &'static str,
    /// What went wrong and, where it helps, what is allowed.
    pub message: String,
}

/// A service error on its way to the caller.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        ApiError(err)
    }
}

/// The HTTP status of each error kind.
pub(crate) fn status_of(kind: ErrorKind) -> StatusCode {
    StatusCode::from_u16(kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = self.0.kind();
        // Logged once, here, inside the request's span (which carries the request ID), with
        // the source the crate boundary kept; callers only see the public message.
        match kind {
            ErrorKind::Internal => {
                tracing::error!(error = %self.0, source = ?std::error::Error::source(&self.0), "internal error");
            }
            ErrorKind::ProviderError | ErrorKind::Unavailable => {
                tracing::warn!(error = %self.0, source = ?std::error::Error::source(&self.0), "backend failure");
            }
            _ => {}
        }
        let body = ErrorBody {
            code: kind.code(),
            message: self.0.public_message(),
        };
        (status_of(kind), axum::Json(body)).into_response()
    }
}

/// The wire code of an HTTP status that did not come from a service error.
pub(crate) fn code_of_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "conflict",
        413 => "payload_too_large",
        429 => "resource_limit",
        503 => "unavailable",
        500..=599 => "internal",
        _ => "bad_request",
    }
}

/// Makes sure every error response is `{code, message}` JSON: errors raised by framework
/// extractors (a malformed path segment, a missing upgrade) arrive as plain text and are
/// wrapped here, keeping their status and text.
pub(crate) async fn json_errors(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(request).await;
    if response
        .extensions()
        .get::<crate::routes::preview::Proxied>()
        .is_some()
    {
        // A sandbox's own answer, passed on as it is.
        return response;
    }
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_lowercase()
    } else {
        text
    };
    let mut wrapped = (
        status,
        axum::Json(ErrorBody {
            code: code_of_status(status),
            message,
        }),
    )
        .into_response();
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            wrapped.headers_mut().insert(name.clone(), value.clone());
        }
    }
    wrapped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_kinds_to_statuses() {
        assert_eq!(
            status_of(ErrorKind::ResourceLimit),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            status_of(ErrorKind::ProviderError),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(status_of(ErrorKind::LeaseConflict), StatusCode::CONFLICT);
        assert_eq!(
            status_of(ErrorKind::Unavailable),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
