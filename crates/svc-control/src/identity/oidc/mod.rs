//! OIDC bearer tokens (interface Authentication 4–7, decisions §5): signature against the
//! identity provider's keys (JWKS or one PEM key), `iss`/`aud`/`exp`/`nbf` with clock skew,
//! groups mapped to a role (highest wins) and the tenant claim.
//!
//! A verified token is remembered by its SHA-256 digest until it expires, so a client reusing
//! its token pays for one signature check, not one per request (ECDSA verification costs far
//! more than the rest of a read request).

mod jwks;
mod keys;
mod token;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use svc_core::access::Role;
use svc_core::config::AuthConfig;
use svc_core::tenant::{check_tenant_id, DEFAULT_TENANT};
use svc_core::{Error, Timestamp};

pub use jwks::{BACKGROUND_REFRESH_INTERVAL, MIN_REFRESH_INTERVAL};
pub use keys::{Algorithm, VerifyingKey};

use super::api_keys::{digest, KeyDigest};
use super::members::MemberAnswer;
use super::AuthSetupError;
use jwks::Jwks;
use keys::KeyEntry;

/// Verified tokens remembered at most; beyond it, expired ones are dropped, then all.
const TOKEN_CACHE_CAPACITY: usize = 10_000;

/// What a verified token says about its bearer.
#[derive(Debug)]
pub struct OidcIdentity {
    /// `sub`.
    pub subject: String,
    /// The tenant claim, or `default`.
    pub tenant_id: String,
    /// The highest role its groups map to.
    pub group_role: Option<Role>,
    /// `exp`, seconds since the epoch.
    expires_at: i64,
    /// `nbf`, seconds since the epoch.
    not_before: Option<i64>,
    /// The `kid` of the key that verified it (none for a token naming none): when that key
    /// leaves the JWKS, the token is forgotten and must verify again.
    kid: Option<String>,
    /// The subject's membership in the tenant, as last read.
    member: RwLock<Option<MemberAnswer>>,
}

