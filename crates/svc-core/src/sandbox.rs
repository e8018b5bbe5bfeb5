//! Sandboxes: the record the store keeps and the API renders, the spawn request, and the TTL
//! arithmetic that extend and admission share.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::{add_duration, elapsed_between, Timestamp};
use crate::duration::GoDuration;
use crate::id::SandboxId;

/// Lifecycle state (decisions §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    /// Admitted and recorded; the provider is creating its runtime.
    Creating,
    /// Spawned and usable.
    Running,
    /// Frozen by a pause: it keeps its runtime, counts toward quotas and does not expire.
    Paused,
    /// A provider failure left it unusable.
    Error,
    /// Gone; the record stays readable for `destroyed_retention`.
    Destroyed,
}

impl SandboxState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Creating => "creating",
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Error => "error",
            SandboxState::Destroyed => "destroyed",
        }
    }

    /// Parses the wire name.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "creating" => Some(SandboxState::Creating),
            "running" => Some(SandboxState::Running),
            "paused" => Some(SandboxState::Paused),
            "error" => Some(SandboxState::Error),
            "destroyed" => Some(SandboxState::Destroyed),
            _ => None,
        }
    }

    /// True for the states that hold (or are getting) a runtime: these count toward capacity.
    pub fn holds_runtime(self) -> bool {
        matches!(
            self,
            SandboxState::Creating | SandboxState::Running | SandboxState::Paused
        )
    }

    /// True once the sandbox is gone for good (`destroyed` or `error`).
    pub fn has_ended(self) -> bool {
        matches!(self, SandboxState::Destroyed | SandboxState::Error)
    }

    /// The state in words, after "sandbox X".
    pub fn describe(self) -> &'static str {
        match self {
            SandboxState::Creating => "is still being created",
            SandboxState::Running => "is running",
            SandboxState::Paused => "is paused",
            SandboxState::Error => "has failed",
            SandboxState::Destroyed => "is destroyed",
        }
    }
}

/// Why a sandbox ended (decisions §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StateReason {
    /// `DELETE /sandboxes/{id}`.
    DestroyedByRequest,
    /// The reaper found it past `expires_at`.
    Expired,
    /// `DELETE /sandboxes` (prune).
    Pruned,
    /// Its runtime disappeared underneath it.
    RuntimeVanished,
    /// The spawn failed or was rolled back after the record existed.
    SpawnFailed,
    /// The provider failed while it ran.
    ProviderFailed,
}

impl StateReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StateReason::DestroyedByRequest => "destroyed_by_request",
            StateReason::Expired => "expired",
            StateReason::Pruned => "pruned",
            StateReason::RuntimeVanished => "runtime_vanished",
            StateReason::SpawnFailed => "spawn_failed",
            StateReason::ProviderFailed => "provider_failed",
        }
    }

    /// Parses the wire name.
    pub fn parse(value: &str) -> Option<Self> {
        [
            StateReason::DestroyedByRequest,
            StateReason::Expired,
            StateReason::Pruned,
            StateReason::RuntimeVanished,
            StateReason::SpawnFailed,
            StateReason::ProviderFailed,
        ]
        .into_iter()
        .find(|r| r.as_str() == value)
    }
}

/// How a sandbox ended: the reason and a free-text message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// Machine-readable reason.
    pub reason: StateReason,
    /// Free text; may be empty.
    pub message: String,
}

