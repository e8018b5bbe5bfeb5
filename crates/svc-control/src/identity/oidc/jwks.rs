//! The identity provider's published keys, fetched over HTTPS (plain HTTP only on loopback),
//! cached, and fetched again only when a token names an unknown `kid` (at most once per
//! [`MIN_REFRESH_INTERVAL`]) or by the slow background refresh: never on the hot path otherwise.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use svc_core::Timestamp;

use super::keys::{signing_keys, JwkSet, KeyEntry};

/// Fetches closer together than this are not made (decisions §5).
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// How often the background loop refreshes the keys, so removed keys stop verifying.
pub const BACKGROUND_REFRESH_INTERVAL: Duration = Duration::from_secs(15 * 60);
/// One fetch's deadline.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// The keys behind `auth.oidc_jwks_url`.
pub struct Jwks {
    url: String,
    client: reqwest::Client,
    keys: RwLock<Arc<Vec<KeyEntry>>>,
    /// When the last fetch was attempted (by the control plane's clock); also serialises
    /// fetches (single flight).
    last_attempt: tokio::sync::Mutex<Option<Timestamp>>,
    fetches: std::sync::atomic::AtomicU64,
}

impl Jwks {
    /// A source with no keys yet; nothing is fetched until [`Jwks::refresh`].
    pub fn new(url: String) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Jwks {
            url,
            client,
            keys: RwLock::new(Arc::new(Vec::new())),
            last_attempt: tokio::sync::Mutex::new(None),
            fetches: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The cached keys.
    pub fn keys(&self) -> Arc<Vec<KeyEntry>> {
        Arc::clone(
            &self
                .keys
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// How many fetches were attempted (diagnostics and tests).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Fetches the keys unless a fetch was attempted less than [`MIN_REFRESH_INTERVAL`] ago.
    /// Callers arriving during a fetch wait for it rather than starting another. A failed
    /// fetch keeps the keys held before.
    pub async fn refresh(&self, now: Timestamp) {
        let mut last = self.last_attempt.lock().await;
        if last.is_some_and(|at| svc_core::clock::elapsed_between(at, now) < MIN_REFRESH_INTERVAL) {
            return;
        }
        *last = Some(now);
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.fetch().await {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "fetched the OIDC signing keys");
                *self
                    .keys
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(keys);
            }
            Err(reason) => {
                tracing::warn!(url = %self.url, %reason, "cannot fetch the OIDC signing keys");
            }
        }
    }

    async fn fetch(&self) -> Result<Vec<KeyEntry>, String> {
        let mut response = self
            .client
            .get(&self.url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("the server answered {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("reading the answer failed: {e}"))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(format!(
                    "the document is larger than {MAX_JWKS_BYTES} bytes"
                ));
            }
            body.extend_from_slice(&chunk);
        }
        let set: JwkSet =
            serde_json::from_slice(&body).map_err(|e| format!("not a JWKS document: {e}"))?;
        let keys = signing_keys(&set);
        if keys.is_empty() {
            return Err("the document holds no usable signing key".to_owned());
        }
        Ok(keys)
    }
}
