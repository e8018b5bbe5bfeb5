//! Extractors whose rejections are service errors: JSON bodies that name the offending field,
//! queries, and the caller.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use svc_control::{ControlPlane, Principal};
use svc_core::error::cut;
use svc_core::Error;

use crate::ApiError;

/// A JSON body. An empty body is read as `{}`, so routes whose body is optional accept none.
pub(crate) struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<ControlPlane> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &ControlPlane) -> Result<Self, Self::Rejection> {
        let limit = state.config().server.max_body_bytes;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Error::PayloadTooLarge { limit_bytes: limit }
            } else {
                Error::MalformedBody {
                    message: cut(&rejection.body_text()),
                }
            }
        })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        // Serde would read a JSON array into a struct positionally; bodies are objects only.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError(Error::MalformedBody {
                message: "invalid JSON: the body must be a JSON object".to_owned(),
            }));
        }
        let deserializer = &mut serde_json::Deserializer::from_slice(bytes);
        serde_path_to_error::deserialize(deserializer)
            .map(ApiJson)
            .map_err(|err| {
                let path = err.path().to_string();
                let inner = err.into_inner();
                // serde quotes the value it refused, which can be as long as the body.
                let message = if matches!(path.as_str(), "." | "?" | "") {
                    cut(&format!("invalid JSON: {inner}"))
                } else {
                    cut(&format!("field {path}: {inner}"))
                };
                ApiError(Error::MalformedBody { message })
            })
    }
}

/// A query string.
pub(crate) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            .map_err(|rejection| ApiError(Error::invalid("query", cut(&rejection.body_text()))))
    }
}

/// The authenticated caller, as the authentication middleware (`auth.rs`) left it.
pub(crate) struct Caller(pub Principal);

impl FromRequestParts<ControlPlane> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &ControlPlane,
    ) -> Result<Self, Self::Rejection> {
        // Taken, not cloned: one extractor per request wants it. A route outside the
        // middleware is a wiring bug: refuse rather than guess a caller.
        parts
            .extensions
            .remove::<Principal>()
            .map(Caller)
            .ok_or_else(|| {
                ApiError(Error::internal(
                    "identifying the caller",
                    std::io::Error::other("the request did not pass authentication"),
                ))
            })
    }
}
