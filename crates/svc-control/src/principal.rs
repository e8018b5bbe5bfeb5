//! Who is calling: produced once by authentication (see [`crate::identity`]) and passed
//! explicitly to every control-plane call, which checks it against the permission table with
//! [`ControlPlane::authorize`].

use std::borrow::Cow;

use svc_core::access::{permits, Action, Role};
use svc_core::{Error, OwnerId, SandboxId};

use crate::ControlPlane;

pub use svc_core::tenant::DEFAULT_TENANT;

/// How the caller proved who it is; names the actor in logs and the audit trail, never the
/// credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// No authentication is configured: every caller is admin (decisions §5).
    Anonymous,
    /// `auth.api_key`.
    ApiKey,
    /// `auth.admin_api_key`.
    AdminApiKey,
    /// svc itself: the reaper, reconciliation and other background loops.
    System,
    /// An OIDC bearer token.
    Oidc,
    /// A sandbox's access token (the E2B listener's in-sandbox calls).
    SandboxToken,
}

impl AuthMethod {
    /// The actor name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Anonymous => "anonymous",
            AuthMethod::ApiKey => "api-key",
            AuthMethod::AdminApiKey => "admin-api-key",
            AuthMethod::System => "system",
            AuthMethod::Oidc => "oidc",
            AuthMethod::SandboxToken => "sandbox-token",
        }
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Role deciding permissions.
    pub role: Role,
    /// How it authenticated.
    pub method: AuthMethod,
    /// True when the plain API key stands in for an unset admin key (decisions §5: admin routes
    /// accept it while `auth.admin_api_key` is empty and `auth.admin_fallback_enabled`).
    pub admin_fallback: bool,
    /// Tenant whose sandboxes the caller sees (borrowed for `default`: no allocation on the
    /// request path).
    pub tenant_id: Cow<'static, str>,
    /// The owner selected by `X-User-ID` (validated), if any.
    pub owner: Option<OwnerId>,
    /// True when tenant boundaries apply (OIDC callers).
    pub tenant_scoped: bool,
    /// The OIDC `sub`, for OIDC callers.
    pub subject: Option<String>,
    /// The one sandbox this caller may reach, for a caller that proved itself with that
    /// sandbox's access token: every other sandbox is not found to it, its listings are
    /// empty, and it may only do what a call inside a sandbox does ([`SANDBOX_SCOPED_ACTIONS`]).
    pub only_sandbox: Option<SandboxId>,
}

/// What a caller scoped to one sandbox may do: read it, run commands, move files, read logs.
pub const SANDBOX_SCOPED_ACTIONS: [Action; 5] = [
    Action::ReadSandboxes,
    Action::ReadLogs,
    Action::ReadFiles,
    Action::WriteFiles,
    Action::Exec,
];

impl Principal {
    fn with(role: Role, method: AuthMethod, owner: Option<OwnerId>) -> Self {
        Principal {
            role,
            method,
            admin_fallback: false,
            tenant_id: Cow::Borrowed(DEFAULT_TENANT),
            owner,
            tenant_scoped: false,
            subject: None,
            only_sandbox: None,
        }
    }

    /// The caller when no authentication is configured: every route is open (decisions §5).
    pub fn anonymous(owner: Option<OwnerId>) -> Self {
        Self::with(Role::Admin, AuthMethod::Anonymous, owner)
    }

    /// svc's own background work (reaper, recovery, reconciliation): sees and may do everything.
    pub fn system() -> Self {
        Self::with(Role::Admin, AuthMethod::System, None)
    }

    /// A caller holding `auth.api_key`; `admin_fallback` per [`Principal::admin_fallback`].
    pub fn api_key(owner: Option<OwnerId>, admin_fallback: bool) -> Self {
        Principal {
            admin_fallback,
            ..Self::with(Role::Api, AuthMethod::ApiKey, owner)
        }
    }

    /// A caller that proved itself with sandbox `id`'s access token: it reaches that sandbox
    /// only, whatever its tenant or owner, and only as a call inside it would.
    pub fn for_sandbox(id: SandboxId) -> Self {
        Principal {
            only_sandbox: Some(id),
            ..Self::with(Role::Api, AuthMethod::SandboxToken, None)
        }
    }

