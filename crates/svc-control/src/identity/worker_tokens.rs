//! Worker authentication (interface Authentication 10; decisions §11): `X-Worker-ID` must name
//! the worker in the path and `X-Worker-Token` must be one of a signed short-lived token
//! (HS256 JWT with `auth.worker_signing_key`: `sub` the worker, `scope` space-separated
//! `worker:*` scopes, `iat`, `exp`, `jti`, not revoked), the worker's static token
//! (`auth.worker_tokens.<id>`) or the shared staging token (`auth.worker_token`). Static and
//! shared tokens carry every scope. Every refusal is 401 and names no secret.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use svc_core::config::{AuthConfig, MAX_WORKER_TOKEN_TTL};
use svc_core::{Error, GoDuration, Timestamp};

use super::api_keys::{digest, same, KeyDigest};

/// Heartbeats.
pub const SCOPE_HEARTBEAT: &str = "worker:heartbeat";
/// Lease renewal.
pub const SCOPE_LEASE: &str = "worker:lease";

/// The claims of a signed worker token.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    scope: String,
    iat: i64,
    exp: i64,
    jti: String,
}

/// A minted token (`POST /admin/worker-tokens`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct WorkerToken {
    /// The token, for `X-Worker-Token`.
    pub token: String,
    /// Its `jti` (for `auth.worker_revoked_token_ids`).
    pub token_id: String,
    /// The worker it is for.
    pub worker_id: String,
    /// What it may do.
    pub scopes: Vec<String>,
    /// When it stops working.
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
}

/// `POST /admin/worker-tokens` body.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct WorkerTokenRequest {
    /// The worker.
    pub worker_id: String,
    /// Scopes, each beginning `worker:`; default `worker:heartbeat` and `worker:lease`.
    pub scopes: Option<Vec<String>>,
    /// Lifetime; default `auth.worker_token_ttl`, at most `24h`.
    #[schema(value_type = Option<String>, example = "15m")]
    pub ttl: Option<GoDuration>,
}

/// The configured worker credentials.
pub struct WorkerTokens {
    shared: Option<KeyDigest>,
    per_worker: BTreeMap<String, KeyDigest>,
    signing: Option<(EncodingKey, DecodingKey)>,
    revoked: HashSet<String>,
    default_ttl: GoDuration,
}

fn refused(message: &str) -> Error {
    Error::Unauthorized {
        message: message.to_owned(),
    }
}

impl WorkerTokens {
    /// From `auth.worker_*`; empty secrets are not configured.
    pub fn new(auth: &AuthConfig) -> Self {
        let key = auth.worker_signing_key.expose().as_bytes();
        WorkerTokens {
            shared: (!auth.worker_token.is_empty()).then(|| digest(auth.worker_token.expose())),
            per_worker: auth
                .worker_tokens
                .iter()
                .filter(|(_, t)| !t.is_empty())
                .map(|(id, t)| (id.clone(), digest(t.expose())))
                .collect(),
            signing: (!key.is_empty())
                .then(|| (EncodingKey::from_secret(key), DecodingKey::from_secret(key))),
            revoked: auth.worker_revoked_token_ids.iter().cloned().collect(),
            default_ttl: auth.worker_token_ttl,
        }
    }

