//! A test identity provider: RSA, P-256, P-384 and P-521 keys, a JWKS server on loopback that
//! counts its fetches and can rotate keys, and a minter of tokens signed (or mis-signed) with
//! any of them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rsa::pkcs8::{EncodePublicKey, LineEnding};
use rsa::signature::{RandomizedSigner, SignatureEncoding, Signer};
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};
use sha2::Sha256;

pub const ISSUER: &str = "https://idp.test";
pub const AUDIENCE: &str = "svc-tests";

/// A signing key of one algorithm.
#[derive(Clone)]
pub enum Key {
    Rs256(rsa::RsaPrivateKey),
    Es256(p256::ecdsa::SigningKey),
    Es384(p384::ecdsa::SigningKey),
    Es512(Box<p521::ecdsa::SigningKey>),
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// RSA key generation is slow without optimisation: one key per test process.
fn rsa_key() -> rsa::RsaPrivateKey {
    static KEY: OnceLock<rsa::RsaPrivateKey> = OnceLock::new();
    KEY.get_or_init(|| rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 2048).unwrap())
        .clone()
}

impl Key {
    pub fn generate(alg: &str) -> Key {
        let mut rng = rand_core::OsRng;
        match alg {
            "RS256" => Key::Rs256(rsa_key()),
            "ES256" => Key::Es256(p256::ecdsa::SigningKey::random(&mut rng)),
            "ES384" => Key::Es384(p384::ecdsa::SigningKey::random(&mut rng)),
            "ES512" => Key::Es512(Box::new(p521::ecdsa::SigningKey::random(&mut rng))),
            other => panic!("no such algorithm {other}"),
        }
    }

    pub fn alg(&self) -> &'static str {
        match self {
            Key::Rs256(_) => "RS256",
            Key::Es256(_) => "ES256",
            Key::Es384(_) => "ES384",
            Key::Es512(_) => "ES512",
        }
    }

    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match self {
            Key::Rs256(key) => rsa::pkcs1v15::SigningKey::<Sha256>::new(key.clone())
                .sign(message)
                .to_vec(),
            Key::Es256(key) => {
                let signature: p256::ecdsa::Signature = key.sign(message);
                signature.to_vec()
            }
            Key::Es384(key) => {
                let signature: p384::ecdsa::Signature = key.sign(message);
                signature.to_vec()
            }
            Key::Es512(key) => {
                // p521 signs with fresh randomness (no RFC 6979 here).
                let signature: p521::ecdsa::Signature =
                    key.sign_with_rng(&mut rand_core::OsRng, message);
                signature.to_vec()
            }
        }
    }

    /// The public JWK, with `kid`.
    pub fn jwk(&self, kid: &str) -> Value {
        match self {
            Key::Rs256(key) => json!({
                "kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                "n": b64(&key.n().to_bytes_be()), "e": b64(&key.e().to_bytes_be()),
            }),
            Key::Es256(key) => {
                let point = key.verifying_key().to_encoded_point(false);
                json!({"kty": "EC", "kid": kid, "crv": "P-256",
                    "x": b64(point.x().unwrap()), "y": b64(point.y().unwrap())})
            }
            Key::Es384(key) => {
                let point = key.verifying_key().to_encoded_point(false);
                json!({"kty": "EC", "kid": kid, "crv": "P-384",
                    "x": b64(point.x().unwrap()), "y": b64(point.y().unwrap())})
            }
            Key::Es512(key) => {
                let point = p521::ecdsa::VerifyingKey::from(key.as_ref()).to_encoded_point(false);
                json!({"kty": "EC", "kid": kid, "crv": "P-521",
                    "x": b64(point.x().unwrap()), "y": b64(point.y().unwrap())})
            }
        }
    }

    /// The public key as PEM (SubjectPublicKeyInfo).
    pub fn public_pem(&self) -> String {
        match self {
            Key::Rs256(key) => key.to_public_key().to_public_key_pem(LineEnding::LF),
            Key::Es256(key) => {
                p256::PublicKey::from(key.verifying_key()).to_public_key_pem(LineEnding::LF)
            }
            Key::Es384(key) => {
                p384::PublicKey::from(key.verifying_key()).to_public_key_pem(LineEnding::LF)
            }
            Key::Es512(key) => {
                let point = p521::ecdsa::VerifyingKey::from(key.as_ref()).to_encoded_point(false);
                p521::PublicKey::from_sec1_bytes(point.as_bytes())
                    .unwrap()
                    .to_public_key_pem(LineEnding::LF)
            }
        }
        .unwrap()
    }
}

