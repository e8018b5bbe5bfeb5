//! Previews (decisions §18): a port inside a sandbox, reached through svc. The HTTP layer
//! proxies; this module decides who may reach which port and opens the connection.
//!
//! A caller reaches a preview with credentials, as any route (the permission to run commands:
//! a preview can drive whatever serves there), or with a preview token: an HS256 JWT for one
//! sandbox and one port until it expires, signed with the database's own random key (the
//! `meta` table's `preview_key`), so every replica accepts what any issued and nothing needs
//! storing per token.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use svc_core::access::Action;
use svc_core::clock::add_duration;
use svc_core::{Error, GoDuration, SandboxId, Timestamp};
pub use svc_provider::PortStream;

use crate::provider_errors::classify;
use crate::{ControlPlane, Principal};

/// The audience of preview tokens, so no other HS256 token signed elsewhere passes.
const AUDIENCE: &str = "svc-preview";

/// The audience of sandbox access tokens (E2B's `envdAccessToken`, decisions §20).
const ACCESS_AUDIENCE: &str = "svc-sandbox-access";

/// A sandbox access token's claims: the sandbox, for as long as it exists (a destroyed
/// sandbox refuses everything anyway).
#[derive(Debug, Serialize, Deserialize)]
struct AccessClaims {
    sub: String,
    aud: String,
}

/// `POST /sandboxes/{id}/preview-tokens` body.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PreviewTokenRequest {
    /// The port inside the sandbox (1 to 65535).
    pub port: u32,
    /// Lifetime: at least `1s`, at most the sandbox's remaining life.
    #[schema(value_type = String, example = "15m")]
    pub ttl: Option<GoDuration>,
}

/// A preview token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PreviewToken {
    /// The preview's address by host name (`http://<port>-<id>.<preview_domain>[:port]/`).
    pub url: String,
    /// The token, for `?svc_preview_token=` (then kept as a cookie).
    pub token: String,
    /// When it stops working.
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
}

/// Who asks to reach a preview.
pub enum PreviewAccess<'a> {
    /// A caller that authenticated with credentials.
    Caller(&'a Principal),
    /// A preview token.
    Token(&'a str),
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    port: u16,
    aud: String,
    exp: i64,
}

/// The signing keys, read from the store once.
pub(crate) type PreviewKeys = tokio::sync::OnceCell<(EncodingKey, DecodingKey)>;

fn refused(message: &str) -> Error {
    Error::Unauthorized {
        message: message.to_owned(),
    }
}

/// A port from a request: 1 to 65535.
pub fn check_port(port: u32) -> Result<u16, Error> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Error::invalid("port", format!("must be 1 to 65535, got {port}")))
}

impl ControlPlane {
    async fn preview_keys(&self) -> Result<&(EncodingKey, DecodingKey), Error> {
        self.inner
            .preview_keys
            .get_or_try_init(|| async {
                let key = self.store().preview_key().await?;
                Ok::<_, Error>((
                    EncodingKey::from_secret(key.as_bytes()),
                    DecodingKey::from_secret(key.as_bytes()),
                ))
            })
            .await
    }

    /// The preview address of `port` in sandbox `id` by host name.
    pub(crate) fn preview_url(&self, id: &SandboxId, port: u16) -> String {
        let server = &self.config().server;
        // Port 0 (an ephemeral listener) names no port a client could use.
        let listen = if server.port == 80 || server.port == 0 {
            String::new()
        } else {
            format!(":{}", server.port)
        };
        format!("http://{port}-{id}.{}{listen}/", server.preview_domain)
    }

