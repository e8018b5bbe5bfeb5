//! Which action every route is: the one table the authentication middleware consults before
//! any handler or body extractor runs, so a caller without the role gets 403 whatever it sent
//! (decisions §5). The control plane checks the same actions again; a route missing here is
//! admin-only, and a unit test keeps the table and the router in step.

use axum::http::Method;
use svc_control::Action;

/// `(method, route template under /api/v1, action)`.
pub(crate) const ROUTE_ACTIONS: &[(&str, &str, Action)] = {
    use Action::*;
    &[
        ("GET", "/admin/audit", ReadAudit),
        ("GET", "/admin/diagnostics", UseAdminRoutes),
        ("GET", "/admin/metrics", UseAdminRoutes),
        ("GET", "/admin/metrics/scrape", UseAdminRoutes),
        ("GET", "/admin/providers", UseAdminRoutes),
        ("GET", "/admin/providers/{name}", UseAdminRoutes),
        ("POST", "/admin/providers/test", UseAdminRoutes),
        ("GET", "/admin/quotas", UseAdminRoutes),
        ("GET", "/admin/quotas/summary", UseAdminRoutes),
        ("GET", "/admin/quotas/{ownerID}", UseAdminRoutes),
        ("PUT", "/admin/quotas/{ownerID}", UseAdminRoutes),
        ("DELETE", "/admin/quotas/{ownerID}", UseAdminRoutes),
        ("GET", "/admin/quotas/{ownerID}/usage", UseAdminRoutes),
        ("GET", "/admin/tenants", ManageTenants),
        ("POST", "/admin/tenants", ManageTenants),
        ("GET", "/admin/tenants/{tenantID}", ManageTenants),
        ("DELETE", "/admin/tenants/{tenantID}", ManageTenants),
        ("GET", "/admin/tenants/{tenantID}/audit", AdministerTenant),
        ("GET", "/admin/tenants/{tenantID}/members", AdministerTenant),
        (
            "PUT",
            "/admin/tenants/{tenantID}/members/{subject}",
            AdministerTenant,
        ),
        (
            "DELETE",
            "/admin/tenants/{tenantID}/members/{subject}",
            AdministerTenant,
        ),
        (
            "GET",
            "/admin/tenants/{tenantID}/policies",
            AdministerTenant,
        ),
        (
            "POST",
            "/admin/tenants/{tenantID}/policies",
            AdministerTenant,
        ),
        (
            "GET",
            "/admin/tenants/{tenantID}/policies/{policyID}",
            AdministerTenant,
        ),
        (
            "PUT",
            "/admin/tenants/{tenantID}/policies/{policyID}",
            AdministerTenant,
        ),
        (
            "DELETE",
            "/admin/tenants/{tenantID}/policies/{policyID}",
            AdministerTenant,
        ),
        ("POST", "/admin/worker-tokens", ManageWorkers),
        ("DELETE", "/admin/workers/{workerID}", ManageWorkers),
        ("POST", "/admin/workers/{workerID}/heartbeat", ManageWorkers),
        ("GET", "/diagnostics", ReadDiagnostics),
        ("GET", "/events", ReadEvents),
        ("GET", "/metrics", ReadDiagnostics),
        ("GET", "/metrics/scrape", ReadDiagnostics),
        ("GET", "/pool/status", ReadPool),
        ("GET", "/providers", ReadProviders),
        ("GET", "/providers/{name}", ReadProviders),
        ("POST", "/providers/test", TestProviders),
        ("GET", "/quotas", ReadQuotas),
        ("GET", "/quotas/summary", ReadQuotas),
        ("GET", "/quotas/{ownerID}", ReadQuotas),
        ("PUT", "/quotas/{ownerID}", WriteQuotas),
        ("DELETE", "/quotas/{ownerID}", WriteQuotas),
        ("GET", "/quotas/{ownerID}/usage", ReadQuotas),
        ("GET", "/sandboxes", ReadSandboxes),
        ("POST", "/sandboxes", Spawn),
        ("DELETE", "/sandboxes", Prune),
        ("POST", "/sandboxes/admission", CheckAdmission),
        ("GET", "/sandboxes/{id}", ReadSandboxes),
        ("DELETE", "/sandboxes/{id}", Destroy),
        ("POST", "/sandboxes/{id}/exec", Exec),
        ("GET", "/sandboxes/{id}/exec/ws", Exec),
        ("GET", "/sandboxes/{id}/execs", ReadSandboxes),
        ("GET", "/sandboxes/{id}/execs/{exec_id}", ReadSandboxes),
        ("DELETE", "/sandboxes/{id}/execs/{exec_id}", Exec),
        ("GET", "/sandboxes/{id}/execs/{exec_id}/output", ReadLogs),
        ("POST", "/sandboxes/{id}/execs/{exec_id}/stdin", Exec),
        ("POST", "/sandboxes/{id}/execs/{exec_id}/signal", Exec),
        ("POST", "/sandboxes/{id}/extend", Extend),
        ("POST", "/sandboxes/{id}/pause", Pause),
        ("POST", "/sandboxes/{id}/resume", Pause),
        ("POST", "/sandboxes/{id}/preview-tokens", Exec),
        ("GET", "/sandboxes/{id}/files", ReadFiles),
        ("POST", "/sandboxes/{id}/files", WriteFiles),
        ("PUT", "/sandboxes/{id}/files", WriteFiles),
        ("GET", "/sandboxes/{id}/files/archive", ReadFiles),
        ("PUT", "/sandboxes/{id}/files/archive", WriteFiles),
        ("DELETE", "/sandboxes/{id}/files", WriteFiles),
        ("POST", "/sandboxes/{id}/files/chmod", WriteFiles),
        ("GET", "/sandboxes/{id}/files/glob", ReadFiles),
        ("GET", "/sandboxes/{id}/files/list", ReadFiles),
        ("POST", "/sandboxes/{id}/files/move", WriteFiles),
        ("GET", "/sandboxes/{id}/files/stat", ReadFiles),
        ("GET", "/sandboxes/{id}/logs", ReadLogs),
        ("GET", "/sandboxes/{id}/stats", ReadSandboxes),
        ("GET", "/snapshots", ReadSnapshots),
        ("GET", "/templates", ReadTemplates),
        ("POST", "/templates", WriteTemplates),
        ("GET", "/templates/{name}", ReadTemplates),
        ("PUT", "/templates/{name}", WriteTemplates),
        ("DELETE", "/templates/{name}", WriteTemplates),
        ("POST", "/templates/{name}/spawn", Spawn),
        ("POST", "/templates/{name}/build", WriteTemplates),
        ("GET", "/templates/{name}/builds", ReadTemplates),
        ("GET", "/templates/{name}/builds/{build_id}", ReadTemplates),
        (
            "DELETE",
            "/templates/{name}/builds/{build_id}",
            WriteTemplates,
        ),
        (
            "GET",
            "/templates/{name}/builds/{build_id}/logs",
            ReadTemplates,
        ),
        ("GET", "/workers", ReadWorkers),
        ("GET", "/workers/{workerID}", ReadWorkers),
    ]
};

