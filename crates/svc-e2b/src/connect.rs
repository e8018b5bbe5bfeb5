//! connect-rpc as the E2B SDKs speak it (decisions §20): the JSON codec, no compression.
//! A unary call is a JSON body answered with JSON (an error: its HTTP status and
//! `{"code": "<connect code>", "message"}`). A streaming call sends 5-byte envelopes (a flag
//! byte, a big-endian length, the JSON) and is answered with 200 and envelopes, always closed by
//! an end-stream envelope (flag 2) carrying the error if there was one: the SDKs read errors of
//! streams only from there.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use svc_core::error::ErrorKind;

/// The content type of streaming calls; the Python SDK accepts exactly this.
const STREAM_CONTENT_TYPE: &str = "application/connect+json";
/// Envelope flag: the last envelope, with the outcome.
const END_STREAM: u8 = 0x02;
/// Envelope flag: a compressed payload (never sent by the SDKs, refused).
const COMPRESSED: u8 = 0x01;
/// The largest request message accepted.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// A connect-rpc error.
#[derive(Debug)]
pub(crate) struct RpcError {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        RpcError::new("invalid_argument", message)
    }

    fn status(&self) -> StatusCode {
        match self.code {
            "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn body(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code, "message": self.message})
    }
}

impl From<svc_core::Error> for RpcError {
    fn from(err: svc_core::Error) -> Self {
        use svc_core::error::Resource;
        // The SDKs tell a sandbox that is gone by `unavailable` with "was not found" (what
        // E2B's own proxy answers), and raise their "sandbox not running" error for it.
        if matches!(
            err,
            svc_core::Error::NotFound {
                resource: Resource::Sandbox,
                ..
            } | svc_core::Error::SandboxNotRunning { .. }
        ) {
            let message = format!("The sandbox was not found: {}", err.public_message());
            return RpcError::new("unavailable", message);
        }
        let code = match err.kind() {
            ErrorKind::BadRequest => "invalid_argument",
            ErrorKind::Unauthorized => "unauthenticated",
            ErrorKind::Forbidden | ErrorKind::PolicyDenied => "permission_denied",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "unimplemented",
            ErrorKind::Conflict | ErrorKind::LeaseConflict => "failed_precondition",
            ErrorKind::PayloadTooLarge | ErrorKind::ResourceLimit => "resource_exhausted",
            ErrorKind::Unavailable | ErrorKind::BadGateway => "unavailable",
            ErrorKind::ProviderError | ErrorKind::Internal => "internal",
        };
        RpcError::new(code, err.public_message())
    }
}

impl IntoResponse for RpcError {
    fn into_response(self) -> Response {
        (self.status(), axum::Json(self.body())).into_response()
    }
}

/// A unary request's message (an empty body is the empty message).
pub(crate) fn request<T: DeserializeOwned>(body: &[u8]) -> Result<T, RpcError> {
    let body = if body.is_empty() {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| RpcError::invalid(format!("malformed request: {e}")))
}

/// A unary call: its body read (up to the largest message), `handle`d, and answered with the
/// reply or the error.
pub(crate) async fn unary<F, Fut>(body: Body, handle: F) -> Response
where
    F: FnOnce(Bytes) -> Fut,
    Fut: std::future::Future<Output = Result<serde_json::Value, RpcError>>,
{
    let body = match axum::body::to_bytes(body, MAX_MESSAGE).await {
        Ok(body) => body,
        Err(err) => return RpcError::invalid(err.to_string()).into_response(),
    };
    match handle(body).await {
        Ok(reply) => axum::Json(reply).into_response(),
        Err(err) => err.into_response(),
    }
}

/// One envelope.
fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(5 + payload.len());
    framed.push(flags);
    framed.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(payload);
    Bytes::from(framed)
}

/// The envelopes in `buffer` that are complete, taken out of it.
fn take_envelopes(buffer: &mut Vec<u8>) -> Result<Vec<Vec<u8>>, RpcError> {
    let mut messages = Vec::new();
    while buffer.len() >= 5 {
        let flags = buffer[0];
        let length = u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]) as usize;
        if flags & COMPRESSED != 0 {
            return Err(RpcError::new(
                "internal",
                "compressed messages are not supported",
            ));
        }
        if length > MAX_MESSAGE {
            return Err(RpcError::new("resource_exhausted", "message too large"));
        }
        if buffer.len() < 5 + length {
            break;
        }
        let payload = buffer[5..5 + length].to_vec();
        buffer.drain(..5 + length);
        if flags & END_STREAM == 0 {
            messages.push(payload);
        }
    }
    Ok(messages)
}

