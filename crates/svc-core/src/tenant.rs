//! Tenants, their members and their policies (decisions §6): the records and the pure rules
//! (ID syntax, policy validation, policy evaluation). Storage and routes live elsewhere.

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::Role;
use crate::Timestamp;

/// The tenant every API-key and anonymous caller belongs to; it always exists.
pub const DEFAULT_TENANT: &str = "default";

/// Longest tenant ID.
pub const MAX_TENANT_ID_LEN: usize = 63;

/// Checks a tenant ID: `[a-z0-9][a-z0-9_-]{0,62}`.
pub fn check_tenant_id(id: &str) -> Result<(), String> {
    let mut chars = id.chars();
    match chars.next() {
        None => return Err("must not be empty".to_owned()),
        Some(first) if !(first.is_ascii_lowercase() || first.is_ascii_digit()) => {
            return Err("must start with a lowercase letter or digit".to_owned())
        }
        Some(_) => {}
    }
    if id.len() > MAX_TENANT_ID_LEN {
        return Err(format!("must be at most {MAX_TENANT_ID_LEN} characters"));
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-') {
        return Err("may hold only lowercase letters, digits, '_' and '-'".to_owned());
    }
    Ok(())
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Tenant {
    /// `[a-z0-9][a-z0-9_-]{0,62}`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// When it was created.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// A role granted to an OIDC subject inside one tenant, in addition to its group mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Member {
    /// The tenant.
    pub tenant_id: String,
    /// The OIDC `sub`.
    pub subject: String,
    /// `viewer`, `operator` or `tenant_admin`.
    #[schema(value_type = String)]
    pub role: Role,
    /// When the membership was first granted.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// Whether `role` may be granted by membership.
pub fn is_member_role(role: Role) -> bool {
    matches!(role, Role::Viewer | Role::Operator | Role::TenantAdmin)
}

/// What a policy governs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyResource {
    /// The sandbox image.
    Image,
    /// The provider name.
    Provider,
    /// The network mode.
    Network,
}

impl PolicyResource {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyResource::Image => "image",
            PolicyResource::Provider => "provider",
            PolicyResource::Network => "network",
        }
    }

    /// Parses the wire name.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Image, Self::Provider, Self::Network]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

/// What a matching policy decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyEffect {
    /// Permit.
    Allow,
    /// Refuse with 403 `policy_denied`.
    Deny,
}

impl PolicyEffect {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyEffect::Allow => "allow",
            PolicyEffect::Deny => "deny",
        }
    }

    /// Parses the wire name.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Allow, Self::Deny]
            .into_iter()
            .find(|e| e.as_str() == text)
    }
}

/// A tenant policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Policy {
    /// `pol-` and 16 hex characters.
    pub id: String,
    /// The tenant it governs.
    pub tenant_id: String,
    /// Display name (named in denials).
    pub name: String,
    /// What it governs.
    pub resource: PolicyResource,
    /// Glob over the resource's value: `*` any run of characters (including `/`), `?` one,
    /// `[...]` a class.
    pub pattern: String,
    /// Allow or deny.
    pub effect: PolicyEffect,
    /// Higher is considered first.
    pub priority: i64,
    /// When it was created.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When it last changed.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// Longest policy name and pattern.
pub const MAX_POLICY_TEXT_LEN: usize = 256;

/// Compiles a policy pattern; `Err` says what is wrong with it.
pub fn compile_pattern(pattern: &str) -> Result<GlobMatcher, String> {
    if pattern.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if pattern.len() > MAX_POLICY_TEXT_LEN {
        return Err(format!("must be at most {MAX_POLICY_TEXT_LEN} characters"));
    }
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|e| format!("is not a valid glob: {}", e.kind()))
}

/// A new policy ID: `pol-` and 16 lowercase hex characters from a CSPRNG.
pub fn new_policy_id() -> String {
    format!("pol-{}", hex::encode(rand::random::<[u8; 8]>()))
}

/// The policy that decides `value` of `resource` among `policies` (one tenant's): matching
/// policies in descending priority, deny before allow at equal priority; the first decides.
/// `None`: no policy matches, so the value is allowed.
pub fn deciding_policy<'a>(
    policies: &'a [Policy],
    resource: PolicyResource,
    value: &str,
) -> Option<&'a Policy> {
    policies
        .iter()
        .filter(|p| p.resource == resource)
        .filter(|p| compile_pattern(&p.pattern).is_ok_and(|m| m.is_match(value)))
        .max_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then_with(|| {
                    (a.effect == PolicyEffect::Deny).cmp(&(b.effect == PolicyEffect::Deny))
                })
                // Ties beyond that are settled by ID, so the outcome never depends on order.
                .then_with(|| b.id.cmp(&a.id))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(
        id: &str,
        resource: PolicyResource,
        pattern: &str,
        effect: PolicyEffect,
        priority: i64,
    ) -> Policy {
        let at = Timestamp::UNIX_EPOCH;
        Policy {
            id: id.to_owned(),
            tenant_id: "t".to_owned(),
            name: id.to_owned(),
            resource,
            pattern: pattern.to_owned(),
            effect,
            priority,
            created_at: at,
            updated_at: at,
        }
    }

    #[test]
    fn tenant_ids() {
        for ok in ["default", "a", "team-1", "0_x", &"a".repeat(63)] {
            assert!(check_tenant_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "_a", "A", "a b", "a/b", "é", &"a".repeat(64)] {
            assert!(check_tenant_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn highest_priority_decides_and_deny_wins_ties() {
        use PolicyEffect::{Allow, Deny};
        use PolicyResource::{Image, Provider};
        let policies = vec![
            policy("pol-a", Image, "*", Deny, 0),
            policy("pol-b", Image, "docker.io/library/*", Allow, 10),
            policy("pol-c", Image, "docker.io/library/bad*", Deny, 10),
            policy("pol-d", Image, "docker.io/library/bad*", Allow, 10),
            policy("pol-e", Provider, "*", Deny, 100),
        ];
        let decide = |value: &str| deciding_policy(&policies, Image, value).map(|p| p.id.as_str());
        assert_eq!(decide("docker.io/library/alpine:3"), Some("pol-b"));
        assert_eq!(decide("docker.io/library/badimage"), Some("pol-c"));
        assert_eq!(decide("ghcr.io/x/y"), Some("pol-a"));
        assert_eq!(
            deciding_policy(&policies, PolicyResource::Network, "bridge"),
            None
        );
    }

    #[test]
    fn star_crosses_slashes_and_bad_globs_are_refused() {
        let m = compile_pattern("ghcr.io/*").unwrap();
        assert!(m.is_match("ghcr.io/org/image:tag"));
        assert!(compile_pattern("[").is_err());
        assert!(compile_pattern("").is_err());
    }
}
