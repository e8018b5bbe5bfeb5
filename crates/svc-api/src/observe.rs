//! Request observation: a request ID on every request (kept from `X-Request-ID` or generated,
//! echoed in the response), a tracing span carrying it, and one log line per request with
//! method, path, status and latency.

use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use rand::Rng;
use tracing::Instrument;

/// The request ID header.
pub(crate) static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn request_id(request: &Request) -> HeaderValue {
    request
        .headers()
        .get(&REQUEST_ID)
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .cloned()
        .unwrap_or_else(|| {
            let bytes: [u8; 8] = rand::rng().random();
            // Hex is always a valid header value.
            HeaderValue::from_str(&hex::encode(bytes)).unwrap_or(HeaderValue::from_static("0"))
        })
}

/// The middleware.
pub(crate) async fn observe(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(&request);
    let method = request.method().clone();
    // The path only: query strings may carry file paths or tokens.
    let path = request.uri().path().to_owned();
    let span = tracing::info_span!("request", request_id = id.to_str().unwrap_or(""));
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    span.in_scope(|| {
        if status >= 500 {
            tracing::warn!(%method, path, status, latency_ms, "request");
        } else {
            tracing::info!(%method, path, status, latency_ms, "request");
        }
    });
    response.headers_mut().insert(REQUEST_ID.clone(), id);
    response
}
