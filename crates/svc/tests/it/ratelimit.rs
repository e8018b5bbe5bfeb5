//! API rate limiting (decisions §10): token buckets per owner, API key or client address, the
//! `X-RateLimit-*` headers, `Retry-After` on 429, probes exempt.

use std::time::Duration;

use reqwest::Method;
use svc_core::config::{RateLimitKeyBy, SpawnOverflow};
use svc_core::GoDuration;

use crate::harness::{wait_for, Reply, TestServer};

async fn limited(rpm: u32, burst: u32, key_by: RateLimitKeyBy) -> TestServer {
    TestServer::start_with(|c| {
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_minute = rpm;
        c.rate_limit.burst = burst;
        c.rate_limit.key_by = key_by;
        // Unrelated to the limiter; keeps the configuration realistic.
        c.defaults.spawn_overflow = SpawnOverflow::Reject;
    })
    .await
}

fn header(reply: &Reply, name: &str) -> Option<String> {
    reply
        .headers
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

async fn as_owner(server: &TestServer, owner: &str) -> Reply {
    server
        .call_as(&[("X-User-ID", owner)], Method::GET, "/sandboxes", None)
        .await
}

#[tokio::test]
async fn a_bucket_runs_dry_answers_429_with_retry_after_and_refills() {
    let server = limited(60, 3, RateLimitKeyBy::Owner).await;
    for remaining in ["2", "1", "0"] {
        let reply = as_owner(&server, "alice").await;
        assert_eq!(reply.status, 200);
        assert_eq!(header(&reply, "x-ratelimit-limit").as_deref(), Some("60"));
        assert_eq!(
            header(&reply, "x-ratelimit-remaining").as_deref(),
            Some(remaining)
        );
        assert_eq!(header(&reply, "retry-after"), None);
    }
    let refused = as_owner(&server, "alice").await;
    let message = refused.assert_error(429, "resource_limit");
    assert!(message.contains("rate limit"), "{message}");
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("1"));
    assert_eq!(header(&refused, "x-ratelimit-limit").as_deref(), Some("60"));
    assert_eq!(
        header(&refused, "x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    // Another owner has a bucket of its own.
    assert_eq!(as_owner(&server, "bob").await.status, 200);
    // Probes are never limited and carry no rate-limit headers.
    for probe in ["/health", "/live", "/ready"] {
        for _ in 0..5 {
            let reply = server
                .call_as(&[("X-User-ID", "alice")], Method::GET, probe, None)
                .await;
            assert_eq!(reply.status, 200, "{probe}");
            assert_eq!(header(&reply, "x-ratelimit-limit"), None, "{probe}");
        }
    }
    // 60 a minute: one token a second of the server's clock.
    server.clock.advance(Duration::from_millis(1100));
    let refilled = as_owner(&server, "alice").await;
    assert_eq!(refilled.status, 200);
    assert_eq!(as_owner(&server, "alice").await.status, 429);
    // Every /api/v1 route counts, unknown ones and errors included.
    let unknown = server
        .call_as(&[("X-User-ID", "carol")], Method::GET, "/nope", None)
        .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(
        header(&unknown, "x-ratelimit-remaining").as_deref(),
        Some("2")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn owner_mode_falls_back_to_the_api_key_then_the_address() {
    let server = limited(60, 1, RateLimitKeyBy::Owner).await;
    // No owner, no key: the client address (every request here comes from 127.0.0.1).
    assert_eq!(server.get("/sandboxes").await.status, 200);
    assert_eq!(server.get("/sandboxes").await.status, 429);
    // A key is its own bucket, apart from the address.
    let with_key = |key: &'static str| {
        let server = &server;
        async move {
            server
                .call_as(&[("X-API-Key", key)], Method::GET, "/templates", None)
                .await
        }
    };
    assert_eq!(with_key("k1").await.status, 200);
    assert_eq!(with_key("k1").await.status, 429);
    assert_eq!(with_key("k2").await.status, 200);
    // An owner is its own bucket too, even next to a spent key.
    let reply = server
        .call_as(
            &[("X-API-Key", "k1"), ("X-User-ID", "dora")],
            Method::GET,
            "/templates",
            None,
        )
        .await;
    assert_eq!(reply.status, 200);
    server.shutdown().await;

    let server = limited(60, 1, RateLimitKeyBy::Ip).await;
    assert_eq!(as_owner(&server, "erin").await.status, 200);
    assert_eq!(
        as_owner(&server, "frank").await.status,
        429,
        "ip mode: one bucket per address, whoever the owner"
    );
    server.shutdown().await;

    let server = limited(60, 1, RateLimitKeyBy::ApiKey).await;
    assert_eq!(as_owner(&server, "erin").await.status, 200);
    assert_eq!(
        as_owner(&server, "frank").await.status,
        429,
        "api_key mode without a key: the address"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn idle_buckets_are_evicted_by_the_cleanup_loop() {
    let server = TestServer::start_with(|c| {
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_minute = 1;
        c.rate_limit.burst = 1;
        c.rate_limit.bucket_ttl = GoDuration::from_millis(200);
        c.rate_limit.cleanup_interval = GoDuration::from_millis(50);
    })
    .await;
    assert_eq!(as_owner(&server, "gina").await.status, 200);
    assert_eq!(as_owner(&server, "gina").await.status, 429);
    // At one token a minute the bucket cannot have refilled; only eviction empties it.
    server.clock.advance(Duration::from_millis(500));
    wait_for(
        "the cleanup loop to evict the idle bucket",
        Duration::from_secs(60),
        || async { server.plane().rate_limiter().stats().evicted_total >= 1 },
    )
    .await;
    assert_eq!(as_owner(&server, "gina").await.status, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn rate_limiting_is_off_by_default() {
    let server = TestServer::start().await;
    for _ in 0..100 {
        let reply = server.get("/sandboxes").await;
        assert_eq!(reply.status, 200);
        assert_eq!(header(&reply, "x-ratelimit-limit"), None);
    }
    server.shutdown().await;
}
