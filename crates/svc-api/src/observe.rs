//! Request observation: a request ID on every request (kept from `X-Request-ID` or generated,
//! echoed in the response), a tracing span carrying it, one log line per request with method,
//! path, status and latency, and the per-route request metrics of the scrape.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use rand::Rng;
use svc_control::ControlPlane;
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

/// Path parameters that name people: logged as their placeholder (owner IDs are redacted from
/// logs, decisions §13), while sandbox IDs and the like stay for tracing a request.
const PERSONAL_PARAMETERS: [&str; 2] = ["{ownerID}", "{subject}"];

/// The path as logged: `path`, with the segments that fill a personal parameter of its route
/// replaced by the parameter's name.
fn loggable(path: &str, route: Option<&MatchedPath>) -> String {
    let Some(route) = route.filter(|r| PERSONAL_PARAMETERS.iter().any(|p| r.as_str().contains(p)))
    else {
        return path.to_owned();
    };
    path.split('/')
        .zip(route.as_str().split('/'))
        .map(|(segment, pattern)| {
            if PERSONAL_PARAMETERS.contains(&pattern) {
                pattern
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The middleware.
pub(crate) async fn observe(
    State(plane): State<ControlPlane>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let id = request_id(&request);
    let method = request.method().clone();
    // The path only: query strings may carry file paths or tokens.
    let path = request.uri().path().to_owned();
    let span = tracing::info_span!("request", request_id = id.to_str().unwrap_or(""));
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    let elapsed = started.elapsed().as_secs_f64();
    let latency_ms = elapsed * 1000.0;
    // Set by the authentication layer for every routed API request.
    let matched = response.extensions().get::<MatchedPath>();
    let route = matched.map_or("unmatched", MatchedPath::as_str);
    let path = loggable(&path, matched);
    plane
        .http_metrics()
        .observe(route, method.as_str(), status, elapsed);
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
