//! Verification keys for OIDC tokens. Each key is bound to exactly one algorithm when it is
//! loaded (RSA → RS256, P-256 → ES256, P-384 → ES384, P-521 → ES512), and a token is checked
//! only against keys of the algorithm its header names: no algorithm confusion is possible.
//! Signatures are checked by RustCrypto's maintained crates (`rsa`, `p256`, `p384`, `p521`);
//! common JWT crates lack ES512.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rsa::pkcs1v15;
use rsa::pkcs8::DecodePublicKey;
use rsa::signature::Verifier;
use rsa::traits::PublicKeyParts;
use serde::Deserialize;
use sha2::Sha256;

/// The accepted signing algorithms (interface Authentication 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// ECDSA on P-384 with SHA-384.
    Es384,
    /// ECDSA on P-521 with SHA-512.
    Es512,
}

impl Algorithm {
    /// From a JOSE header's `alg`; `none`, HS* and everything else are refused.
    pub fn parse(alg: &str) -> Option<Self> {
        match alg {
            "RS256" => Some(Algorithm::Rs256),
            "ES256" => Some(Algorithm::Es256),
            "ES384" => Some(Algorithm::Es384),
            "ES512" => Some(Algorithm::Es512),
            _ => None,
        }
    }

    /// The JOSE name.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
            Algorithm::Es512 => "ES512",
        }
    }
}

/// RSA keys shorter than this are refused (NIST SP 800-131A).
const MIN_RSA_BITS: usize = 2048;

/// One public key, bound to its algorithm.
#[derive(Clone)]
pub enum VerifyingKey {
    /// RS256.
    Rs256(pkcs1v15::VerifyingKey<Sha256>),
    /// ES256.
    Es256(p256::ecdsa::VerifyingKey),
    /// ES384.
    Es384(p384::ecdsa::VerifyingKey),
    /// ES512.
    Es512(p521::ecdsa::VerifyingKey),
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifyingKey({})", self.algorithm().as_str())
    }
}