    /// Whether this caller may reach sandbox `id` at all.
    pub fn may_reach(&self, id: &SandboxId) -> bool {
        self.only_sandbox.as_ref().is_none_or(|only| only == id)
    }

    /// A caller holding `auth.admin_api_key`.
    pub fn admin_key(owner: Option<OwnerId>) -> Self {
        Self::with(Role::Admin, AuthMethod::AdminApiKey, owner)
    }

    /// Who acted, for the audit log and logs: the OIDC subject, else how it authenticated.
    pub fn actor(&self) -> &str {
        self.subject.as_deref().unwrap_or(self.method.as_str())
    }

    /// The tenant filter for listings: `None` means every tenant.
    pub fn visible_tenant(&self) -> Option<&str> {
        self.tenant_scoped.then_some(&*self.tenant_id)
    }

    /// Whether a record of `tenant_id` is visible to the caller.
    pub fn can_see_tenant(&self, tenant_id: &str) -> bool {
        !self.tenant_scoped || self.tenant_id == tenant_id
    }

    /// The only owner this caller may act as, when it is bound to one: an OIDC `viewer` or
    /// `operator` acts as its token's subject (decisions §30); other callers may name any owner.
    pub fn bound_owner(&self) -> Option<&str> {
        let bound =
            self.method == AuthMethod::Oidc && matches!(self.role, Role::Viewer | Role::Operator);
        bound.then(|| self.subject.as_deref().unwrap_or_default())
    }

    /// The owner this call acts for: `X-User-ID`, else an OIDC caller's subject.
    pub fn acting_owner(&self) -> Option<&str> {
        self.owner
            .as_ref()
            .map(OwnerId::as_str)
            .or(self.subject.as_deref())
    }

    /// Whether the caller sees every owner's sandboxes in the tenants it sees, where pool mode
    /// shows the others only their own (decisions §30): an authenticated admin (not the
    /// anonymous caller of a server without authentication, who could name anyone) or a tenant
    /// admin.
    pub fn sees_every_owner(&self) -> bool {
        if self.only_sandbox.is_some() {
            // Its token names the sandbox: it reaches that one whoever owns it.
            return true;
        }
        match self.role {
            Role::Admin => self.method != AuthMethod::Anonymous,
            Role::TenantAdmin => true,
            _ => false,
        }
    }

    /// Refuses an owner named by `field` (`X-User-ID`, `owner_id`) that a bound caller may not
    /// act as: 403 naming the field (decisions §30).
    pub fn check_may_act_as(&self, field: &str, owner: &str) -> Result<(), Error> {
        match self.bound_owner() {
            Some(bound) if bound != owner => Err(Error::Denied {
                message: format!(
                    "{field} names another user ({}): role {} acts only as its token's subject",
                    svc_core::error::echo(owner),
                    self.role.as_str()
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Whether the permission table lets this caller do `action`.
    pub fn may(&self, action: Action) -> bool {
        if self.only_sandbox.is_some() && !SANDBOX_SCOPED_ACTIONS.contains(&action) {
            return false;
        }
        permits(self.role, self.admin_fallback, action)
    }
}

impl ControlPlane {
    /// The one authorization point: every control-plane method calls it first with its action.
    /// Tenant policies will join here without touching the callers.
    pub fn authorize(&self, principal: &Principal, action: Action) -> Result<(), Error> {
        if principal.may(action) {
            return Ok(());
        }
        tracing::info!(
            actor = principal.method.as_str(),
            role = principal.role.as_str(),
            action = action.describe(),
            "forbidden"
        );
        Err(Error::Forbidden {
            role: principal.role.as_str(),
            action: action.describe(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_reaches_admin_routes_only_through_the_fallback() {
        assert!(!Principal::api_key(None, false).may(Action::UseAdminRoutes));
        assert!(Principal::api_key(None, true).may(Action::UseAdminRoutes));
        assert!(Principal::api_key(None, false).may(Action::WriteQuotas));
        assert!(Principal::admin_key(None).may(Action::UseAdminRoutes));
        assert!(Principal::system().may(Action::Destroy));
    }
}
