//! The API rate limit in front of every `/api/v1` route except the probes (decisions §10): a
//! token from the caller's bucket, or 429 `resource_limit` with `Retry-After`. Every limited
//! route's response carries `X-RateLimit-Limit` and `X-RateLimit-Remaining`. It runs before
//! authentication, so a flood of bad credentials is limited too.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use svc_control::ratelimit::{RateKey, RateVerdict};
use svc_control::{ControlPlane, Offered};
use svc_core::error::LimitReason;
use svc_core::{Error, OwnerId};

use crate::auth::USER_ID_HEADER;
use crate::permissions::PROBES;
use crate::ApiError;

static LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static RETRY_AFTER: HeaderName = HeaderName::from_static("retry-after");

/// The middleware.
pub(crate) async fn limit(
    State(plane): State<ControlPlane>,
    request: Request,
    next: Next,
) -> Response {
    let limiter = plane.rate_limiter();
    let path = request.uri().path();
    if !limiter.enabled() || !path.starts_with("/api/v1") || PROBES.contains(&path) {
        return next.run(request).await;
    }
    let headers = request.headers();
    let offered = Offered::from_headers(headers);
    // Only a valid owner ID selects an owner bucket; an invalid one is refused by
    // authentication later and counts against the key or address meanwhile.
    let owner = text(headers, &USER_ID_HEADER).and_then(|v| OwnerId::parse(v).ok());
    let key = RateKey {
        owner: owner.as_ref().map(OwnerId::as_str),
        // A bearer token stands in for the key: each token gets its own bucket.
        api_key: offered.rate_key(),
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
        refused(&verdict)
    };
    let headers = response.headers_mut();
    headers.insert(LIMIT.clone(), HeaderValue::from(verdict.limit));
    headers.insert(REMAINING.clone(), HeaderValue::from(verdict.remaining));
    response
}

fn text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn refused(verdict: &RateVerdict) -> Response {
    let error = Error::ResourceLimit {
        reason: LimitReason::RateLimit,
        message: verdict.refusal_message(),
    };
    let mut response = ApiError(error).into_response();
    response.headers_mut().insert(
        RETRY_AFTER.clone(),
        HeaderValue::from(verdict.retry_after_secs),
    );
    response
}