impl VerifyingKey {
    /// The one algorithm this key verifies.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            VerifyingKey::Rs256(_) => Algorithm::Rs256,
            VerifyingKey::Es256(_) => Algorithm::Es256,
            VerifyingKey::Es384(_) => Algorithm::Es384,
            VerifyingKey::Es512(_) => Algorithm::Es512,
        }
    }

    /// Whether `signature` signs `message` under this key. ECDSA signatures are JOSE's fixed
    /// `r || s` form.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match self {
            VerifyingKey::Rs256(key) => pkcs1v15::Signature::try_from(signature)
                .is_ok_and(|sig| key.verify(message, &sig).is_ok()),
            VerifyingKey::Es256(key) => p256::ecdsa::Signature::from_slice(signature)
                .is_ok_and(|sig| key.verify(message, &sig).is_ok()),
            VerifyingKey::Es384(key) => p384::ecdsa::Signature::from_slice(signature)
                .is_ok_and(|sig| key.verify(message, &sig).is_ok()),
            VerifyingKey::Es512(key) => p521::ecdsa::Signature::from_slice(signature)
                .is_ok_and(|sig| key.verify(message, &sig).is_ok()),
        }
    }

    fn rsa(key: rsa::RsaPublicKey) -> Result<Self, String> {
        let bits = key.n().bits();
        if bits < MIN_RSA_BITS {
            return Err(format!(
                "RSA key of {bits} bits; at least {MIN_RSA_BITS} are required"
            ));
        }
        Ok(VerifyingKey::Rs256(pkcs1v15::VerifyingKey::new(key)))
    }

    /// One PEM public key (`-----BEGIN PUBLIC KEY-----`, SubjectPublicKeyInfo): RSA, P-256,
    /// P-384 or P-521.
    pub fn from_pem(pem: &str) -> Result<Self, String> {
        if let Ok(key) = rsa::RsaPublicKey::from_public_key_pem(pem) {
            return Self::rsa(key);
        }
        if let Ok(key) = p256::PublicKey::from_public_key_pem(pem) {
            return Ok(VerifyingKey::Es256(key.into()));
        }
        if let Ok(key) = p384::PublicKey::from_public_key_pem(pem) {
            return Ok(VerifyingKey::Es384(key.into()));
        }
        if let Ok(key) = p521::PublicKey::from_public_key_pem(pem) {
            let point = key.to_sec1_bytes();
            return p521::ecdsa::VerifyingKey::from_sec1_bytes(&point)
                .map(VerifyingKey::Es512)
                .map_err(|_| "invalid P-521 public key".to_owned());
        }
        Err("not a PEM public key (SubjectPublicKeyInfo) of RSA, P-256, P-384 or P-521".to_owned())
    }

    /// One JSON Web Key; `Err` says why it cannot be used.
    pub fn from_jwk(jwk: &Jwk) -> Result<Self, String> {
        let field = |value: &Option<String>, name: &str| -> Result<Vec<u8>, String> {
            let text = value.as_deref().ok_or_else(|| format!("missing {name}"))?;
            URL_SAFE_NO_PAD
                .decode(text)
                .map_err(|_| format!("{name} is not base64url"))
        };
        let key = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
            ("RSA", _) => {
                let n = rsa::BigUint::from_bytes_be(&field(&jwk.n, "n")?);
                let e = rsa::BigUint::from_bytes_be(&field(&jwk.e, "e")?);
                let key =
                    rsa::RsaPublicKey::new(n, e).map_err(|e| format!("invalid RSA key: {e}"))?;
                Self::rsa(key)?
            }
            ("EC", Some(crv)) => {
                let mut point = vec![0x04];
                point.extend(field(&jwk.x, "x")?);
                point.extend(field(&jwk.y, "y")?);
                let invalid = |_| format!("invalid {crv} point");
                match crv {
                    "P-256" => VerifyingKey::Es256(
                        p256::ecdsa::VerifyingKey::from_sec1_bytes(&point).map_err(invalid)?,
                    ),
                    "P-384" => VerifyingKey::Es384(
                        p384::ecdsa::VerifyingKey::from_sec1_bytes(&point).map_err(invalid)?,
                    ),
                    "P-521" => VerifyingKey::Es512(
                        p521::ecdsa::VerifyingKey::from_sec1_bytes(&point).map_err(invalid)?,
                    ),
                    other => return Err(format!("unsupported curve {other:?}")),
                }
            }
            (kty, _) => return Err(format!("unsupported key type {kty:?}")),
        };
        // A key that names its algorithm must name the one its type implies.
        if let Some(alg) = &jwk.alg {
            if alg != key.algorithm().as_str() {
                return Err(format!(
                    "alg {alg:?} does not fit a {} key",
                    key.algorithm().as_str()
                ));
            }
        }
        Ok(key)
    }
}

/// A JSON Web Key as published in a JWKS document (the members svc reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Jwk {
    /// `RSA` or `EC`.
    pub kty: String,
    /// Key ID.
    pub kid: Option<String>,
    /// Intended algorithm, if stated.
    pub alg: Option<String>,
    /// `sig` or `enc`, if stated.
    #[serde(rename = "use")]
    pub key_use: Option<String>,
    /// RSA modulus.
    pub n: Option<String>,
    /// RSA exponent.
    pub e: Option<String>,
    /// EC curve.
    pub crv: Option<String>,
    /// EC x.
    pub x: Option<String>,
    /// EC y.
    pub y: Option<String>,
}

/// A JWKS document.
#[derive(Debug, Clone, Deserialize)]
pub struct JwkSet {
    /// Its keys.
    pub keys: Vec<Jwk>,
}

/// A usable key and its ID.
#[derive(Debug, Clone)]
pub struct KeyEntry {
    /// The `kid`, if the key has one.
    pub kid: Option<String>,
    /// The key.
    pub key: VerifyingKey,
}

