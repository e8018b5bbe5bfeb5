//! Who may do what: roles, the actions the control plane guards, and the one permission table
//! (decisions §5) that decides, written once as data.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Roles (interface Authentication 6; decisions §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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

impl Role {
    /// Every role, in the column order of [`PERMISSIONS`].
    pub const ALL: [Role; 5] = [
        Role::Viewer,
        Role::Operator,
        Role::TenantAdmin,
        Role::Api,
        Role::Admin,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::TenantAdmin => "tenant_admin",
            Role::Api => "api",
            Role::Admin => "admin",
        }
    }

    fn column(self) -> usize {
        match self {
            Role::Viewer => 0,
            Role::Operator => 1,
            Role::TenantAdmin => 2,
            Role::Api => 3,
            Role::Admin => 4,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A row of the permission matrix: a group of routes that share their rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteGroup {
    /// Reading sandboxes, logs, files, templates, providers, snapshots, pool, quotas, workers,
    /// events, diagnostics, metrics.
    Read,
    /// Spawn, destroy, extend, prune, exec, file writes, admission check.
    Lifecycle,
    /// Template writes and provider tests.
    Configure,
    /// Quota writes on the non-admin paths.
    QuotaWrite,
    /// `/admin/tenants/{own tenant}/...`.
    OwnTenantAdmin,
    /// Every other `/admin/*` route.
    Admin,
}

/// Every guarded operation. Each belongs to one [`RouteGroup`]; names read as "may not ...".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// List or get sandboxes.
    ReadSandboxes,
    /// Read logs.
    ReadLogs,
    /// Read, list, stat or glob files.
    ReadFiles,
    /// List or get templates.
    ReadTemplates,
    /// List or get providers.
    ReadProviders,
    /// List snapshots.
    ReadSnapshots,
    /// Read pool status.
    ReadPool,
    /// Subscribe to events.
    ReadEvents,
    /// List or get owner quotas, their summary and usage.
    ReadQuotas,
    /// List or get workers.
    ReadWorkers,
    /// Read diagnostics and metrics.
    ReadDiagnostics,
    /// Spawn a sandbox (directly or from a template).
    Spawn,
    /// Check admission without spawning.
    CheckAdmission,
    /// Destroy a sandbox.
    Destroy,
    /// Extend a sandbox.
    Extend,
    /// Pause or resume a sandbox.
    Pause,
    /// Prune expired sandboxes.
    Prune,
    /// Run commands (every form).
    Exec,
    /// Write, move, chmod or delete files.
    WriteFiles,
    /// Create, update or delete templates.
    WriteTemplates,
    /// Run provider health checks now.
    TestProviders,
    /// Write owner quotas on the non-admin paths.
    WriteQuotas,
    /// Use an `/admin/*` route (other than one's own tenant's).
    UseAdminRoutes,
    /// Settle the store against the providers (start-up recovery, reconciliation).
    Reconcile,
    /// Repair the worker registry (admin heartbeat, delete) and mint worker tokens.
    ManageWorkers,
    /// Create, list, read or delete tenants.
    ManageTenants,
    /// Read the whole audit log.
    ReadAudit,
    /// Administer one tenant: its members, policies and audit log (a `tenant_admin` only its
    /// own).
    AdministerTenant,
}

impl Action {
    /// The matrix row it belongs to.
    pub fn group(self) -> RouteGroup {
        match self {
            Action::ReadSandboxes
            | Action::ReadLogs
            | Action::ReadFiles
            | Action::ReadTemplates
            | Action::ReadProviders
            | Action::ReadSnapshots
            | Action::ReadPool
            | Action::ReadEvents
            | Action::ReadQuotas
            | Action::ReadWorkers
            | Action::ReadDiagnostics => RouteGroup::Read,
            Action::Spawn
            | Action::CheckAdmission
            | Action::Destroy
            | Action::Extend
            | Action::Pause
            | Action::Prune
            | Action::Exec
            | Action::WriteFiles => RouteGroup::Lifecycle,
            Action::WriteTemplates | Action::TestProviders => RouteGroup::Configure,
            Action::WriteQuotas => RouteGroup::QuotaWrite,
            Action::AdministerTenant => RouteGroup::OwnTenantAdmin,
            Action::UseAdminRoutes
            | Action::Reconcile
            | Action::ManageWorkers
            | Action::ManageTenants
            | Action::ReadAudit => RouteGroup::Admin,
        }
    }

    /// What it is, in words (for 403 messages and audit).
    pub fn describe(self) -> &'static str {
        match self {
            Action::ReadSandboxes => "read sandboxes",
            Action::ReadLogs => "read sandbox logs",
            Action::ReadFiles => "read files",
            Action::ReadTemplates => "read templates",
            Action::ReadProviders => "read providers",
            Action::ReadSnapshots => "read snapshots",
            Action::ReadPool => "read the pool status",
            Action::ReadEvents => "read events",
            Action::ReadQuotas => "read quotas",
            Action::ReadWorkers => "read workers",
            Action::ReadDiagnostics => "read diagnostics and metrics",
            Action::Spawn => "spawn sandboxes",
            Action::CheckAdmission => "check spawn admission",
            Action::Destroy => "destroy sandboxes",
            Action::Extend => "extend sandboxes",
            Action::Pause => "pause and resume sandboxes",
            Action::Prune => "prune sandboxes",
            Action::Exec => "run commands",
            Action::WriteFiles => "change files",
            Action::WriteTemplates => "change templates",
            Action::TestProviders => "test providers",
            Action::WriteQuotas => "change quotas",
            Action::UseAdminRoutes => "use admin routes",
            Action::Reconcile => "reconcile sandboxes with their providers",
            Action::ManageWorkers => "manage workers",
            Action::ManageTenants => "manage tenants",
            Action::ReadAudit => "read the audit log",
            Action::AdministerTenant => "administer tenants",
        }
    }
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Allowed.
    Yes,
    /// Refused.
    No,
    /// Allowed only to the plain API key acting as admin key: `auth.admin_api_key` is empty and
    /// `auth.admin_fallback_enabled` is true.
    AdminFallback,
}

