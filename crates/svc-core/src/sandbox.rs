//! Sandboxes: the record the store keeps and the API renders, the spawn request, and the TTL
//! arithmetic that extend and admission share.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::{add_duration, elapsed_between, Timestamp};
use crate::duration::GoDuration;
use crate::id::SandboxId;

/// Lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    /// Spawned and usable.
    Running,
    /// A provider failure left it unusable.
    Error,
    /// Gone; the record stays readable for `destroyed_retention`.
    Destroyed,
}

impl SandboxState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Running => "running",
            SandboxState::Error => "error",
            SandboxState::Destroyed => "destroyed",
        }
    }

    /// Parses the wire name.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "running" => Some(SandboxState::Running),
            "error" => Some(SandboxState::Error),
            "destroyed" => Some(SandboxState::Destroyed),
            _ => None,
        }
    }
}

/// String-to-string metadata.
pub type Metadata = BTreeMap<String, String>;

/// A sandbox record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Sandbox {
    /// `sb-` + 16 hex characters.
    #[schema(value_type = String, example = "sb-0123456789abcdef")]
    pub id: SandboxId,
    /// Lifecycle state.
    pub state: SandboxState,
    /// Provider name.
    pub provider: String,
    /// Image the sandbox runs.
    pub image: String,
    /// Memory limit in MiB.
    pub memory_mb: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// When it was spawned.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When the reaper destroys it.
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
    /// Caller-supplied labels.
    pub metadata: Metadata,
    /// `<id>.<server.preview_domain>`.
    pub preview_domain: String,
    /// The worker that holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// The tenant it belongs to.
    pub tenant_id: String,
    /// The owner (`X-User-ID` or `owner_id`), empty when anonymous.
    pub owner_id: String,
    /// The template it was spawned from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Network mode requested at spawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// When it was destroyed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub destroyed_at: Option<Timestamp>,
    /// Default environment for every exec; never rendered, it may hold secrets.
    #[serde(skip)]
    pub env: BTreeMap<String, String>,
}

impl Sandbox {
    /// True unless destroyed.
    pub fn is_active(&self) -> bool {
        self.state != SandboxState::Destroyed
    }

    /// The lifetime from creation that an extend by `ttl` at `now` would give.
    pub fn lifetime_if_extended(&self, now: Timestamp, ttl: Duration) -> Duration {
        elapsed_between(self.created_at, add_duration(now, ttl))
    }
}

/// `POST /sandboxes` body. Every field is optional; server defaults apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct SpawnRequest {
    /// Image; default `defaults.image` or the template's.
    pub image: Option<String>,
    /// Provider name; default the server's default provider.
    pub provider: Option<String>,
    /// Memory limit in MiB.
    pub memory_mb: Option<u32>,
    /// Virtual CPUs.
    pub vcpus: Option<u32>,
    /// Time to live, e.g. `30m`.
    #[schema(value_type = Option<String>, example = "30m")]
    pub ttl: Option<GoDuration>,
    /// Labels.
    pub metadata: Option<Metadata>,
    /// Owner; overridden by the `X-User-ID` header.
    pub owner_id: Option<String>,
    /// Template to start from.
    pub template: Option<String>,
    /// Network mode (`none`, `bridge`, or a network name).
    pub network: Option<String>,
    /// Default environment for every exec in this sandbox.
    pub env: Option<BTreeMap<String, String>>,
    /// Tenant (API-key and admin callers only).
    pub tenant_id: Option<String>,
}

/// `POST /sandboxes/{id}/extend` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExtendRequest {
    /// New time to live counted from now.
    #[schema(value_type = String, example = "1h")]
    pub ttl: GoDuration,
}

/// Validates an image reference: non-empty, no whitespace or control characters.
pub fn check_image(image: &str) -> Result<(), crate::Error> {
    if image.trim().is_empty() || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(crate::Error::invalid(
            "image",
            "must be a non-empty image reference without whitespace",
        ));
    }
    Ok(())
}

/// A size field (`memory_mb`, `vcpus`): the given value when at least 1, else `default`.
pub fn size_or_default(field: &str, value: Option<u32>, default: u32) -> Result<u32, crate::Error> {
    match value {
        Some(0) => Err(crate::Error::invalid(field, "must be at least 1")),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// Environment variable names must be non-empty and hold no `=` or NUL; values no NUL.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), crate::Error> {
    let bad_name = env.keys().any(|k| k.is_empty() || k.contains(['=', '\0']));
    let bad_value = env.values().any(|v| v.contains('\0'));
    if bad_name || bad_value {
        return Err(crate::Error::invalid(
            "env",
            "variable names must be non-empty without '=' or NUL, and values without NUL",
        ));
    }
    Ok(())
}

/// A TTL must be positive: a sandbox that expires as it is created is never what was meant.
pub fn check_ttl_positive(ttl: GoDuration) -> Result<(), crate::Error> {
    if ttl.is_zero() {
        return Err(crate::Error::invalid("ttl", "must be greater than 0s"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn sample() -> Sandbox {
        let created = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        Sandbox {
            id: SandboxId::generate(),
            state: SandboxState::Running,
            provider: "mock".into(),
            image: "alpine:latest".into(),
            memory_mb: 512,
            vcpus: 1,
            created_at: created,
            expires_at: add_duration(created, Duration::from_secs(1800)),
            metadata: Metadata::new(),
            preview_domain: "x.localhost".into(),
            worker_id: Some("local".into()),
            tenant_id: "default".into(),
            owner_id: String::new(),
            template: None,
            network: None,
            destroyed_at: None,
            env: BTreeMap::from([("SECRET".into(), "hunter2".into())]),
        }
    }

    #[test]
    fn renders_wire_fields_and_hides_env() {
        let json = serde_json::to_value(sample()).unwrap();
        assert_eq!(json["state"], "running");
        assert_eq!(json["created_at"], "2026-01-01T00:00:00Z");
        assert_eq!(json["worker_id"], "local");
        assert!(json.get("env").is_none());
        assert!(!json.to_string().contains("hunter2"));
    }

    #[test]
    fn env_rules() {
        let ok = BTreeMap::from([("A".to_owned(), "x=y".to_owned())]);
        assert!(check_env(&ok).is_ok());
        for (k, v) in [("", "x"), ("A=B", "x"), ("A", "nul\0")] {
            let env = BTreeMap::from([(k.to_owned(), v.to_owned())]);
            assert!(check_env(&env).is_err(), "{k:?}={v:?}");
        }
    }

    #[test]
    fn extend_lifetime_counts_from_creation() {
        let sandbox = sample();
        let now = add_duration(sandbox.created_at, Duration::from_secs(600));
        assert_eq!(
            sandbox.lifetime_if_extended(now, Duration::from_secs(3600)),
            Duration::from_secs(4200)
        );
    }
}