impl Ending {
    /// An ending with no message.
    pub fn because(reason: StateReason) -> Self {
        Ending {
            reason,
            message: String::new(),
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
    #[serde(with = "crate::empty_as_none")]
    #[schema(value_type = String)]
    pub owner_id: Option<crate::OwnerId>,
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
    /// Why it ended; absent until it has (`destroyed` or `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<StateReason>,
    /// Free text about how it ended; absent until it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_message: Option<String>,
    /// When it was paused; absent unless it is paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub paused_at: Option<Timestamp>,
    /// Time spent paused before the current pause, which does not count toward the maximum
    /// lifetime.
    #[serde(skip)]
    pub paused_for: Duration,
    /// Default environment for every exec; never rendered, it may hold secrets.
    #[serde(skip)]
    pub env: BTreeMap<String, String>,
    /// What the sandbox may connect to (decisions §18).
    #[serde(default)]
    pub egress: crate::egress::Egress,
    /// How svc reaches its commands and files, on a provider with more than one way: docker's
    /// `agent` or `engine` (decisions §14). Absent for other providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_path: Option<String>,
}

impl Sandbox {
    /// True while it holds (or is getting) a runtime.
    pub fn holds_runtime(&self) -> bool {
        self.state.holds_runtime()
    }

    /// The lifetime from creation that an extend by `ttl` at `now` would give, not counting
    /// time spent paused (decisions §7).
    pub fn lifetime_if_extended(&self, now: Timestamp, ttl: Duration) -> Duration {
        elapsed_between(self.created_at, add_duration(now, ttl)).saturating_sub(self.paused_for)
    }

    /// The 409 for an operation that needs it running: its state, and once it has ended, why
    /// and when (decisions §7).
    pub fn not_running_error(&self) -> crate::Error {
        let ended = self.state.has_ended();
        crate::Error::SandboxNotRunning {
            id: self.id.to_string(),
            state: self.state,
            reason: self.state_reason.filter(|_| ended),
            message: self.state_message.clone().filter(|_| ended),
            ended_at: self.destroyed_at.filter(|_| ended),
        }
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
    /// What the sandbox may connect to; default `{"mode": "all"}`.
    pub egress: Option<crate::egress::Egress>,
}

/// `POST /sandboxes/{id}/extend` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExtendRequest {
    /// New time to live counted from now.
    #[schema(value_type = String, example = "1h")]
    pub ttl: GoDuration,
}

/// What a valid `image` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// A Docker image reference.
    Reference,
    /// An absolute host path (a directory or `.tar` used as a root filesystem), which only
    /// microVM providers accept (decisions §14).
    HostPath,
}

/// Validates an image: an absolute host path without `..` components, or a reference in the
/// grammar of the Docker distribution reference: `[host[:port]/]path[:tag][@digest]`, path
/// components of lowercase letters and digits joined by `.`, `_`, `__` or `-`. Anything else
/// (`../../etc`, spaces, upper case) is a 400 here, before any provider or engine sees it.
pub fn check_image(image: &str) -> Result<ImageKind, crate::Error> {
    if image.starts_with('/') {
        if image.contains('\0') || image.split('/').any(|c| c == "..") || image.len() > 4096 {
            return Err(crate::Error::invalid(
                "image",
                format!(
                    "{} is not a valid host path (absolute, without .. components)",
                    crate::error::echo(image)
                ),
            ));
        }
        return Ok(ImageKind::HostPath);
    }
    check_reference(image).map(|()| ImageKind::Reference)
}

fn check_reference(image: &str) -> Result<(), crate::Error> {
    let invalid = |why: &str| {
        crate::Error::invalid(
            "image",
            format!(
                "{} is not a valid image reference ({why}; expected e.g. alpine:3.20 or registry.example.com:5000/team/app@sha256:...)",
                crate::error::echo(image)
            ),
        )
    };
    if image.is_empty() {
        return Err(invalid("empty"));
    }
    if image.len() > 255 {
        return Err(invalid("longer than 255 bytes"));
    }
    let (name_and_tag, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let valid = digest.split_once(':').is_some_and(|(algorithm, hex)| {
            !algorithm.is_empty()
                && algorithm
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b))
                && hex.len() >= 32
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if !valid {
            return Err(invalid("malformed digest"));
        }
    }
    // A tag follows the last `:` that comes after the last `/` (a `:` before it is a port).
    let last_slash = name_and_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_and_tag[last_slash..].rfind(':') {
        Some(i) => (
            &name_and_tag[..last_slash + i],
            Some(&name_and_tag[last_slash + i + 1..]),
        ),
        None => (name_and_tag, None),
    };
    if let Some(tag) = tag {
        let valid = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !valid {
            return Err(invalid("malformed tag"));
        }
    }
    let mut components: Vec<&str> = name.split('/').collect();
    // The first component is a registry host when it looks like one.
    if components.len() > 1 {
        let first = components[0];
        if first.contains(['.', ':']) || first == "localhost" {
            let (host, port) = match first.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (first, None),
            };
            let host_ok = !host.is_empty()
                && host.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                        && !label.starts_with('-')
                        && !label.ends_with('-')
                });
            let port_ok =
                port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            if !host_ok || !port_ok {
                return Err(invalid("malformed registry host"));
            }
            components.remove(0);
        }
    }
    let component_ok = |component: &str| {
        let bytes = component.as_bytes();
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
            return false;
        }
        // Separators: `.`, `_`, `__` or one or more `-`, always between alphanumerics.
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if alnum(b) {
                i += 1;
                continue;
            }
            let run = bytes[i..].iter().take_while(|c| !alnum(**c)).count();
            let separator = &component[i..i + run];
            let allowed =
                matches!(separator, "." | "_" | "__") || separator.bytes().all(|c| c == b'-');
            if !allowed {
                return false;
            }
            i += run;
        }
        true
    };
    if components.is_empty() || !components.iter().all(|c| component_ok(c)) {
        return Err(invalid(
            "path components are lowercase letters and digits separated by '.', '_', '__' or '-'",
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
            owner_id: None,
            template: None,
            network: None,
            destroyed_at: None,
            state_reason: None,
            state_message: None,
            paused_at: None,
            paused_for: std::time::Duration::ZERO,
            egress: crate::egress::Egress::default(),
            env: BTreeMap::from([("SECRET".into(), "hunter2".into())]),
            exec_path: None,
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
    fn a_refusal_carries_how_the_sandbox_ended() {
        let running = sample();
        let ended_at = add_duration(running.created_at, Duration::from_secs(60));
        let destroyed = Sandbox {
            state: SandboxState::Destroyed,
            destroyed_at: Some(ended_at),
            state_reason: Some(StateReason::RuntimeVanished),
            state_message: Some("the runtime was gone from provider mock".into()),
            ..sample()
        };
        let refusal = destroyed.not_running_error();
        assert_eq!(refusal.kind(), crate::ErrorKind::Conflict);
        assert_eq!(
            refusal.to_string(),
            format!(
                "sandbox {} was destroyed: runtime_vanished (the runtime was gone from provider \
                 mock) at 2026-01-01T00:01:00Z",
                destroyed.id
            )
        );
        let creating = Sandbox {
            state: SandboxState::Creating,
            ..sample()
        };
        assert_eq!(
            creating.not_running_error().to_string(),
            format!("sandbox {} is still being created", creating.id)
        );
    }

    #[test]
    fn image_references() {
        for good in [
            "alpine",
            "alpine:latest",
            "library/alpine:3.20",
            "svc-test-busybox:latest",
            "registry.example.com:5000/team/app:v1.2_rc-3",
            "localhost/app",
            "ghcr.io/a__b/c.d-e",
            "alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "a---b",
        ] {
            assert!(check_image(good).is_ok(), "{good}");
        }
        assert_eq!(
            check_image("/var/lib/rootfs.tar").unwrap(),
            ImageKind::HostPath
        );
        assert_eq!(check_image("alpine").unwrap(), ImageKind::Reference);
        for bad in [
            "",
            "../../etc",
            "/etc/../root",
            "Alpine",
            "alpine:",
            "alpine:la test",
            "a b",
            "a//b",
            "-a",
            "a_",
            "a...b",
            "a___b",
            "alpine@sha256:xyz",
            "reg:abc/app",
        ] {
            let err = check_image(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::BadRequest, "{bad}");
        }
        let huge = "a".repeat(10_000);
        assert!(check_image(&huge).unwrap_err().to_string().len() < 300);
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
