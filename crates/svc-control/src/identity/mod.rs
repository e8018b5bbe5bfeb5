//! Authentication: turns the credentials of a request into a [`Principal`]: API keys and OIDC
//! bearer tokens (interface Authentication 1–7, decisions §5), and worker tokens for the worker
//! routes.

mod api_keys;
mod members;
mod offered;
pub mod oidc;
mod worker_tokens;

pub use api_keys::{ApiKeys, Credentials};
pub(crate) use members::MemberRoles;
pub use offered::{
    bearer, Offered, ACCESS_TOKEN_HEADER, ADMIN_API_KEY_HEADER, API_KEY_HEADER, WEBSOCKET_PROTOCOL,
};
pub use oidc::{Oidc, OidcIdentity};
pub use worker_tokens::{
    WorkerToken, WorkerTokenRequest, WorkerTokens, SCOPE_HEARTBEAT, SCOPE_LEASE,
};

use std::borrow::Cow;
use std::sync::Arc;

use svc_core::config::AuthConfig;
use svc_core::Error;

use crate::principal::AuthMethod;
use crate::{ControlPlane, Principal};

/// How callers are authenticated, fixed at start-up from `auth.*`.
pub enum Authenticator {
    /// No authentication configured: every caller is the anonymous admin (decisions §5).
    Open,
    /// API keys (`auth.enabled`), OIDC bearer tokens (`auth.oidc_*`), or both (mixed mode).
    Required {
        /// Present when `auth.enabled`.
        api_keys: Option<ApiKeys>,
        /// Present when OIDC is configured.
        oidc: Option<Arc<Oidc>>,
    },
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

/// Who a request claims to be, before the store is asked about memberships.
enum Authenticated {
    Principal(Principal),
    Oidc(Arc<OidcIdentity>),
}

impl Authenticator {
    /// Builds the authenticator. Settings that would leave the server open while the operator
    /// believes it protected are refused.
    pub fn from_config(auth: &AuthConfig) -> Result<Self, AuthSetupError> {
        if auth.oidc_configured() && !auth.oidc_enabled() {
            return Err(AuthSetupError {
                key: "auth.oidc_issuer",
                message: "OIDC needs auth.oidc_issuer and one of auth.oidc_jwks_url or \
                          auth.oidc_public_key_file"
                    .to_owned(),
            });
        }
        let oidc = if auth.oidc_enabled() {
            Some(Arc::new(Oidc::from_config(auth)?))
        } else {
            None
        };
        let api_keys = if auth.enabled {
            if auth.api_key.is_empty() && auth.admin_api_key.is_empty() {
                return Err(AuthSetupError {
                    key: "auth.api_key",
                    message: "is required when auth.enabled is true (or set auth.admin_api_key)"
                        .to_owned(),
                });
            }
            Some(ApiKeys::new(auth))
        } else {
            None
        };
        if api_keys.is_none() && oidc.is_none() {
            return Ok(Authenticator::Open);
        }
        Ok(Authenticator::Required { api_keys, oidc })
    }

    /// True when any authentication is configured.
    pub fn is_enabled(&self) -> bool {
        !matches!(self, Authenticator::Open)
    }

    /// The OIDC verifier, when configured.
    pub fn oidc(&self) -> Option<&Arc<Oidc>> {
        match self {
            Authenticator::Required { oidc, .. } => oidc.as_ref(),
            Authenticator::Open => None,
        }
    }

    /// Checks the credentials: a bearer token when OIDC is configured and one is sent (mixed
    /// mode accepts it even where an API key is expected), else the API keys.
    async fn check(
        &self,
        credentials: &Credentials<'_>,
        now: svc_core::Timestamp,
    ) -> Result<Authenticated, Error> {
        let Authenticator::Required { api_keys, oidc } = self else {
            return Ok(Authenticated::Principal(Principal::anonymous(None)));
        };
        if let (Some(oidc), Some(token)) = (oidc, credentials.bearer) {
            return oidc.verify(token, now).await.map(Authenticated::Oidc);
        }
        match api_keys {
            Some(keys) => keys.authenticate(credentials).map(Authenticated::Principal),
            None => Err(Error::Unauthorized {
                message: "authentication required: send an OIDC bearer token in the \
                          Authorization header"
                    .to_owned(),
            }),
        }
    }
}

impl ControlPlane {
    /// Authenticates a request's credentials. An OIDC caller's role is the highest of its
    /// groups' roles and its membership in its tenant; a token with neither is 403.
    pub async fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Principal, Error> {
        let now = self.inner.clock.now();
        let identity = match self.inner.authenticator.check(credentials, now).await? {
            Authenticated::Principal(principal) => return Ok(principal),
            Authenticated::Oidc(identity) => identity,
        };
        let member_role = self
            .inner
            .member_roles
            .role(self.store().as_ref(), &identity)
            .await?;
        let Some(role) = identity.group_role.max(member_role) else {
            return Err(Error::Denied {
                message: format!(
                    "the token's groups map to no role and its subject is no member of tenant {}",
                    identity.tenant_id
                ),
            });
        };
        Ok(Principal {
            role,
            method: AuthMethod::Oidc,
            admin_fallback: false,
            tenant_id: Cow::Owned(identity.tenant_id.clone()),
            owner: None,
            tenant_scoped: true,
            subject: Some(identity.subject.clone()),
            only_sandbox: None,
        })
    }

    /// The OIDC verifier, when configured (for the background key refresh and diagnostics).
    pub fn oidc(&self) -> Option<&Arc<Oidc>> {
        self.inner.authenticator.oidc()
    }
}

/// Fetches the JWKS at start-up and then every [`oidc::BACKGROUND_REFRESH_INTERVAL`], so keys
/// the identity provider removed stop verifying new tokens.
pub(crate) async fn refresh_keys(
    oidc: Arc<Oidc>,
    clock: Arc<dyn svc_core::Clock>,
    cancel: tokio_util::sync::CancellationToken,
) {
    loop {
        oidc.refresh_keys(clock.now()).await;
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(oidc::BACKGROUND_REFRESH_INTERVAL) => {}
        }
    }
}