/// The messages of a streaming request, as they arrive.
pub(crate) fn messages<T: DeserializeOwned + Send + 'static>(
    body: Body,
) -> impl Stream<Item = Result<T, RpcError>> + Send + 'static {
    let state = (
        body.into_data_stream(),
        Vec::new(),
        std::collections::VecDeque::<Vec<u8>>::new(),
        false,
    );
    futures::stream::unfold(
        state,
        |(mut body, mut buffer, mut ready, mut done)| async move {
            loop {
                if let Some(payload) = ready.pop_front() {
                    let message: Result<T, RpcError> = serde_json::from_slice(&payload)
                        .map_err(|e| RpcError::invalid(format!("malformed message: {e}")));
                    return Some((message, (body, buffer, ready, done)));
                }
                if done {
                    return None;
                }
                match body.next().await {
                    Some(Ok(chunk)) => {
                        buffer.extend_from_slice(&chunk);
                        match take_envelopes(&mut buffer) {
                            Ok(found) => ready.extend(found),
                            Err(err) => {
                                done = true;
                                return Some((Err(err), (body, buffer, ready, done)));
                            }
                        }
                    }
                    Some(Err(err)) => {
                        done = true;
                        let err = RpcError::new("canceled", format!("request body: {err}"));
                        return Some((Err(err), (body, buffer, ready, done)));
                    }
                    None => done = true,
                }
            }
        },
    )
}

/// The single message of a server-streaming call's request.
pub(crate) async fn first_message<T: DeserializeOwned + Send + 'static>(
    body: Body,
) -> Result<T, RpcError> {
    let mut messages = std::pin::pin!(messages::<T>(body));
    messages
        .next()
        .await
        .unwrap_or_else(|| Err(RpcError::invalid("the request has no message")))
}

fn stream_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(STREAM_CONTENT_TYPE),
    );
    headers
}

/// A streaming answer: each message enveloped, then the end-stream envelope (with the error
/// that ended it, if one did).
pub(crate) fn stream<S, T>(messages: S) -> Response
where
    S: Stream<Item = Result<T, RpcError>> + Send + 'static,
    T: Serialize,
{
    let state = (Box::pin(messages), false);
    let body = futures::stream::unfold(state, |(mut messages, ended)| async move {
        if ended {
            return None;
        }
        let (frame, ended) = match messages.next().await {
            Some(Ok(message)) => match serde_json::to_vec(&message) {
                Ok(json) => (envelope(0, &json), false),
                Err(e) => (end(Some(&RpcError::new("internal", e.to_string()))), true),
            },
            Some(Err(err)) => (end(Some(&err)), true),
            None => (end(None), true),
        };
        Some((Ok::<_, std::convert::Infallible>(frame), (messages, ended)))
    });
    (StatusCode::OK, stream_headers(), Body::from_stream(body)).into_response()
}

/// A streaming call that failed before its first message.
pub(crate) fn stream_error(err: &RpcError) -> Response {
    (StatusCode::OK, stream_headers(), end(Some(err))).into_response()
}

fn end(err: Option<&RpcError>) -> Bytes {
    let payload = match err {
        Some(err) => serde_json::json!({"error": err.body()}),
        None => serde_json::json!({}),
    };
    envelope(END_STREAM, payload.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn envelopes_split_anywhere_and_end_streams_are_skipped() {
        let mut wire = envelope(0, br#"{"a":1}"#).to_vec();
        wire.extend_from_slice(&envelope(0, br#"{"a":2}"#));
        wire.extend_from_slice(&envelope(END_STREAM, b"{}"));
        let mut buffer = Vec::new();
        let mut found = Vec::new();
        for byte in wire {
            buffer.push(byte);
            found.extend(take_envelopes(&mut buffer).unwrap());
        }
        assert_eq!(found, vec![br#"{"a":1}"#.to_vec(), br#"{"a":2}"#.to_vec()]);
        assert!(buffer.is_empty());
        let mut compressed = envelope(COMPRESSED, b"x").to_vec();
        assert!(take_envelopes(&mut compressed).is_err());
    }

    #[test]
    fn service_errors_become_connect_codes() {
        let err = RpcError::from(svc_core::Error::not_found(
            svc_core::error::Resource::File,
            "/x",
        ));
        assert_eq!(err.code, "not_found");
        assert_eq!(err.status(), StatusCode::NOT_FOUND);
        assert_eq!(end(Some(&err))[0], END_STREAM);
        // A sandbox that is gone reads as E2B's own edge answers it.
        let gone = RpcError::from(svc_core::Error::not_found(
            svc_core::error::Resource::Sandbox,
            "sb-1",
        ));
        assert_eq!(gone.code, "unavailable");
        assert!(gone.message.contains("was not found"), "{}", gone.message);
    }
}
