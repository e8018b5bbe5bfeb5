//! Errors on the E2B listener, in E2B's REST shape: `{"code": <HTTP status>, "message": ...}`
//! (the SDKs parse both fields on every error status). connect-rpc errors are `connect.rs`'s.

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error answered in E2B's shape.
#[derive(Debug)]
pub(crate) struct E2bError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl E2bError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        E2bError {
            status,
            message: message.into(),
        }
    }

    /// A 400.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        E2bError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<svc_core::Error> for E2bError {
    fn from(err: svc_core::Error) -> Self {
        let status = StatusCode::from_u16(err.kind().http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        E2bError::new(status, err.public_message())
    }
}

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.status.as_u16(), "message": self.message});
        (self.status, Json(body)).into_response()
    }
}

/// Any route the E2B API does not have.
pub(crate) async fn not_found(uri: Uri) -> E2bError {
    E2bError::new(
        StatusCode::NOT_FOUND,
        format!("{} is not a route of svc's E2B API", uri.path()),
    )
}

impl E2bError {
    /// An error of an in-sandbox call: a sandbox that is gone or not running is what E2B's
    /// edge answers for it (502 "The sandbox was not found"), which the SDKs recognise.
    pub(crate) fn envd(err: svc_core::Error) -> Self {
        use svc_core::error::Resource;
        match &err {
            svc_core::Error::NotFound {
                resource: Resource::Sandbox,
                ..
            }
            | svc_core::Error::SandboxNotRunning { .. } => E2bError::new(
                StatusCode::BAD_GATEWAY,
                format!("The sandbox was not found: {}", err.public_message()),
            ),
            _ => E2bError::from(err),
        }
    }
}

/// A JSON body whose rejection is an E2B error (not axum's plain text).
pub(crate) struct E2bJson<T>(pub(crate) T);

impl<T, S> axum::extract::FromRequest<S> for E2bJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = E2bError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, E2bError> {
        let body = axum::body::Bytes::from_request(request, state)
            .await
            // Past `server.max_body_bytes`: 413, as on svc's own API.
            .map_err(|e| E2bError::new(e.status(), e.body_text()))?;
        // The SDKs send no body where every field is optional.
        let body: &[u8] = if body.is_empty() { b"{}" } else { &body };
        serde_json::from_slice(body)
            .map(E2bJson)
            .map_err(|e| E2bError::bad_request(format!("request body: {e}")))
    }
}

/// A query whose rejection is an E2B error.
pub(crate) struct E2bQuery<T>(pub(crate) T);

impl<T, S> axum::extract::FromRequestParts<S> for E2bQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = E2bError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, E2bError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(query)| E2bQuery(query))
            .map_err(|e| E2bError::bad_request(e.body_text()))
    }
}

/// A method the route does not have.
pub(crate) async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> E2bError {
    E2bError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}