/// The signing keys of a JWKS document; keys for encryption or of unsupported types are
/// skipped (and logged), so one odd key does not lock every caller out.
pub fn signing_keys(set: &JwkSet) -> Vec<KeyEntry> {
    set.keys
        .iter()
        .filter(|jwk| jwk.key_use.as_deref().is_none_or(|u| u == "sig"))
        .filter_map(|jwk| match VerifyingKey::from_jwk(jwk) {
            Ok(key) => Some(KeyEntry {
                kid: jwk.kid.clone(),
                key,
            }),
            Err(reason) => {
                tracing::warn!(kid = ?jwk.kid, %reason, "skipping a JWKS key");
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use p256::ecdsa::signature::Signer;
    use serde_json::json;

    use super::*;

    fn jwk(value: serde_json::Value) -> Jwk {
        serde_json::from_value(value).unwrap()
    }

    fn p256_jwk(key: &p256::ecdsa::SigningKey, extra: serde_json::Value) -> serde_json::Value {
        let point = key.verifying_key().to_encoded_point(false);
        let mut value = json!({"kty": "EC", "crv": "P-256", "kid": "k",
            "x": URL_SAFE_NO_PAD.encode(point.x().unwrap()),
            "y": URL_SAFE_NO_PAD.encode(point.y().unwrap())});
        if let serde_json::Value::Object(extra) = extra {
            value.as_object_mut().unwrap().extend(extra);
        }
        value
    }

    #[test]
    fn a_key_verifies_only_its_own_algorithm_and_signatures() {
        let signing = p256::ecdsa::SigningKey::random(&mut rand_core::OsRng);
        let key = VerifyingKey::from_jwk(&jwk(p256_jwk(&signing, json!({})))).unwrap();
        assert_eq!(key.algorithm(), Algorithm::Es256);
        let signature: p256::ecdsa::Signature = signing.sign(b"message");
        assert!(key.verify(b"message", &signature.to_bytes()));
        assert!(!key.verify(b"messagE", &signature.to_bytes()));
        assert!(!key.verify(b"message", &[0u8; 64]));
        assert!(!key.verify(b"message", b"short"));
    }

    #[test]
    fn a_jwk_naming_another_algorithm_is_refused() {
        let signing = p256::ecdsa::SigningKey::random(&mut rand_core::OsRng);
        for alg in ["HS256", "RS256", "ES384", "none"] {
            let err =
                VerifyingKey::from_jwk(&jwk(p256_jwk(&signing, json!({"alg": alg})))).unwrap_err();
            assert!(err.contains("does not fit"), "{alg}: {err}");
        }
        assert!(VerifyingKey::from_jwk(&jwk(p256_jwk(&signing, json!({"alg": "ES256"})))).is_ok());
    }

    #[test]
    fn unusable_keys_are_skipped_not_fatal() {
        let signing = p256::ecdsa::SigningKey::random(&mut rand_core::OsRng);
        let small = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 1024).unwrap();
        let set: JwkSet = serde_json::from_value(json!({"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {"kty": "RSA", "kid": "small", "n": URL_SAFE_NO_PAD.encode(small.n().to_bytes_be()),
             "e": URL_SAFE_NO_PAD.encode(small.e().to_bytes_be())},
            {"kty": "EC", "crv": "P-192", "kid": "curve", "x": "AA", "y": "AA"},
            {"kty": "EC", "crv": "P-256", "kid": "bad-point", "x": "AA", "y": "AA"},
            p256_jwk(&signing, json!({"kid": "enc", "use": "enc"})),
            p256_jwk(&signing, json!({"kid": "good", "use": "sig"})),
        ]}))
        .unwrap();
        let keys = signing_keys(&set);
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("good"));
    }

    #[test]
    fn pem_keys_of_every_curve_load() {
        use p256::pkcs8::{EncodePublicKey, LineEnding};
        let p256_pem = p256::ecdsa::SigningKey::random(&mut rand_core::OsRng)
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        assert_eq!(
            VerifyingKey::from_pem(&p256_pem).unwrap().algorithm(),
            Algorithm::Es256
        );
        let p384_pem = p384::ecdsa::SigningKey::random(&mut rand_core::OsRng)
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        assert_eq!(
            VerifyingKey::from_pem(&p384_pem).unwrap().algorithm(),
            Algorithm::Es384
        );
        assert!(VerifyingKey::from_pem("not a key").is_err());
    }
}