impl OidcIdentity {
    /// The membership answer kept with this token.
    pub(crate) fn member_answer(&self) -> Option<MemberAnswer> {
        *self
            .member
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps a membership answer with this token.
    pub(crate) fn keep_member_answer(&self, answer: MemberAnswer) {
        *self
            .member
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(answer);
    }
}

enum KeySource {
    /// `auth.oidc_public_key_file`.
    Static(Arc<Vec<KeyEntry>>),
    /// `auth.oidc_jwks_url`.
    Jwks(Jwks),
}

/// The OIDC verifier, built once from `auth.oidc_*`.
pub struct Oidc {
    issuer: String,
    audience: String,
    skew_secs: i64,
    groups_claim: String,
    tenant_claim: String,
    group_roles: HashMap<String, Role>,
    keys: KeySource,
    verified: RwLock<HashMap<KeyDigest, Arc<OidcIdentity>>>,
}

fn unauthorized(reason: &str) -> Error {
    Error::Unauthorized {
        message: format!("invalid bearer token: {reason}"),
    }
}

impl Oidc {
    /// Builds the verifier; reads `auth.oidc_public_key_file` when set. JWKS keys are fetched
    /// later, by [`Oidc::refresh_keys`].
    pub fn from_config(auth: &AuthConfig) -> Result<Self, AuthSetupError> {
        let setup = |key: &'static str, message: String| AuthSetupError { key, message };
        let keys = if !auth.oidc_jwks_url.is_empty() {
            if !svc_core::config::jwks_url_acceptable(&auth.oidc_jwks_url) {
                return Err(setup(
                    "auth.oidc_jwks_url",
                    "must be an https URL (plain http is allowed only for loopback hosts)"
                        .to_owned(),
                ));
            }
            KeySource::Jwks(
                Jwks::new(auth.oidc_jwks_url.clone())
                    .map_err(|m| setup("auth.oidc_jwks_url", m))?,
            )
        } else {
            let path = &auth.oidc_public_key_file;
            let pem = std::fs::read_to_string(path).map_err(|e| {
                setup(
                    "auth.oidc_public_key_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let key = VerifyingKey::from_pem(&pem).map_err(|m| {
                setup(
                    "auth.oidc_public_key_file",
                    format!("{}: {m}", path.display()),
                )
            })?;
            KeySource::Static(Arc::new(vec![KeyEntry { kid: None, key }]))
        };
        let mut group_roles = HashMap::new();
        for (groups, role) in [
            (&auth.oidc_viewer_groups, Role::Viewer),
            (&auth.oidc_operator_groups, Role::Operator),
            (&auth.oidc_tenant_admin_groups, Role::TenantAdmin),
            (&auth.oidc_admin_groups, Role::Admin),
        ] {
            for group in groups {
                let entry = group_roles.entry(group.clone()).or_insert(role);
                *entry = (*entry).max(role);
            }
        }
        Ok(Oidc {
            issuer: auth.oidc_issuer.clone(),
            audience: auth.oidc_audience.clone(),
            skew_secs: i64::try_from(auth.oidc_clock_skew.as_std().as_secs()).unwrap_or(i64::MAX),
            groups_claim: auth.oidc_groups_claim.clone(),
            tenant_claim: auth.oidc_tenant_claim.clone(),
            group_roles,
            keys,
            verified: RwLock::new(HashMap::new()),
        })
    }

    /// Whether keys come from a JWKS URL (and so need fetching).
    pub fn uses_jwks(&self) -> bool {
        matches!(self.keys, KeySource::Jwks(_))
    }

    /// Fetches the JWKS (rate-limited; a no-op for a static key).
    pub async fn refresh_keys(&self, now: Timestamp) {
        if let KeySource::Jwks(jwks) = &self.keys {
            jwks.refresh(now).await;
            self.forget_tokens_of_removed_keys();
        }
    }

    /// Drops remembered tokens whose key is no longer held, so a key the identity provider
    /// removed stops admitting tokens it signed before (not only new ones). A token that named
    /// no key stays while any key without a `kid` does.
    fn forget_tokens_of_removed_keys(&self) {
        let keys = self.current_keys();
        let held = |kid: &Option<String>| {
            keys.iter()
                .any(|entry| entry.kid.as_deref() == kid.as_deref())
        };
        self.verified
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, known| held(&known.kid));
    }

    /// JWKS fetches attempted so far.
    pub fn key_fetches(&self) -> u64 {
        match &self.keys {
            KeySource::Jwks(jwks) => jwks.fetches(),
            KeySource::Static(_) => 0,
        }
    }

    fn current_keys(&self) -> Arc<Vec<KeyEntry>> {
        match &self.keys {
            KeySource::Static(keys) => Arc::clone(keys),
            KeySource::Jwks(jwks) => jwks.keys(),
        }
    }

    /// The bearer of `token`, or 401 saying what is wrong with it.
    pub async fn verify(&self, token: &str, at: Timestamp) -> Result<Arc<OidcIdentity>, Error> {
        let now = at.timestamp();
        let digest = digest(token);
        if let Some(known) = self.remembered(&digest) {
            self.still_valid(&known, now)?;
            return Ok(known);
        }
        let parsed = token::parse(token).map_err(|r| unauthorized(&r))?;
        if !self.signature_holds(&parsed, &self.current_keys())? {
            // A key rotated in since the last fetch: look once more (rate-limited).
            if !self.knows_kid(&parsed) && self.uses_jwks() {
                self.refresh_keys(at).await;
                if self.signature_holds(&parsed, &self.current_keys())? {
                    return self.accept(&parsed, digest, now);
                }
                if !self.knows_kid(&parsed) {
                    return Err(unauthorized("the token's key ID (kid) is not known"));
                }
            }
            return Err(unauthorized("the signature does not verify"));
        }
        self.accept(&parsed, digest, now)
    }

    /// Whether the held keys could verify the token: a key with its `kid`, or for a token
    /// without one, any key at all (none are held until the first fetch succeeds).
    fn knows_kid(&self, parsed: &token::Parsed<'_>) -> bool {
        let keys = self.current_keys();
        match &parsed.kid {
            None => !keys.is_empty(),
            Some(kid) => keys.iter().any(|entry| entry.kid.as_deref() == Some(kid)),
        }
    }

