//! `rate_limit.*`: the per-caller token bucket (decisions §2, §10): `requests_per_minute` refill,
//! `burst` capacity, buckets keyed by owner, API key or client IP.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

/// What identifies a rate-limit bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitKeyBy {
    /// The resolved owner of the request.
    #[default]
    Owner,
    /// The presented API key.
    ApiKey,
    /// The client IP address.
    Ip,
}

impl RateLimitKeyBy {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RateLimitKeyBy::Owner => "owner",
            RateLimitKeyBy::ApiKey => "api_key",
            RateLimitKeyBy::Ip => "ip",
        }
    }
}

impl fmt::Display for RateLimitKeyBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `rate_limit.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Off by default.
    pub enabled: bool,
    /// Sustained rate per bucket.
    pub requests_per_minute: u32,
    /// Bucket capacity.
    pub burst: u32,
    /// `owner`, `api_key` or `ip`.
    pub key_by: RateLimitKeyBy,
    /// Idle buckets older than this are evicted.
    pub bucket_ttl: GoDuration,
    /// How often idle buckets are evicted.
    pub cleanup_interval: GoDuration,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            enabled: false,
            requests_per_minute: 120,
            burst: 60,
            key_by: RateLimitKeyBy::Owner,
            bucket_ttl: GoDuration::from_secs(15 * 60),
            cleanup_interval: GoDuration::from_secs(60),
        }
    }
}
