//! Set-up of the identity benchmark: a P-256 key whose public half svc reads from
//! `auth.oidc_public_key_file`, and an ES256 token signed with it.

use std::path::PathBuf;

use anyhow::Context;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::ecdsa::signature::Signer;
use p256::pkcs8::{EncodePublicKey, LineEnding};

/// Options of `mint-token`.
#[derive(Debug, clap::Args)]
pub(crate) struct MintArgs {
    /// Where to write the public key (PEM).
    #[arg(long)]
    public_key_out: PathBuf,
    /// `iss`.
    #[arg(long, default_value = "https://idp.bench")]
    issuer: String,
    /// `aud`.
    #[arg(long, default_value = "svc-bench")]
    audience: String,
    /// One group claimed.
    #[arg(long, default_value = "operators")]
    group: String,
}

/// Writes the public key and prints an ES256 token valid for a day.
pub(crate) fn mint(args: &MintArgs) -> anyhow::Result<()> {
    let key = p256::ecdsa::SigningKey::random(&mut rand_core::OsRng);
    let pem = p256::PublicKey::from(key.verifying_key())
        .to_public_key_pem(LineEnding::LF)
        .context("encoding the public key")?;
    std::fs::write(&args.public_key_out, pem)
        .with_context(|| format!("writing {}", args.public_key_out.display()))?;
    let now = chrono::Utc::now().timestamp();
    let header = serde_json::json!({"alg": "ES256", "typ": "JWT"});
    let claims = serde_json::json!({
        "iss": args.issuer, "aud": args.audience, "sub": "bench",
        "groups": [args.group], "iat": now, "exp": now + 86_400,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature: p256::ecdsa::Signature = key.sign(signed.as_bytes());
    println!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()));
    Ok(())
}
