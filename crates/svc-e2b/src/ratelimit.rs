//! svc's rate limit (decisions §10) on the E2B listener: the same buckets as the API (by the
//! API key, else the sandbox access token or a bearer token, else the client address), refused as E2B's 429
//! with `Retry-After`, which both SDKs wait out and retry.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use svc_control::ratelimit::RateKey;
use svc_control::Offered;

use crate::caller::E2b;
use crate::error::E2bError;

static LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");

/// The middleware (every route but `/health`).
pub(crate) async fn limit(State(e2b): State<E2b>, request: Request, next: Next) -> Response {
    let limiter = e2b.plane.rate_limiter();
    if !limiter.enabled() || request.uri().path() == "/health" {
        return next.run(request).await;
    }
    let headers = request.headers();
    // The credential the request authenticates with, as the API keys its buckets: the API key,
    // else the sandbox access token, else a bearer token (each its own bucket).
    let offered = Offered::from_headers(headers);
    let credential = offered.rate_key();
    let key = RateKey {
        owner: None,
        api_key: credential,
        ip: request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip()),
    };
    let Some(verdict) = limiter.check(key, limiter.now()) else {
        return next.run(request).await;
    };
    let mut response = if verdict.allowed {
        next.run(request).await
    } else {
        let message = verdict.refusal_message();
        let mut refused = E2bError::new(StatusCode::TOO_MANY_REQUESTS, message).into_response();
        refused.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from(verdict.retry_after_secs),
        );
        refused
    };
    let headers = response.headers_mut();
    headers.insert(LIMIT.clone(), HeaderValue::from(verdict.limit));
    headers.insert(REMAINING.clone(), HeaderValue::from(verdict.remaining));
    response
}
