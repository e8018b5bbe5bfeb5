//! Templates: named spawn presets. Omitted fields are resolved against the server defaults when
//! the template is saved, so a stored template always renders every field.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::duration::GoDuration;
use crate::sandbox::Metadata;

/// A stored template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Template {
    /// Unique name, across every tenant.
    pub name: String,
    /// The tenant that owns it; null for a global template, which every tenant sees and only
    /// API-key and admin callers change (decisions §30).
    pub tenant_id: Option<String>,
    /// Image.
    pub image: String,
    /// Memory limit in MiB.
    pub memory_mb: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Time to live of spawned sandboxes.
    #[schema(value_type = String, example = "30m0s")]
    pub ttl: GoDuration,
    /// Provider name.
    pub provider: String,
    /// Labels copied to spawned sandboxes.
    pub metadata: Metadata,
    /// What its sandboxes may connect to (decisions §18).
    #[serde(default)]
    pub egress: crate::egress::Egress,
    /// How many started runtimes svc keeps ready for this template's spawns (decisions §17).
    #[serde(default)]
    pub warm_pool: u32,
    /// How many of them are ready now, on this server (not stored).
    #[serde(default)]
    pub warm_ready: u32,
    /// Creation time.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// Last update.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// `POST /templates` body (and `PUT /templates/{name}` without `name`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct TemplateSpec {
    /// Unique name (create only).
    pub name: Option<String>,
    /// The owning tenant (create only; a replace keeps the template's own). An OIDC caller's
    /// templates are its tenant's, so it may name only that one; API-key and admin callers may
    /// name any existing tenant, and their templates are global (null) when they name none.
    pub tenant_id: Option<String>,
    /// Image; default `defaults.image`.
    pub image: Option<String>,
    /// Memory limit in MiB.
    pub memory_mb: Option<u32>,
    /// Virtual CPUs.
    pub vcpus: Option<u32>,
    /// Time to live.
    #[schema(value_type = Option<String>, example = "1h")]
    pub ttl: Option<GoDuration>,
    /// Provider name.
    pub provider: Option<String>,
    /// Labels.
    pub metadata: Option<Metadata>,
    /// Runtimes kept ready; default 0 (none).
    pub warm_pool: Option<u32>,
    /// What its sandboxes may connect to; default `{"mode": "all"}`.
    pub egress: Option<crate::egress::Egress>,
}

/// `POST /templates/{name}/spawn` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct TemplateSpawnRequest {
    /// Overrides the template's TTL.
    #[schema(value_type = Option<String>, example = "10m")]
    pub ttl: Option<GoDuration>,
    /// Overrides the template's provider.
    pub provider: Option<String>,
    /// Default environment of every exec in the sandbox.
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// Labels, over the template's own.
    pub metadata: Option<Metadata>,
}

/// Validates a template name: 1..=128 characters of `[A-Za-z0-9._-]`, starting alphanumerically,
/// so it is safe in a URL path segment.
pub fn validate_template_name(name: &str) -> Result<(), String> {
    let valid_start = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if name.len() > 128 || !valid_start || !valid_chars {
        return Err(format!(
            "invalid template name {}: use 1 to 128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit",
            crate::error::echo(name)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_names() {
        assert!(validate_template_name("python-3.12_slim").is_ok());
        for bad in ["", "-x", "a b", "a/b", &"a".repeat(129)] {
            assert!(validate_template_name(bad).is_err(), "{bad}");
        }
    }
}
