//! A compact JWS (`header.payload.signature`) taken apart, and the claims svc reads checked:
//! `iss`, `aud`, `exp`, `nbf` (with clock skew) and `sub`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::keys::Algorithm;

/// Longest token accepted; real ID and access tokens are a few KiB.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a token was refused; the text goes into the 401 message (never the token itself).
pub type Refusal = String;

/// The JOSE header fields svc reads.
#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
    /// Extensions the verifier must understand; svc understands none.
    crit: Option<Value>,
}

/// A token whose structure is sound and whose algorithm is allowed; not yet verified.
pub struct Parsed<'a> {
    /// From the header.
    pub algorithm: Algorithm,
    /// From the header.
    pub kid: Option<String>,
    /// `header.payload`: what the signature covers.
    pub signed: &'a [u8],
    /// The decoded signature.
    pub signature: Vec<u8>,
    /// The encoded payload, decoded only after the signature holds.
    payload: &'a str,
}

fn decode(part: &str, what: &str) -> Result<Vec<u8>, Refusal> {
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| format!("the token's {what} is not base64url"))
}

/// Splits and checks the header.
pub fn parse(token: &str) -> Result<Parsed<'_>, Refusal> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(format!("the token is longer than {MAX_TOKEN_BYTES} bytes"));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the token is not a compact JWS (header.payload.signature)".to_owned());
    };
    let header: Header = serde_json::from_slice(&decode(header, "header")?)
        .map_err(|_| "the token's header is not a JOSE header".to_owned())?;
    if header.crit.is_some() {
        return Err("the token's header has critical extensions svc does not support".to_owned());
    }
    let algorithm = Algorithm::parse(&header.alg).ok_or_else(|| {
        format!(
            "the token's algorithm {:?} is not accepted (RS256, ES256, ES384, ES512)",
            svc_core::error::cut(&header.alg)
        )
    })?;
    Ok(Parsed {
        algorithm,
        kid: header.kid,
        signed: &token.as_bytes()[..token.len() - signature.len() - 1],
        signature: decode(signature, "signature")?,
        payload,
    })
}

/// The rules the claims must meet.
pub struct ClaimRules<'a> {
    /// Required `iss`.
    pub issuer: &'a str,
    /// Required member of `aud`; empty: not checked.
    pub audience: &'a str,
    /// Tolerance on `exp` and `nbf`, in seconds.
    pub skew_secs: i64,
    /// Now, in seconds since the epoch.
    pub now: i64,
}

/// The checked claims.
pub struct Claims {
    /// `sub`.
    pub subject: String,
    /// `exp`, in seconds since the epoch.
    pub expires_at: i64,
    /// `nbf`, if present.
    pub not_before: Option<i64>,
    /// Every claim, for the groups and tenant claims whose names are configured.
    pub all: Map<String, Value>,
}

fn seconds(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, Refusal> {
    match claims.get(name) {
        None => Ok(None),
        // NumericDate may carry a fraction; the whole seconds are what counts.
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| format!("the token's {name} claim is not a NumericDate")),
        Some(_) => Err(format!("the token's {name} claim is not a NumericDate")),
    }
}