/// Decisions §5's matrix; columns in [`Role::ALL`] order: viewer, operator, tenant_admin, api,
/// admin.
pub const PERMISSIONS: [(RouteGroup, [Grant; 5]); 6] = {
    use Grant::{AdminFallback as F, No as N, Yes as Y};
    [
        (RouteGroup::Read, [Y, Y, Y, Y, Y]),
        (RouteGroup::Lifecycle, [N, Y, Y, Y, Y]),
        (RouteGroup::Configure, [N, Y, Y, Y, Y]),
        (RouteGroup::QuotaWrite, [N, N, N, Y, Y]),
        (RouteGroup::OwnTenantAdmin, [N, N, Y, F, Y]),
        (RouteGroup::Admin, [N, N, N, F, Y]),
    ]
};

/// The cell for `role` in `group`.
pub fn grant(group: RouteGroup, role: Role) -> Grant {
    PERMISSIONS
        .iter()
        .find(|(row, _)| *row == group)
        .map_or(Grant::No, |(_, cells)| cells[role.column()])
}

/// Whether `role` may do `action`; `admin_fallback` says the caller's API key stands in for
/// the (unset) admin key.
pub fn permits(role: Role, admin_fallback: bool, action: Action) -> bool {
    match grant(action.group(), role) {
        Grant::Yes => true,
        Grant::No => false,
        Grant::AdminFallback => admin_fallback,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_has_one_row() {
        for group in [
            RouteGroup::Read,
            RouteGroup::Lifecycle,
            RouteGroup::Configure,
            RouteGroup::QuotaWrite,
            RouteGroup::OwnTenantAdmin,
            RouteGroup::Admin,
        ] {
            assert_eq!(
                PERMISSIONS.iter().filter(|(row, _)| *row == group).count(),
                1,
                "{group:?}"
            );
        }
    }

    #[test]
    fn matrix_of_decisions() {
        use Role::*;
        let read_only = [Action::ReadSandboxes, Action::ReadEvents, Action::ReadFiles];
        for action in read_only {
            assert!(Role::ALL.iter().all(|r| permits(*r, false, action)));
        }
        for action in [
            Action::Spawn,
            Action::Exec,
            Action::Destroy,
            Action::Pause,
            Action::WriteFiles,
        ] {
            assert!(!permits(Viewer, false, action), "{action:?}");
            for role in [Operator, TenantAdmin, Api, Admin] {
                assert!(permits(role, false, action), "{role:?} {action:?}");
            }
        }
        assert!(!permits(Operator, false, Action::WriteQuotas));
        assert!(permits(Api, false, Action::WriteQuotas));
        assert!(!permits(Api, false, Action::UseAdminRoutes));
        assert!(permits(Api, true, Action::UseAdminRoutes));
        assert!(!permits(TenantAdmin, true, Action::UseAdminRoutes));
        assert!(permits(Admin, false, Action::UseAdminRoutes));
    }
}
