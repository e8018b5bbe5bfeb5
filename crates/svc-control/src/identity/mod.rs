//! Authentication: turns the credentials of a request into a [`Principal`]. API keys today
//! (interface Authentication 1–3, decisions §5); OIDC bearer tokens and worker tokens join here.

mod api_keys;
mod worker_tokens;

pub use api_keys::{ApiKeys, Credentials};
pub use worker_tokens::{
    WorkerToken, WorkerTokenRequest, WorkerTokens, SCOPE_HEARTBEAT, SCOPE_LEASE,
};

use svc_core::config::AuthConfig;
use svc_core::Error;

use crate::{ControlPlane, Principal};

/// How callers are authenticated, fixed at start-up from `auth.*`.
pub enum Authenticator {
    /// No authentication configured: every caller is the anonymous admin (decisions §5).
    Open,
    /// `auth.enabled`: an API key is required.
    ApiKeys(ApiKeys),
}

/// Why the `auth.*` settings cannot run.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct AuthSetupError {
    /// The configuration key at fault.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl Authenticator {
    /// Builds the authenticator. Settings that would leave the server open while the operator
    /// believes it protected are refused.
    pub fn from_config(auth: &AuthConfig) -> Result<Self, AuthSetupError> {
        if auth.oidc_enabled() {
            return Err(AuthSetupError {
                key: "auth.oidc_issuer",
                message: "OIDC sign-in is not available in this build yet; remove the auth.oidc_* \
                          settings or use API keys (auth.enabled, auth.api_key)"
                    .to_owned(),
            });
        }
        if !auth.enabled {
            return Ok(Authenticator::Open);
        }
        if auth.api_key.is_empty() && auth.admin_api_key.is_empty() {
            return Err(AuthSetupError {
                key: "auth.api_key",
                message: "is required when auth.enabled is true (or set auth.admin_api_key)"
                    .to_owned(),
            });
        }
        Ok(Authenticator::ApiKeys(ApiKeys::new(auth)))
    }

    /// True when any authentication is configured.
    pub fn is_enabled(&self) -> bool {
        !matches!(self, Authenticator::Open)
    }

    /// The caller behind `credentials`, or 401; the owner (`X-User-ID`) is the caller's to set.
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Principal, Error> {
        match self {
            Authenticator::Open => Ok(Principal::anonymous(None)),
            Authenticator::ApiKeys(keys) => keys.authenticate(credentials),
        }
    }
}

impl ControlPlane {
    /// Authenticates a request's credentials (see [`Authenticator::authenticate`]).
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Principal, Error> {
        self.inner.authenticator.authenticate(credentials)
    }
}