/// `header.payload.signature` from raw parts.
pub fn compact(header: &Value, claims: &Value, sign: impl FnOnce(&[u8]) -> Vec<u8>) -> String {
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = sign(signed.as_bytes());
    format!("{signed}.{}", b64(&signature))
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    svc_core::Clock::now(&svc_core::clock::SystemClock).timestamp()
}

/// Claims valid for an hour: issuer, audience, subject, groups, and a tenant when given.
pub fn claims(sub: &str, groups: &[&str], tenant: Option<&str>) -> Value {
    let mut claims = json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": sub, "groups": groups,
        "iat": now(), "nbf": now() - 5, "exp": now() + 3600,
    });
    if let Some(tenant) = tenant {
        claims["tenant_id"] = json!(tenant);
    }
    claims
}

/// The identity provider: named keys, and the JWKS document it serves.
pub struct Idp {
    pub keys: Vec<(String, Key)>,
    published: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
    pub jwks_url: String,
}

impl Idp {
    /// One key per algorithm, with kids `rs`, `es256`, `es384`, `es512`, served on loopback.
    pub async fn start() -> Idp {
        let keys: Vec<(String, Key)> = [
            ("rs", "RS256"),
            ("es256", "ES256"),
            ("es384", "ES384"),
            ("es512", "ES512"),
        ]
        .into_iter()
        .map(|(kid, alg)| (kid.to_owned(), Key::generate(alg)))
        .collect();
        let document =
            json!({"keys": keys.iter().map(|(kid, key)| key.jwk(kid)).collect::<Vec<_>>()});
        let published = Arc::new(Mutex::new(document));
        let fetches = Arc::new(AtomicUsize::new(0));
        let app = {
            let published = Arc::clone(&published);
            let fetches = Arc::clone(&fetches);
            axum::Router::new().route(
                "/jwks",
                axum::routing::get(move || {
                    let published = Arc::clone(&published);
                    let fetches = Arc::clone(&fetches);
                    async move {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        axum::Json(published.lock().unwrap().clone())
                    }
                }),
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Idp {
            keys,
            published,
            fetches,
            jwks_url: format!("http://{addr}/jwks"),
        }
    }

    pub fn key(&self, kid: &str) -> &Key {
        &self.keys.iter().find(|(k, _)| k == kid).unwrap().1
    }

    /// A token signed by key `kid`, naming it.
    pub fn mint(&self, kid: &str, claims: &Value) -> String {
        let key = self.key(kid);
        compact(
            &json!({"alg": key.alg(), "kid": kid, "typ": "JWT"}),
            claims,
            |m| key.sign(m),
        )
    }

    /// An ES256 token for `sub` in `groups` (and `tenant`).
    pub fn token(&self, sub: &str, groups: &[&str], tenant: Option<&str>) -> String {
        self.mint("es256", &claims(sub, groups, tenant))
    }

    /// Publishes one more key.
    pub fn publish(&mut self, kid: &str, key: Key) {
        self.published.lock().unwrap()["keys"]
            .as_array_mut()
            .unwrap()
            .push(key.jwk(kid));
        self.keys.push((kid.to_owned(), key));
    }

    /// Takes key `kid` out of the JWKS (the key stays here, to sign with).
    pub fn withdraw(&self, kid: &str) {
        self.published.lock().unwrap()["keys"]
            .as_array_mut()
            .unwrap()
            .retain(|jwk| jwk["kid"] != kid);
    }

    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// Points `config` at this provider, with groups `admins`, `operators`, `viewers`, `leads`.
    pub fn configure(&self, config: &mut svc_core::config::Config) {
        let auth = &mut config.auth;
        auth.oidc_issuer = ISSUER.to_owned();
        auth.oidc_jwks_url = self.jwks_url.clone();
        auth.oidc_audience = AUDIENCE.to_owned();
        auth.oidc_admin_groups = vec!["admins".to_owned()];
        auth.oidc_operator_groups = vec!["operators".to_owned()];
        auth.oidc_viewer_groups = vec!["viewers".to_owned()];
        auth.oidc_tenant_admin_groups = vec!["leads".to_owned()];
    }
}

/// `Authorization: Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}