impl Parsed<'_> {
    /// Decodes the payload and checks it against `rules`. Call only after the signature held.
    pub fn claims(&self, rules: &ClaimRules<'_>) -> Result<Claims, Refusal> {
        let all: Map<String, Value> = serde_json::from_slice(&decode(self.payload, "payload")?)
            .map_err(|_| "the token's payload is not a JSON object".to_owned())?;
        if all.get("iss").and_then(Value::as_str) != Some(rules.issuer) {
            return Err("the token's issuer (iss) is not the configured issuer".to_owned());
        }
        if !rules.audience.is_empty() {
            let audience_ok = match all.get("aud") {
                Some(Value::String(aud)) => aud == rules.audience,
                Some(Value::Array(auds)) => {
                    auds.iter().any(|aud| aud.as_str() == Some(rules.audience))
                }
                _ => false,
            };
            if !audience_ok {
                return Err("the token's audience (aud) does not include this service".to_owned());
            }
        }
        let expires_at =
            seconds(&all, "exp")?.ok_or_else(|| "the token has no expiry (exp)".to_owned())?;
        if rules.now > expires_at.saturating_add(rules.skew_secs) {
            return Err("the token has expired".to_owned());
        }
        let not_before = seconds(&all, "nbf")?;
        if not_before.is_some_and(|nbf| rules.now < nbf.saturating_sub(rules.skew_secs)) {
            return Err("the token is not valid yet (nbf)".to_owned());
        }
        let subject = match all.get("sub").and_then(Value::as_str) {
            Some(sub) if !sub.is_empty() => sub.to_owned(),
            _ => return Err("the token has no subject (sub)".to_owned()),
        };
        Ok(Claims {
            subject,
            expires_at,
            not_before,
            all,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn token(header: &Value, claims: &Value) -> String {
        format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string()),
            URL_SAFE_NO_PAD.encode(b"sig")
        )
    }

    fn rules(now: i64) -> ClaimRules<'static> {
        ClaimRules {
            issuer: "https://idp",
            audience: "svc",
            skew_secs: 60,
            now,
        }
    }

    #[test]
    fn only_the_four_algorithms_parse() {
        let claims = json!({});
        for alg in ["RS256", "ES256", "ES384", "ES512"] {
            let t = token(&json!({"alg": alg}), &claims);
            assert_eq!(parse(&t).unwrap().algorithm.as_str(), alg);
        }
        for alg in [
            "none", "None", "HS256", "HS512", "RS384", "PS256", "EdDSA", "",
        ] {
            let t = token(&json!({"alg": alg}), &claims);
            assert!(parse(&t).is_err(), "{alg}");
        }
        assert!(parse(&"a".repeat(MAX_TOKEN_BYTES + 1)).is_err());
        assert!(parse("a.b").is_err());
        assert!(parse("a.b.c.d").is_err());
        // Padding is not base64url as JWS uses it.
        let padded = format!("{}=.e30.c2ln", URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256"}"#));
        assert!(parse(&padded).is_err());
    }

    #[test]
    fn claims_are_checked_with_skew() {
        let now = 1_000_000;
        let base = json!({"iss": "https://idp", "aud": ["other", "svc"], "sub": "s",
            "exp": now + 10, "nbf": now - 10});
        let check = |claims: &Value| {
            let t = token(&json!({"alg": "ES256"}), claims);
            parse(&t).unwrap().claims(&rules(now)).map(|c| c.subject)
        };
        assert_eq!(check(&base).unwrap(), "s");
        let with = |field: &str, value: Value| {
            let mut c = base.clone();
            c[field] = value;
            c
        };
        // Within the skew either side.
        assert!(check(&with("exp", json!(now - 59))).is_ok());
        assert!(check(&with("nbf", json!(now + 59))).is_ok());
        // A fractional NumericDate counts its whole seconds.
        assert!(check(&with("exp", json!(now as f64 + 10.5))).is_ok());
        for (field, value, why) in [
            ("exp", json!(now - 61), "expired"),
            ("exp", json!("tomorrow"), "NumericDate"),
            ("nbf", json!(now + 61), "not valid yet"),
            ("iss", json!("https://idp/"), "issuer"),
            ("aud", json!("other"), "audience"),
            ("aud", json!(["x"]), "audience"),
            ("sub", json!(42), "subject"),
        ] {
            let err = check(&with(field, value)).unwrap_err();
            assert!(err.contains(why), "{field}: {err}");
        }
        let mut no_exp = base.clone();
        no_exp.as_object_mut().unwrap().remove("exp");
        assert!(check(&no_exp).unwrap_err().contains("expiry"));
    }
}
