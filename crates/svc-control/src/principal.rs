//! Who is calling: produced once by the HTTP layer's authentication and passed explicitly to
//! every control-plane call.

use svc_core::OwnerId;

/// The tenant of API-key and anonymous callers.
pub const DEFAULT_TENANT: &str = "default";

/// Roles (interface Authentication; decisions §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Read-only.
    Viewer,
    /// Full sandbox lifecycle.
    Operator,
    /// Administers one tenant.
    TenantAdmin,
    /// The plain API key.
    Api,
    /// Everything.
    Admin,
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Role deciding permissions.
    pub role: Role,
    /// Tenant whose sandboxes the caller sees.
    pub tenant_id: String,
    /// The owner selected by `X-User-ID` (validated), if any.
    pub owner: Option<OwnerId>,
    /// True when tenant boundaries apply (OIDC callers).
    pub tenant_scoped: bool,
}

impl Principal {
    /// The caller when no authentication is configured: every route is open (decisions §5).
    pub fn anonymous(owner: Option<OwnerId>) -> Self {
        Principal {
            role: Role::Admin,
            tenant_id: DEFAULT_TENANT.to_owned(),
            owner,
            tenant_scoped: false,
        }
    }

    /// The tenant filter for listings: `None` means every tenant.
    pub fn visible_tenant(&self) -> Option<&str> {
        self.tenant_scoped.then_some(self.tenant_id.as_str())
    }

    /// Whether a record of `tenant_id` is visible to the caller.
    pub fn can_see_tenant(&self, tenant_id: &str) -> bool {
        !self.tenant_scoped || self.tenant_id == tenant_id
    }
}