    /// Checks a worker request: `header_worker` (`X-Worker-ID`) must be `path_worker`, and
    /// `token` valid for it with `scope` at `now`.
    pub fn verify(
        &self,
        path_worker: &str,
        header_worker: Option<&str>,
        token: Option<&str>,
        scope: &str,
        now: Timestamp,
    ) -> Result<(), Error> {
        match header_worker {
            None => return Err(refused("X-Worker-ID is required on worker routes")),
            Some(id) if id != path_worker => {
                return Err(refused("X-Worker-ID does not match the worker in the path"))
            }
            Some(_) => {}
        }
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(refused("X-Worker-Token is required on worker routes"));
        };
        let presented = digest(token);
        // Both static comparisons always run, whichever matches.
        let static_match = self
            .per_worker
            .get(path_worker)
            .is_some_and(|k| same(k, &presented));
        let shared_match = self.shared.as_ref().is_some_and(|k| same(k, &presented));
        if static_match || shared_match {
            return Ok(());
        }
        self.verify_signed(path_worker, token, scope, now)
    }

    fn verify_signed(
        &self,
        worker: &str,
        token: &str,
        scope: &str,
        now: Timestamp,
    ) -> Result<(), Error> {
        const INVALID: &str = "X-Worker-Token is not valid for this worker";
        let Some((_, decoding)) = &self.signing else {
            return Err(refused(INVALID));
        };
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked below against the service clock, not the library's.
        validation.validate_exp = false;
        validation.required_spec_claims = ["exp", "sub"].into_iter().map(str::to_owned).collect();
        let claims = jsonwebtoken::decode::<Claims>(token, decoding, &validation)
            .map_err(|_| refused(INVALID))?
            .claims;
        if claims.sub != worker {
            return Err(refused(INVALID));
        }
        if claims.exp <= now.timestamp() {
            return Err(refused("X-Worker-Token has expired"));
        }
        if self.revoked.contains(&claims.jti) {
            return Err(refused("X-Worker-Token has been revoked"));
        }
        if !claims.scope.split(' ').any(|s| s == scope) {
            return Err(refused(&format!("X-Worker-Token lacks the scope {scope}")));
        }
        Ok(())
    }

    /// Mints a signed token (decisions §11): 400 for a scope not beginning `worker:` or a TTL
    /// over 24h, 503 without `auth.worker_signing_key`.
    pub fn mint(&self, request: &WorkerTokenRequest, now: Timestamp) -> Result<WorkerToken, Error> {
        crate::workers::check_worker_id(&request.worker_id)
            .map_err(|_| Error::invalid("worker_id", "must be a worker ID (1 to 128 characters, no whitespace, control characters or path separators)"))?;
        let scopes = request
            .scopes
            .clone()
            .unwrap_or_else(|| vec![SCOPE_HEARTBEAT.to_owned(), SCOPE_LEASE.to_owned()]);
        if scopes.is_empty() {
            return Err(Error::invalid("scopes", "must name at least one scope"));
        }
        if let Some(bad) = scopes
            .iter()
            .find(|s| !s.starts_with("worker:") || s.contains(' '))
        {
            return Err(Error::invalid(
                "scopes",
                format!(
                    "{} is not a worker scope (each must begin with worker:)",
                    svc_core::error::echo(bad)
                ),
            ));
        }
        let ttl = request.ttl.unwrap_or(self.default_ttl);
        if ttl.is_zero() || ttl > MAX_WORKER_TOKEN_TTL {
            return Err(Error::invalid(
                "ttl",
                format!("must be longer than 0s and at most {MAX_WORKER_TOKEN_TTL}, got {ttl}"),
            ));
        }
        let Some((encoding, _)) = &self.signing else {
            return Err(Error::NotConfigured {
                what: "signing worker tokens".to_owned(),
                key: "auth.worker_signing_key",
            });
        };
        let expires_at = svc_core::clock::add_duration(now, round_up_to_seconds(ttl.as_std()));
        let token_id = hex::encode(rand::random::<[u8; 16]>());
        let claims = Claims {
            sub: request.worker_id.clone(),
            scope: scopes.join(" "),
            iat: now.timestamp(),
            exp: expires_at.timestamp(),
            jti: token_id.clone(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, encoding)
            .map_err(|e| Error::internal("signing a worker token", e))?;
        Ok(WorkerToken {
            token,
            token_id,
            worker_id: request.worker_id.clone(),
            scopes,
            expires_at: chrono::DateTime::from_timestamp(expires_at.timestamp(), 0)
                .unwrap_or(expires_at),
        })
    }
}

