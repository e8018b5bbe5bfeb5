//! The one reading of the credentials a request offers, for the API, its WebSockets, the preview
//! proxy and the E2B listener alike: header names are case-insensitive (HTTP), so is the scheme
//! of `Authorization`; a value that is not UTF-8 reads as an empty one, which matches no key; a
//! browser's WebSocket, which cannot send headers, offers its credential as a subprotocol.

use std::borrow::Cow;

use http::{header, HeaderMap, HeaderName};

use super::Credentials;

/// `X-API-Key` (E2B's `X-API-KEY`).
pub static API_KEY_HEADER: HeaderName = HeaderName::from_static("x-api-key");
/// `X-Admin-API-Key`.
pub static ADMIN_API_KEY_HEADER: HeaderName = HeaderName::from_static("x-admin-api-key");
/// `X-Access-Token`: a sandbox's access token (E2B's `envdAccessToken`).
pub static ACCESS_TOKEN_HEADER: HeaderName = HeaderName::from_static("x-access-token");

/// The subprotocol a browser's WebSocket offers alongside `svc` (the one the server answers
/// with) to carry its credential: `svc.api-key.<key>` or `svc.bearer.<token>`, the value
/// base64url-encoded without padding (subprotocols are tokens; keys and JWTs may hold other
/// characters).
pub const WEBSOCKET_PROTOCOL: &str = "svc";

/// What a request offers to prove who it is. Borrowed from the headers, owned only where a
/// WebSocket subprotocol had to be decoded. `Debug` shows only which are present.
#[derive(Default)]
pub struct Offered<'a> {
    api_key: Option<Cow<'a, str>>,
    admin_api_key: Option<&'a str>,
    bearer: Option<Cow<'a, str>>,
    access_token: Option<&'a str>,
}

impl std::fmt::Debug for Offered<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offered")
            .field("credentials", &self.credentials())
            .field(
                "access_token",
                &self.access_token.map(|_| svc_core::config::REDACTED),
            )
            .finish()
    }
}

/// A header's text; a value that is not UTF-8 matches no key, so it reads as an empty one.
fn text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap_or(""))
}

/// The token of `Authorization: Bearer <token>`; other schemes are not ours.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// A credential offered as a WebSocket subprotocol.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WebSocketCredential {
    ApiKey(String),
    Bearer(String),
}

fn websocket_credential(headers: &HeaderMap) -> Option<WebSocketCredential> {
    use base64::Engine;
    let offered = headers.get(header::SEC_WEBSOCKET_PROTOCOL)?.to_str().ok()?;
    offered.split(',').map(str::trim).find_map(|protocol| {
        let (kind, encoded) = protocol
            .strip_prefix("svc.api-key.")
            .map(|v| ("api-key", v))
            .or_else(|| protocol.strip_prefix("svc.bearer.").map(|v| ("bearer", v)))?;
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded)
            .ok()?;
        let value = String::from_utf8(decoded).ok()?;
        Some(match kind {
            "api-key" => WebSocketCredential::ApiKey(value),
            _ => WebSocketCredential::Bearer(value),
        })
    })
}

impl<'a> Offered<'a> {
    /// Reads a request's headers.
    pub fn from_headers(headers: &'a HeaderMap) -> Self {
        let mut offered = Offered {
            api_key: text(headers, &API_KEY_HEADER).map(Cow::Borrowed),
            admin_api_key: text(headers, &ADMIN_API_KEY_HEADER),
            bearer: bearer(headers).map(Cow::Borrowed),
            access_token: text(headers, &ACCESS_TOKEN_HEADER),
        };
        if offered.api_key.is_none() && offered.admin_api_key.is_none() && offered.bearer.is_none()
        {
            match websocket_credential(headers) {
                Some(WebSocketCredential::ApiKey(key)) => offered.api_key = Some(Cow::Owned(key)),
                Some(WebSocketCredential::Bearer(token)) => {
                    offered.bearer = Some(Cow::Owned(token));
                }
                None => {}
            }
        }
        offered
    }

    /// The credentials authentication checks.
    pub fn credentials(&self) -> Credentials<'_> {
        Credentials {
            api_key: self.api_key.as_deref(),
            admin_api_key: self.admin_api_key,
            bearer: self.bearer.as_deref(),
        }
    }

    /// A sandbox's access token, which in-sandbox calls of the E2B listener offer.
    pub fn access_token(&self) -> Option<&str> {
        self.access_token
    }

    /// What keys the caller's rate-limit bucket: the API key, else a sandbox access token, else
    /// a bearer token (each its own bucket); `None` for a request that offers none.
    pub fn rate_key(&self) -> Option<&str> {
        [
            self.api_key.as_deref(),
            self.access_token,
            self.bearer.as_deref(),
        ]
        .into_iter()
        .flatten()
        .find(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        headers
    }

    #[test]
    fn header_names_and_the_bearer_scheme_are_case_insensitive() {
        for (name, scheme) in [
            ("X-API-KEY", "Bearer"),
            ("x-api-key", "bearer"),
            ("X-Api-Key", "BEARER"),
        ] {
            let h = headers(&[(name, "k1"), ("authorization", &format!("{scheme} t1"))]);
            let offered = Offered::from_headers(&h);
            let credentials = offered.credentials();
            assert_eq!(credentials.api_key, Some("k1"), "{name}");
            assert_eq!(credentials.bearer, Some("t1"), "{scheme}");
        }
        let h = headers(&[("authorization", "Basic dXNlcjpwYXNz")]);
        assert_eq!(Offered::from_headers(&h).credentials().bearer, None);
        let h = headers(&[("authorization", "Bearer ")]);
        assert_eq!(Offered::from_headers(&h).credentials().bearer, None);
    }

    #[test]
    fn websocket_subprotocols_carry_a_credential_when_no_header_does() {
        use base64::Engine;
        let encode = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let h = headers(&[(
            "sec-websocket-protocol",
            &format!("svc, svc.api-key.{}", encode("k/ey+1")),
        )]);
        assert_eq!(
            Offered::from_headers(&h).credentials().api_key,
            Some("k/ey+1")
        );
        let h = headers(&[(
            "sec-websocket-protocol",
            &format!("svc.bearer.{}, svc", encode("a.b.c")),
        )]);
        assert_eq!(
            Offered::from_headers(&h).credentials().bearer,
            Some("a.b.c")
        );
        let h = headers(&[("sec-websocket-protocol", "svc.api-key.%%%")]);
        assert_eq!(
            Offered::from_headers(&h).credentials().api_key,
            None,
            "not base64url"
        );
        let h = headers(&[
            ("x-api-key", "header"),
            (
                "sec-websocket-protocol",
                &format!("svc.api-key.{}", encode("protocol")),
            ),
        ]);
        assert_eq!(
            Offered::from_headers(&h).credentials().api_key,
            Some("header")
        );
    }

    #[test]
    fn the_rate_key_is_the_first_credential_offered() {
        let h = headers(&[("x-access-token", "tok"), ("authorization", "Bearer b")]);
        assert_eq!(Offered::from_headers(&h).rate_key(), Some("tok"));
        let h = headers(&[("x-api-key", "k"), ("x-access-token", "tok")]);
        assert_eq!(Offered::from_headers(&h).rate_key(), Some("k"));
        assert_eq!(Offered::from_headers(&HeaderMap::new()).rate_key(), None);
    }
}