    /// `POST /sandboxes/{id}/preview-tokens`.
    pub async fn issue_preview_token(
        &self,
        principal: &Principal,
        id: &SandboxId,
        request: PreviewTokenRequest,
    ) -> Result<PreviewToken, Error> {
        self.authorize(principal, Action::Exec)?;
        let port = check_port(request.port)?;
        let sandbox = self.find_sandbox(principal, id).await?;
        if sandbox.state.has_ended() {
            return Err(sandbox.not_running_error());
        }
        let ttl = request
            .ttl
            .ok_or_else(|| Error::invalid("ttl", "is required (at least 1s)"))?;
        let now = self.clock().now();
        let remaining = (sandbox.expires_at - now).to_std().unwrap_or_default();
        if ttl.as_std() < std::time::Duration::from_secs(1) || ttl.as_std() > remaining {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "must be at least 1s and at most the sandbox's remaining life ({}), got {ttl}",
                    GoDuration::new(std::time::Duration::from_secs(remaining.as_secs()))
                ),
            ));
        }
        let expires_at = add_duration(now, ttl.as_std());
        let claims = Claims {
            sub: sandbox.id.to_string(),
            port,
            aud: AUDIENCE.to_owned(),
            exp: expires_at.timestamp(),
        };
        let (encoding, _) = self.preview_keys().await?;
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, encoding)
            .map_err(|e| Error::internal("signing a preview token", e))?;
        Ok(PreviewToken {
            url: self.preview_url(&sandbox.id, port),
            token,
            expires_at,
        })
    }

    /// May this request reach `port` in sandbox `id`? 401 for a token that is not for this
    /// sandbox and port or has expired, 404 for a sandbox the caller cannot see, 409 unless it
    /// runs. Checked for every request, also one that reuses an open connection.
    pub async fn authorize_preview(
        &self,
        access: PreviewAccess<'_>,
        id: &SandboxId,
        port: u16,
    ) -> Result<(), Error> {
        match access {
            PreviewAccess::Caller(principal) => {
                self.authorize(principal, Action::Exec)?;
                self.running_sandbox(principal, id).await?;
            }
            PreviewAccess::Token(token) => {
                // The token names the sandbox: whoever holds it may reach it, in any tenant.
                self.verify_preview_token(token, id, port).await?;
                self.running_sandbox(&Principal::system(), id).await?;
            }
        }
        Ok(())
    }

    /// Opens a connection to `port` in the running sandbox `id` (after
    /// [`ControlPlane::authorize_preview`]): 409 unless it runs, 502 when nothing listens.
    pub async fn connect_preview(&self, id: &SandboxId, port: u16) -> Result<PortStream, Error> {
        let sandbox = self.running_sandbox(&Principal::system(), id).await?;
        let provider = self.enabled_provider(&sandbox.provider)?;
        provider
            .connect(&sandbox.id, port)
            .await
            .map_err(|e| classify(provider.name(), "connect", e))
    }

    /// A token that opens sandbox `id`'s in-sandbox services (E2B's `envdAccessToken`) and
    /// nothing else, signed with the same per-database key as preview tokens.
    pub async fn sandbox_access_token(&self, id: &SandboxId) -> Result<String, Error> {
        let claims = AccessClaims {
            sub: id.to_string(),
            aud: ACCESS_AUDIENCE.to_owned(),
        };
        let (encoding, _) = self.preview_keys().await?;
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, encoding)
            .map_err(|e| Error::internal("signing a sandbox access token", e))
    }

    /// The caller `token` proves, scoped to sandbox `id` ([`Principal::for_sandbox`]); 401
    /// unless it is [`ControlPlane::sandbox_access_token`] of that sandbox.
    pub async fn verify_sandbox_access_token(
        &self,
        token: &str,
        id: &SandboxId,
    ) -> Result<Principal, Error> {
        let (_, decoding) = self.preview_keys().await?;
        let mut validation = Validation::new(Algorithm::HS256);
        validation.validate_exp = false;
        validation.set_audience(&[ACCESS_AUDIENCE]);
        validation.required_spec_claims = ["sub", "aud"].into_iter().map(str::to_owned).collect();
        let claims = jsonwebtoken::decode::<AccessClaims>(token, decoding, &validation)
            .map_err(|_| refused("the access token is not valid for this sandbox"))?
            .claims;
        if claims.sub != id.as_str() {
            return Err(refused("the access token is not valid for this sandbox"));
        }
        Ok(Principal::for_sandbox(id.clone()))
    }

    async fn verify_preview_token(
        &self,
        token: &str,
        id: &SandboxId,
        port: u16,
    ) -> Result<(), Error> {
        const INVALID: &str = "the preview token is not valid for this sandbox and port";
        let (_, decoding) = self.preview_keys().await?;
        let mut validation = Validation::new(Algorithm::HS256);
        // Expiry is checked below against the service clock.
        validation.validate_exp = false;
        validation.set_audience(&[AUDIENCE]);
        validation.required_spec_claims = ["exp", "sub", "aud"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        let claims = jsonwebtoken::decode::<Claims>(token, decoding, &validation)
            .map_err(|_| refused(INVALID))?
            .claims;
        if claims.sub != id.as_str() || claims.port != port {
            return Err(refused(INVALID));
        }
        if claims.exp <= self.clock().now().timestamp() {
            return Err(refused("the preview token has expired"));
        }
        Ok(())
    }
}
