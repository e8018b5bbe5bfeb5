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
    match kind {
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden | ErrorKind::PolicyDenied => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::Conflict | ErrorKind::LeaseConflict => StatusCode::CONFLICT,
        ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::ResourceLimit => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::ProviderError | ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = self.0.kind();
        if kind == ErrorKind::Internal {
            // Logged once, here, inside the request's span (which carries the request ID).
            tracing::error!(error = %self.0, source = ?std::error::Error::source(&self.0), "internal error");
        }
        let body = ErrorBody {
            code: kind.code(),
            message: self.0.public_message(),
        };
        (status_of(kind), axum::Json(body)).into_response()
    }
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
