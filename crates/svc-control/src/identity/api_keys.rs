//! API keys (decisions §5): `auth.api_key` gives role `api`, `auth.admin_api_key` (in
//! `X-Admin-API-Key` or `X-API-Key`) role `admin`. Keys are kept only as SHA-256 digests and
//! compared digest to digest in constant time, so neither a key's content nor its length shows
//! in response timing.

use sha2::{Digest, Sha256};
use svc_core::config::AuthConfig;
use svc_core::Error;

use crate::Principal;

/// The credentials a request carries (header values, unchecked). `Debug` shows only which
/// are present.
#[derive(Clone, Copy, Default)]
pub struct Credentials<'a> {
    /// `X-API-Key`.
    pub api_key: Option<&'a str>,
    /// `X-Admin-API-Key`.
    pub admin_api_key: Option<&'a str>,
    /// The token of an `Authorization: Bearer` header.
    pub bearer: Option<&'a str>,
}

impl std::fmt::Debug for Credentials<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |value: Option<&str>| value.map(|_| svc_core::config::REDACTED);
        f.debug_struct("Credentials")
            .field("api_key", &shown(self.api_key))
            .field("admin_api_key", &shown(self.admin_api_key))
            .field("bearer", &shown(self.bearer))
            .finish()
    }
}

pub(crate) type KeyDigest = [u8; 32];

pub(crate) fn digest(value: &str) -> KeyDigest {
    Sha256::digest(value.as_bytes()).into()
}

pub(crate) fn same(a: &KeyDigest, b: &KeyDigest) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The configured keys.
pub struct ApiKeys {
    api: Option<KeyDigest>,
    admin: Option<KeyDigest>,
    /// The plain key stands in for the admin key (decisions §5).
    fallback: bool,
}

/// Which configured key a presented one matched.
enum Matched {
    Admin,
    Api,
}

impl ApiKeys {
    /// Digests the keys of `auth`; an empty key is not configured.
    pub fn new(auth: &AuthConfig) -> Self {
        let configured = |secret: &svc_core::config::Secret| {
            (!secret.is_empty()).then(|| digest(secret.expose()))
        };
        let admin = configured(&auth.admin_api_key);
        ApiKeys {
            api: configured(&auth.api_key),
            fallback: admin.is_none() && auth.admin_fallback_enabled,
            admin,
        }
    }

    fn matches(&self, presented: &str) -> Option<Matched> {
        let presented = digest(presented);
        // Both comparisons always run: which one matched does not show in timing.
        let admin = self.admin.as_ref().is_some_and(|k| same(k, &presented));
        let api = self.api.as_ref().is_some_and(|k| same(k, &presented));
        if admin {
            Some(Matched::Admin)
        } else if api {
            Some(Matched::Api)
        } else {
            None
        }
    }

    fn principal(&self, matched: &Matched) -> Principal {
        match matched {
            Matched::Admin => Principal::admin_key(None),
            Matched::Api => Principal::api_key(None, self.fallback),
        }
    }

    /// The caller, or 401 naming the header at fault (never echoing its value).
    pub fn authenticate(&self, credentials: &Credentials<'_>) -> Result<Principal, Error> {
        let unauthorized = |message: &str| Error::Unauthorized {
            message: message.to_owned(),
        };
        if let Some(presented) = credentials.admin_api_key {
            return match self.matches(presented) {
                Some(Matched::Admin) => Ok(self.principal(&Matched::Admin)),
                // Without an admin key, the plain key is accepted in its place (fallback).
                Some(Matched::Api) if self.fallback => Ok(self.principal(&Matched::Api)),
                _ => Err(unauthorized(
                    "the X-Admin-API-Key header does not hold a valid admin API key",
                )),
            };
        }
        match credentials.api_key {
            None => Err(unauthorized(
                "authentication required: send an API key in the X-API-Key header",
            )),
            Some(presented) => match self.matches(presented) {
                Some(matched) => Ok(self.principal(&matched)),
                None => Err(unauthorized(
                    "the X-API-Key header does not hold a valid API key",
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use svc_core::access::Role;
    use svc_core::config::Secret;

    use super::*;

    fn keys(api: &str, admin: &str, fallback: bool) -> ApiKeys {
        ApiKeys::new(&AuthConfig {
            enabled: true,
            api_key: Secret::new(api),
            admin_api_key: Secret::new(admin),
            admin_fallback_enabled: fallback,
            ..AuthConfig::default()
        })
    }

    fn creds<'a>(api: Option<&'a str>, admin: Option<&'a str>) -> Credentials<'a> {
        Credentials {
            api_key: api,
            admin_api_key: admin,
            bearer: None,
        }
    }

    #[test]
    fn keys_give_roles() {
        let k = keys("plain-key", "admin-key", true);
        let p = k.authenticate(&creds(Some("plain-key"), None)).unwrap();
        assert_eq!((p.role, p.admin_fallback), (Role::Api, false));
        let p = k.authenticate(&creds(Some("admin-key"), None)).unwrap();
        assert_eq!(p.role, Role::Admin);
        let p = k.authenticate(&creds(None, Some("admin-key"))).unwrap();
        assert_eq!(p.role, Role::Admin);
        for (api, admin) in [
            (None, None),
            (Some("wrong"), None),
            (Some(""), None),
            (None, Some("plain-key")),
            (Some("admin-key"), Some("wrong")),
        ] {
            let err = k.authenticate(&creds(api, admin)).unwrap_err();
            assert_eq!(
                err.kind(),
                svc_core::ErrorKind::Unauthorized,
                "{api:?} {admin:?}"
            );
            let message = err.to_string();
            for presented in [api, admin].into_iter().flatten().filter(|p| !p.is_empty()) {
                assert!(!message.contains(presented), "{message} echoes {presented}");
            }
        }
    }

    #[test]
    fn debug_never_shows_a_key() {
        let shown = format!("{:?}", creds(Some("plain-key"), Some("admin-key")));
        assert!(
            !shown.contains("plain-key") && !shown.contains("admin-key"),
            "{shown}"
        );
    }

    #[test]
    fn fallback_only_without_an_admin_key() {
        let k = keys("plain-key", "", true);
        let p = k.authenticate(&creds(Some("plain-key"), None)).unwrap();
        assert!(p.admin_fallback);
        let p = k.authenticate(&creds(None, Some("plain-key"))).unwrap();
        assert!(p.admin_fallback);
        let k = keys("plain-key", "", false);
        let p = k.authenticate(&creds(Some("plain-key"), None)).unwrap();
        assert!(!p.admin_fallback);
        assert!(k.authenticate(&creds(None, Some("plain-key"))).is_err());
    }
}
