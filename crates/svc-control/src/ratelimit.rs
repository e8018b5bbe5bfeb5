//! API rate limiting (interface Limits; decisions §10): one token bucket per caller key,
//! `burst` tokens deep, refilled at `requests_per_minute / 60` tokens a second. Keys are held
//! only as SHA-256 digests; a bucket idle for `bucket_ttl` is evicted by a cleanup loop.
//!
//! Why not `governor`: its keyed limiter evicts buckets when they have refilled, not after an
//! idle time, and counts the `Retry-After` wait differently; the bucket here is a few lines of
//! arithmetic, property-tested below.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};
use svc_core::clock::{Clock, Timestamp};
use svc_core::config::{RateLimitConfig, RateLimitKeyBy};
use svc_core::GoDuration;

/// Shards of the bucket map, so concurrent callers rarely wait on one lock.
const SHARDS: usize = 16;

type KeyDigest = [u8; 32];

/// What may identify a caller, as the request presented it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateKey<'a> {
    /// A valid `X-User-ID`.
    pub owner: Option<&'a str>,
    /// A non-empty `X-API-Key`, else a bearer token.
    pub api_key: Option<&'a str>,
    /// The client address.
    pub ip: Option<IpAddr>,
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateVerdict {
    /// True when the request may go ahead.
    pub allowed: bool,
    /// `requests_per_minute` (the `X-RateLimit-Limit` header).
    pub limit: u32,
    /// Whole tokens left (the `X-RateLimit-Remaining` header).
    pub remaining: u32,
    /// Whole seconds until a token is available, at least 1 (`Retry-After`); 0 when allowed.
    pub retry_after_secs: u64,
}