/// The action of a route (`template` as matched, with the `/api/v1` prefix). HEAD is GET.
/// Unknown routes are admin-only: a route added without an entry fails closed.
pub(crate) fn route_action(method: &Method, template: &str) -> Action {
    let template = template
        .strip_prefix(crate::auth::API_PREFIX)
        .unwrap_or(template);
    let method = if *method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    ROUTE_ACTIONS
        .iter()
        .find(|(m, t, _)| *m == method && *t == template)
        .map_or(Action::UseAdminRoutes, |(_, _, action)| *action)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every operation the router serves, from its OpenAPI document.
    fn served() -> BTreeSet<(String, String)> {
        let (_, document) = crate::router::api_parts();
        let mut operations = BTreeSet::new();
        for (path, item) in &document.paths.paths {
            for (method, operation) in [
                ("GET", &item.get),
                ("PUT", &item.put),
                ("POST", &item.post),
                ("DELETE", &item.delete),
                ("PATCH", &item.patch),
            ] {
                if operation.is_some() {
                    operations.insert((method.to_owned(), path.clone()));
                }
            }
        }
        operations
    }

    #[test]
    fn every_route_has_exactly_one_entry_and_every_entry_a_route() {
        let served = served();
        let open = |path: &str| {
            crate::auth::PROBES.contains(&path) || path.starts_with(crate::auth::WORKER_PREFIX)
        };
        for (method, path) in &served {
            if open(path) {
                continue;
            }
            let template = path.strip_prefix(crate::auth::API_PREFIX).unwrap();
            let entries = ROUTE_ACTIONS
                .iter()
                .filter(|(m, t, _)| m == method && *t == template)
                .count();
            assert_eq!(
                entries, 1,
                "{method} {path} needs one entry in ROUTE_ACTIONS"
            );
        }
        for (method, template, _) in ROUTE_ACTIONS {
            let path = format!("{}{template}", crate::auth::API_PREFIX);
            assert!(
                served.contains(&((*method).to_owned(), path.clone())),
                "{method} {path} is in ROUTE_ACTIONS but not served"
            );
        }
    }

    #[test]
    fn admin_routes_need_admin_actions() {
        use svc_core::access::RouteGroup;
        for (method, template, action) in ROUTE_ACTIONS {
            let admin_group = matches!(
                action.group(),
                RouteGroup::Admin | RouteGroup::OwnTenantAdmin
            );
            assert_eq!(
                template.starts_with("/admin/"),
                admin_group,
                "{method} {template}: {action:?}"
            );
        }
        assert_eq!(
            route_action(&Method::GET, "/api/v1/not-a-route"),
            Action::UseAdminRoutes
        );
        assert_eq!(
            route_action(&Method::HEAD, "/api/v1/sandboxes"),
            Action::ReadSandboxes
        );
    }
}