    /// Whether a key of the token's algorithm (and `kid`, when it names one) verifies it.
    fn signature_holds(
        &self,
        parsed: &token::Parsed<'_>,
        keys: &[KeyEntry],
    ) -> Result<bool, Error> {
        let mut candidates = keys.iter().filter(|entry| match &parsed.kid {
            Some(kid) => entry.kid.as_deref() == Some(kid),
            None => true,
        });
        let mut named_other_algorithm = false;
        let holds = candidates.any(|entry| {
            if entry.key.algorithm() != parsed.algorithm {
                named_other_algorithm |= parsed.kid.is_some();
                return false;
            }
            entry.key.verify(parsed.signed, &parsed.signature)
        });
        if !holds && named_other_algorithm {
            return Err(unauthorized(&format!(
                "the key the token names is not a {} key",
                parsed.algorithm.as_str()
            )));
        }
        Ok(holds)
    }

    fn accept(
        &self,
        parsed: &token::Parsed<'_>,
        digest: KeyDigest,
        now: i64,
    ) -> Result<Arc<OidcIdentity>, Error> {
        let claims = parsed
            .claims(&token::ClaimRules {
                issuer: &self.issuer,
                audience: &self.audience,
                skew_secs: self.skew_secs,
                now,
            })
            .map_err(|r| unauthorized(&r))?;
        let tenant_id = match claims.all.get(&self.tenant_claim) {
            None | Some(serde_json::Value::Null) => DEFAULT_TENANT.to_owned(),
            Some(serde_json::Value::String(tenant)) if check_tenant_id(tenant).is_ok() => {
                tenant.clone()
            }
            Some(_) => {
                return Err(unauthorized(&format!(
                    "the tenant claim {:?} is not a tenant ID ([a-z0-9][a-z0-9_-]{{0,62}})",
                    self.tenant_claim
                )))
            }
        };
        let identity = Arc::new(OidcIdentity {
            group_role: self.group_role(claims.all.get(&self.groups_claim)),
            subject: claims.subject,
            tenant_id,
            expires_at: claims.expires_at,
            not_before: claims.not_before,
            kid: parsed.kid.clone(),
            member: RwLock::new(None),
        });
        self.remember(digest, Arc::clone(&identity), now);
        Ok(identity)
    }

    /// The highest role the groups claim (a list of strings, or one string) maps to.
    fn group_role(&self, groups: Option<&serde_json::Value>) -> Option<Role> {
        let role_of = |group: &str| self.group_roles.get(group).copied();
        match groups {
            Some(serde_json::Value::Array(groups)) => groups
                .iter()
                .filter_map(serde_json::Value::as_str)
                .filter_map(role_of)
                .max(),
            Some(serde_json::Value::String(group)) => role_of(group),
            _ => None,
        }
    }

    fn still_valid(&self, identity: &OidcIdentity, now: i64) -> Result<(), Error> {
        if now > identity.expires_at.saturating_add(self.skew_secs) {
            return Err(unauthorized("the token has expired"));
        }
        if identity
            .not_before
            .is_some_and(|nbf| now < nbf.saturating_sub(self.skew_secs))
        {
            return Err(unauthorized("the token is not valid yet (nbf)"));
        }
        Ok(())
    }

    fn remembered(&self, digest: &KeyDigest) -> Option<Arc<OidcIdentity>> {
        self.verified
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(digest)
            .cloned()
    }

    fn remember(&self, digest: KeyDigest, identity: Arc<OidcIdentity>, now: i64) {
        let mut verified = self
            .verified
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if verified.len() >= TOKEN_CACHE_CAPACITY {
            let skew = self.skew_secs;
            verified.retain(|_, known| now <= known.expires_at.saturating_add(skew));
            if verified.len() >= TOKEN_CACHE_CAPACITY {
                verified.clear();
            }
        }
        verified.insert(digest, identity);
    }
}