impl RateVerdict {
    /// What a refusal says, on every listener.
    pub fn refusal_message(&self) -> String {
        format!(
            "rate limit exceeded: {} requests per minute (rate_limit.requests_per_minute); retry in {}s",
            self.limit, self.retry_after_secs
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// The limiter; inert when `rate_limit.enabled` is false.
pub struct RateLimiter {
    config: RateLimitConfig,
    per_second: f64,
    shards: Vec<Mutex<HashMap<KeyDigest, Bucket>>>,
    allowed: AtomicU64,
    blocked: AtomicU64,
    evicted: AtomicU64,
    /// The server's clock and where it stood at `origin`: buckets count time by it, so a
    /// test's manual clock decides refills, not how fast a busy machine runs the test.
    clock: Option<(Arc<dyn Clock>, Timestamp)>,
    origin: Instant,
}

impl RateLimiter {
    /// A limiter for `config`.
    pub fn new(config: &RateLimitConfig) -> Self {
        RateLimiter {
            config: config.clone(),
            per_second: f64::from(config.requests_per_minute) / 60.0,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            allowed: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            clock: None,
            origin: Instant::now(),
        }
    }

    /// A limiter for `config` that counts time by `clock`.
    pub fn with_clock(config: &RateLimitConfig, clock: Arc<dyn Clock>) -> Self {
        let started = clock.now();
        RateLimiter {
            clock: Some((clock, started)),
            ..RateLimiter::new(config)
        }
    }

    /// Now, as the limiter counts time: by its clock when it has one. A clock that steps back
    /// stands still for the buckets (they never refill backwards).
    pub fn now(&self) -> Instant {
        match &self.clock {
            Some((clock, started)) => {
                self.origin + (clock.now() - *started).to_std().unwrap_or(Duration::ZERO)
            }
            None => Instant::now(),
        }
    }

    /// True when requests are limited at all.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The digest of the key `config.key_by` picks: the owner, else the API key, else the
    /// client IP (`owner` mode); the API key, else the IP (`api_key`); the IP (`ip`). Each kind
    /// is hashed with its own prefix, so an owner and a key with the same text never share a
    /// bucket. Callers with none of them share one bucket.
    fn digest(&self, key: RateKey<'_>) -> KeyDigest {
        let ip = key.ip.map(|ip| ip.to_string());
        let ip = ("ip", ip.as_deref().unwrap_or("unknown"));
        let (kind, value) = match self.config.key_by {
            RateLimitKeyBy::Owner => key
                .owner
                .map(|o| ("owner", o))
                .or(key.api_key.map(|k| ("api_key", k)))
                .unwrap_or(ip),
            RateLimitKeyBy::ApiKey => key.api_key.map(|k| ("api_key", k)).unwrap_or(ip),
            RateLimitKeyBy::Ip => ip,
        };
        let mut hasher = Sha256::new();
        hasher.update(kind.as_bytes());
        hasher.update([0]);
        hasher.update(value.as_bytes());
        hasher.finalize().into()
    }

    fn shard(&self, digest: &KeyDigest) -> MutexGuard<'_, HashMap<KeyDigest, Bucket>> {
        let index = usize::from(digest[0]) % self.shards.len();
        // A bucket is two numbers written together; a panic cannot leave one half-updated.
        self.shards[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a token from the caller's bucket at `now`; `None` when limiting is off.
    pub fn check(&self, key: RateKey<'_>, now: Instant) -> Option<RateVerdict> {
        if !self.config.enabled {
            return None;
        }
        let digest = self.digest(key);
        let burst = f64::from(self.config.burst);
        let verdict = {
            let mut shard = self.shard(&digest);
            let bucket = shard.entry(digest).or_insert(Bucket {
                tokens: burst,
                updated: now,
            });
            take(bucket, now, burst, self.per_second)
        };
        let counter = if verdict.0 {
            &self.allowed
        } else {
            &self.blocked
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Some(RateVerdict {
            allowed: verdict.0,
            limit: self.config.requests_per_minute,
            remaining: verdict.1,
            retry_after_secs: verdict.2,
        })
    }

    /// Drops buckets idle for `bucket_ttl` at `now`; returns how many.
    pub fn evict_idle(&self, now: Instant) -> usize {
        let ttl = self.config.bucket_ttl.as_std();
        let mut evicted = 0;
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            let before = shard.len();
            shard.retain(|_, b| now.saturating_duration_since(b.updated) < ttl);
            evicted += before - shard.len();
        }
        self.evicted.fetch_add(
            u64::try_from(evicted).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        evicted
    }

    /// Buckets held now.
    pub fn buckets(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Whether `key` has a bucket now.
    #[cfg(test)]
    fn has_bucket(&self, key: RateKey<'_>) -> bool {
        let digest = self.digest(key);
        self.shard(&digest).contains_key(&digest)
    }

    /// The `rate_limit` object of diagnostics and metrics: configuration and counters, never
    /// a key.
    pub fn stats(&self) -> RateLimitStats {
        RateLimitStats {
            enabled: self.config.enabled,
            key_by: self.config.key_by.as_str(),
            requests_per_minute: self.config.requests_per_minute,
            burst: self.config.burst,
            bucket_ttl: self.config.bucket_ttl,
            cleanup_interval: self.config.cleanup_interval,
            active_buckets: self.buckets(),
            allowed_total: self.allowed.load(Ordering::Relaxed),
            limited_total: self.blocked.load(Ordering::Relaxed),
            evicted_total: self.evicted.load(Ordering::Relaxed),
        }
    }
}

/// Refills `bucket` up to `now` and takes a token if there is one: (allowed, whole tokens
/// left, whole seconds until the next token when refused).
fn take(bucket: &mut Bucket, now: Instant, burst: f64, per_second: f64) -> (bool, u32, u64) {
    let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
    bucket.tokens = (bucket.tokens + elapsed * per_second).min(burst);
    bucket.updated = bucket.updated.max(now);
    if bucket.tokens >= 1.0 {
        bucket.tokens -= 1.0;
        (true, whole(bucket.tokens), 0)
    } else {
        let wait = (1.0 - bucket.tokens) / per_second;
        // Saturating float-to-int: a zero refill rate waits "forever".
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let secs = wait.ceil().max(1.0) as u64;
        (false, 0, secs)
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn whole(tokens: f64) -> u32 {
    tokens.floor().max(0.0) as u32
}

/// Starts the loop that evicts idle buckets every `cleanup_interval`.
pub(crate) async fn run_cleanup(
    limiter: Arc<RateLimiter>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let every = limiter
        .config
        .cleanup_interval
        .as_std()
        .max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {
                let evicted = limiter.evict_idle(limiter.now());
                if evicted > 0 {
                    tracing::debug!(evicted, "evicted idle rate-limit buckets");
                }
            }
        }
    }
}

/// The `rate_limit` object (diagnostics and JSON metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RateLimitStats {
    /// `rate_limit.enabled`.
    pub enabled: bool,
    /// `owner`, `api_key` or `ip`.
    pub key_by: &'static str,
    /// Refill per minute.
    pub requests_per_minute: u32,
    /// Bucket capacity.
    pub burst: u32,
    /// Idle time before a bucket is evicted.
    #[schema(value_type = String)]
    pub bucket_ttl: GoDuration,
    /// How often idle buckets are evicted.
    #[schema(value_type = String)]
    pub cleanup_interval: GoDuration,
    /// Buckets held now.
    pub active_buckets: usize,
    /// Requests let through.
    pub allowed_total: u64,
    /// Requests refused with 429.
    pub limited_total: u64,
    /// Buckets evicted for idleness.
    pub evicted_total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limiter(rpm: u32, burst: u32, key_by: RateLimitKeyBy) -> RateLimiter {
        RateLimiter::new(&RateLimitConfig {
            enabled: true,
            requests_per_minute: rpm,
            burst,
            key_by,
            bucket_ttl: GoDuration::from_secs(60),
            cleanup_interval: GoDuration::from_secs(1),
        })
    }

    fn owner(name: &str) -> RateKey<'_> {
        RateKey {
            owner: Some(name),
            ..RateKey::default()
        }
    }

    #[test]
    fn burst_then_refusal_then_refill() {
        let l = limiter(60, 3, RateLimitKeyBy::Owner);
        let t0 = Instant::now();
        let remaining: Vec<u32> = (0..3)
            .map(|_| l.check(owner("a"), t0).unwrap())
            .map(|v| {
                assert!(v.allowed);
                assert_eq!(v.limit, 60);
                v.remaining
            })
            .collect();
        assert_eq!(remaining, [2, 1, 0]);
        let refused = l.check(owner("a"), t0).unwrap();
        assert!(!refused.allowed);
        assert_eq!((refused.remaining, refused.retry_after_secs), (0, 1));
        assert!(
            l.check(owner("b"), t0).unwrap().allowed,
            "buckets are per key"
        );
        let later = t0 + Duration::from_secs(1);
        assert!(
            l.check(owner("a"), later).unwrap().allowed,
            "one token a second"
        );
        assert!(!l.check(owner("a"), later).unwrap().allowed);
        let stats = l.stats();
        assert_eq!((stats.allowed_total, stats.limited_total), (5, 2));
    }

    #[test]
    fn keys_fall_back_in_the_configured_order_and_are_kinds_apart() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let l = limiter(60, 1, RateLimitKeyBy::Owner);
        let t = Instant::now();
        let full = RateKey {
            owner: Some("x"),
            api_key: Some("x"),
            ip: Some(ip),
        };
        assert!(l.check(full, t).unwrap().allowed);
        assert!(!l.check(owner("x"), t).unwrap().allowed, "owner first");
        let by_key = RateKey {
            api_key: Some("x"),
            ip: Some(ip),
            ..RateKey::default()
        };
        assert!(
            l.check(by_key, t).unwrap().allowed,
            "an API key is not an owner"
        );
        let by_ip = RateKey {
            ip: Some(ip),
            ..RateKey::default()
        };
        assert!(l.check(by_ip, t).unwrap().allowed);
        assert!(!l.check(by_ip, t).unwrap().allowed);
        let l = limiter(60, 1, RateLimitKeyBy::Ip);
        assert!(l.check(full, t).unwrap().allowed);
        assert!(
            !l.check(by_ip, t).unwrap().allowed,
            "ip mode ignores the owner"
        );
    }

    #[test]
    fn idle_buckets_are_evicted_and_no_raw_key_is_kept() {
        let l = limiter(60, 5, RateLimitKeyBy::Owner);
        let t0 = Instant::now();
        l.check(owner("alice-secret-owner"), t0);
        l.check(owner("bob"), t0 + Duration::from_secs(30));
        assert_eq!(l.evict_idle(t0 + Duration::from_secs(59)), 0);
        assert_eq!(l.evict_idle(t0 + Duration::from_secs(60)), 1);
        assert!(!l.has_bucket(owner("alice-secret-owner")));
        assert!(l.has_bucket(owner("bob")));
        assert_eq!(l.stats().evicted_total, 1);
        // The map holds digests only: no key's text appears in its memory.
        let shards = format!("{:?}", l.shards);
        assert!(!shards.contains("bob") && !shards.contains("alice"));
        let stats = serde_json::to_string(&l.stats()).unwrap();
        assert!(!stats.contains("bob"));
    }

    #[test]
    fn disabled_limits_nothing() {
        let l = RateLimiter::new(&RateLimitConfig::default());
        assert_eq!(l.check(owner("a"), Instant::now()), None);
        assert_eq!(l.buckets(), 0);
    }

    proptest! {
        /// Over any request pattern a bucket lets through at most `burst + rate * elapsed`
        /// requests, and a refused caller that waits `Retry-After` gets through.
        #[test]
        fn never_more_than_burst_plus_refill(
            rpm in 1u32..600,
            burst in 1u32..50,
            gaps_ms in proptest::collection::vec(0u64..3000, 1..200),
        ) {
            let l = limiter(rpm, burst, RateLimitKeyBy::Owner);
            let t0 = Instant::now();
            let mut now = t0;
            let mut allowed = 0u64;
            for gap in gaps_ms {
                now += Duration::from_millis(gap);
                let v = l.check(owner("p"), now).unwrap();
                prop_assert!(v.remaining < burst);
                if v.allowed {
                    allowed += 1;
                } else {
                    prop_assert!(v.retry_after_secs >= 1);
                    let retry = now + Duration::from_secs(v.retry_after_secs);
                    let probe = limiter(rpm, burst, RateLimitKeyBy::Owner);
                    // Replaying the same bucket state: the wait is enough.
                    let mut bucket = *l.shard(&l.digest(owner("p"))).get(&l.digest(owner("p"))).unwrap();
                    prop_assert!(take(&mut bucket, retry, f64::from(burst), probe.per_second).0);
                }
                let elapsed = now.duration_since(t0).as_secs_f64();
                let ceiling = f64::from(burst) + elapsed * f64::from(rpm) / 60.0;
                #[allow(clippy::cast_precision_loss)]
                let allowed_f = allowed as f64;
                prop_assert!(allowed_f <= ceiling + 1e-9, "{allowed} > {ceiling}");
            }
        }
    }
}
