//! `auth.*`: API keys, worker tokens and OIDC (decisions §2, §5, §11). Every credential is a
//! [`Secret`]; worker IDs in `worker_tokens` and revoked token IDs are not secret.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::secret::Secret;
use crate::duration::GoDuration;

/// The longest lifetime of an issued worker token (decisions §11).
pub const MAX_WORKER_TOKEN_TTL: GoDuration = GoDuration::from_secs(24 * 60 * 60);

/// `auth.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// When true, `X-API-Key` is required.
    pub enabled: bool,
    /// Key giving role `api`.
    pub api_key: Secret,
    /// Key giving role `admin`.
    pub admin_api_key: Secret,
    /// Admin routes accept `api_key` while `admin_api_key` is empty and this is true.
    pub admin_fallback_enabled: bool,
    /// Shared staging worker token.
    pub worker_token: Secret,
    /// Static token per worker ID.
    pub worker_tokens: BTreeMap<String, Secret>,
    /// HMAC key for signed worker tokens; empty = issuing tokens is unavailable.
    pub worker_signing_key: Secret,
    /// Default lifetime of issued worker tokens; at most 24h.
    pub worker_token_ttl: GoDuration,
    /// `jti`s of signed worker tokens that are refused.
    pub worker_revoked_token_ids: Vec<String>,
    /// OIDC issuer (`iss`).
    pub oidc_issuer: String,
    /// JWKS URL of the issuer.
    pub oidc_jwks_url: String,
    /// Alternative to JWKS: one PEM public key.
    pub oidc_public_key_file: PathBuf,
    /// Expected `aud`.
    pub oidc_audience: String,
    /// Allowed clock difference when checking `exp` and `nbf`.
    pub oidc_clock_skew: GoDuration,
    /// Claim holding the caller's groups.
    pub oidc_groups_claim: String,
    /// Claim holding the caller's tenant.
    pub oidc_tenant_claim: String,
    /// Groups mapped to role `admin`.
    pub oidc_admin_groups: Vec<String>,
    /// Groups mapped to role `operator`.
    pub oidc_operator_groups: Vec<String>,
    /// Groups mapped to role `viewer`.
    pub oidc_viewer_groups: Vec<String>,
    /// Groups mapped to role `tenant_admin`.
    pub oidc_tenant_admin_groups: Vec<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: false,
            api_key: Secret::default(),
            admin_api_key: Secret::default(),
            admin_fallback_enabled: true,
            worker_token: Secret::default(),
            worker_tokens: BTreeMap::new(),
            worker_signing_key: Secret::default(),
            worker_token_ttl: GoDuration::from_secs(15 * 60),
            worker_revoked_token_ids: Vec::new(),
            oidc_issuer: String::new(),
            oidc_jwks_url: String::new(),
            oidc_public_key_file: PathBuf::new(),
            oidc_audience: String::new(),
            oidc_clock_skew: GoDuration::from_secs(60),
            oidc_groups_claim: "groups".to_owned(),
            oidc_tenant_claim: "tenant_id".to_owned(),
            oidc_admin_groups: Vec::new(),
            oidc_operator_groups: Vec::new(),
            oidc_viewer_groups: Vec::new(),
            oidc_tenant_admin_groups: Vec::new(),
        }
    }
}

impl AuthConfig {
    /// True when callers must authenticate: API keys (`auth.enabled`) or OIDC.
    pub fn required(&self) -> bool {
        self.enabled || self.oidc_enabled()
    }

    /// OIDC is on when the issuer and a key source (JWKS URL or PEM file) are set (decisions §2).
    pub fn oidc_enabled(&self) -> bool {
        !self.oidc_issuer.is_empty()
            && (!self.oidc_jwks_url.is_empty() || !self.oidc_public_key_file.as_os_str().is_empty())
    }

    /// True when any OIDC setting that only matters for OIDC was given, even if OIDC is not
    /// fully on: the production lint then asks for the rest rather than letting it stay off.
    pub fn oidc_configured(&self) -> bool {
        !self.oidc_issuer.is_empty()
            || !self.oidc_jwks_url.is_empty()
            || !self.oidc_public_key_file.as_os_str().is_empty()
            || !self.oidc_audience.is_empty()
            || self.oidc_has_group_mapping()
    }

    /// True when at least one group maps to a role.
    pub fn oidc_has_group_mapping(&self) -> bool {
        !(self.oidc_admin_groups.is_empty()
            && self.oidc_operator_groups.is_empty()
            && self.oidc_viewer_groups.is_empty()
            && self.oidc_tenant_admin_groups.is_empty())
    }
}

/// Whether `url` may serve keys: `https://`, or `http://` to a loopback host (tests).
pub fn jwks_url_acceptable(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::jwks_url_acceptable;

    #[test]
    fn plain_http_only_on_loopback() {
        for ok in [
            "https://idp.example.com/jwks",
            "http://127.0.0.1:8080/jwks",
            "http://127.9.9.9/jwks",
            "http://localhost/jwks",
            "http://[::1]:9000/keys",
        ] {
            assert!(jwks_url_acceptable(ok), "{ok}");
        }
        for bad in [
            "http://idp.example.com/jwks",
            "http://10.0.0.1/jwks",
            "http://127.0.0.1.evil.com/jwks",
            "http://localhost@evil.com/jwks",
            "ftp://127.0.0.1/jwks",
            "idp/jwks",
        ] {
            assert!(!jwks_url_acceptable(bad), "{bad}");
        }
    }
}