/// JWT times are whole seconds.
fn round_up_to_seconds(d: Duration) -> Duration {
    if d.subsec_nanos() == 0 {
        d
    } else {
        Duration::from_secs(d.as_secs() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_core::config::Secret;

    fn tokens(revoked: &[&str]) -> WorkerTokens {
        WorkerTokens::new(&AuthConfig {
            worker_signing_key: Secret::new("k".repeat(32)),
            worker_token: Secret::new("shared-token"),
            worker_tokens: [("w1".to_owned(), Secret::new("static-w1"))].into(),
            worker_revoked_token_ids: revoked.iter().map(|s| (*s).to_owned()).collect(),
            ..AuthConfig::default()
        })
    }

    fn request(worker: &str, scopes: Option<&[&str]>, ttl: Option<u64>) -> WorkerTokenRequest {
        WorkerTokenRequest {
            worker_id: worker.to_owned(),
            scopes: scopes.map(|s| s.iter().map(|x| (*x).to_owned()).collect()),
            ttl: ttl.map(GoDuration::from_secs),
        }
    }

    #[test]
    fn signed_tokens_verify_only_for_their_worker_scope_and_lifetime() {
        let t = tokens(&[]);
        let now = svc_core::Clock::now(&svc_core::clock::SystemClock);
        let minted = t.mint(&request("w2", None, Some(60)), now).unwrap();
        assert_eq!(minted.scopes, [SCOPE_HEARTBEAT, SCOPE_LEASE]);
        let ok = |worker: &str, scope: &str, at: Timestamp| {
            t.verify(worker, Some(worker), Some(&minted.token), scope, at)
        };
        assert!(ok("w2", SCOPE_HEARTBEAT, now).is_ok());
        assert!(ok("w2", SCOPE_LEASE, now).is_ok());
        assert!(ok("w3", SCOPE_HEARTBEAT, now).is_err(), "another worker");
        let later = now + chrono::Duration::seconds(61);
        assert!(ok("w2", SCOPE_HEARTBEAT, later).is_err(), "expired");
        let narrow = t
            .mint(&request("w2", Some(&["worker:heartbeat"]), None), now)
            .unwrap();
        assert!(
            t.verify("w2", Some("w2"), Some(&narrow.token), SCOPE_LEASE, now)
                .is_err(),
            "wrong scope"
        );
        let other_key = WorkerTokens::new(&AuthConfig {
            worker_signing_key: Secret::new("x".repeat(32)),
            ..AuthConfig::default()
        });
        let forged = other_key.mint(&request("w2", None, None), now).unwrap();
        assert!(
            t.verify("w2", Some("w2"), Some(&forged.token), SCOPE_HEARTBEAT, now)
                .is_err(),
            "wrong key"
        );
        let revoked = tokens(&[minted.token_id.as_str()]);
        assert!(
            revoked
                .verify("w2", Some("w2"), Some(&minted.token), SCOPE_HEARTBEAT, now)
                .is_err(),
            "revoked"
        );
    }

    #[test]
    fn static_and_shared_tokens_and_the_worker_header() {
        let t = tokens(&[]);
        let now = svc_core::Clock::now(&svc_core::clock::SystemClock);
        assert!(t
            .verify("w1", Some("w1"), Some("static-w1"), SCOPE_LEASE, now)
            .is_ok());
        assert!(
            t.verify("w2", Some("w2"), Some("static-w1"), SCOPE_LEASE, now)
                .is_err(),
            "w1's token"
        );
        assert!(t
            .verify("w9", Some("w9"), Some("shared-token"), SCOPE_HEARTBEAT, now)
            .is_ok());
        assert!(
            t.verify("w1", Some("w2"), Some("static-w1"), SCOPE_LEASE, now)
                .is_err(),
            "header mismatch"
        );
        assert!(t
            .verify("w1", None, Some("static-w1"), SCOPE_LEASE, now)
            .is_err());
        assert!(t.verify("w1", Some("w1"), None, SCOPE_LEASE, now).is_err());
        let message = t
            .verify("w1", Some("w1"), Some("nope"), SCOPE_LEASE, now)
            .unwrap_err()
            .to_string();
        assert!(!message.contains("nope") && !message.contains("static-w1"));
    }

    #[test]
    fn minting_refuses_bad_requests() {
        let t = tokens(&[]);
        let now = svc_core::Clock::now(&svc_core::clock::SystemClock);
        let field = |r: WorkerTokenRequest| match t.mint(&r, now).unwrap_err() {
            Error::InvalidInput { field, .. } => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(request("w1", Some(&["admin"]), None)), "scopes");
        assert_eq!(field(request("w1", Some(&[]), None)), "scopes");
        assert_eq!(field(request("w1", None, Some(25 * 3600))), "ttl");
        assert_eq!(field(request("", None, None)), "worker_id");
        let unsigned = WorkerTokens::new(&AuthConfig::default());
        assert!(matches!(
            unsigned.mint(&request("w1", None, None), now),
            Err(Error::NotConfigured { .. })
        ));
    }
}
