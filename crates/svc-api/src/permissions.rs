//! The route table: for every route, how a caller is let in and whether the request is audited,
//! as data. The authentication middleware consults it before any handler or body extractor
//! runs, so a caller without the role gets 403 whatever it sent (decisions §5); the control plane
//! checks the same actions again. A route missing here is admin-only, and unit tests keep the
//! table and the router in step both ways. The probes and the worker routes are open here (the
//! worker routes authenticate worker credentials in their handlers); the preview proxy
//! authenticates for itself, with credentials or a preview token.

use axum::http::Method;
use svc_control::Action;

/// Where every API route lives.
pub(crate) const API_PREFIX: &str = "/api/v1";
/// Routes that never need credentials.
pub(crate) const PROBES: [&str; 3] = ["/api/v1/health", "/api/v1/live", "/api/v1/ready"];
/// Worker routes authenticate with worker credentials, in their handlers.
pub(crate) const WORKER_PREFIX: &str = "/api/v1/worker/";

/// One route: method, template under `/api/v1`, the action a caller needs, and the name of its
/// audit entry when every request to it is audited by name (other mutating admin requests are
/// audited as `METHOD /template`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route {
    pub(crate) method: &'static str,
    pub(crate) template: &'static str,
    pub(crate) action: Action,
    pub(crate) audit: Option<&'static str>,
}

const fn route(method: &'static str, template: &'static str, action: Action) -> Route {
    Route {
        method,
        template,
        action,
        audit: None,
    }
}

const fn audited(
    method: &'static str,
    template: &'static str,
    action: Action,
    audit: &'static str,
) -> Route {
    Route {
        method,
        template,
        action,
        audit: Some(audit),
    }
}

/// The preview proxy's routes (any method): served outside the authentication middleware,
/// because the proxy takes a preview token as well as credentials; a caller with credentials
/// needs [`PREVIEW_ACTION`].
pub(crate) const PREVIEW_ROUTES: [&str; 3] = [
    "/sandboxes/{id}/proxy/{port}",
    "/sandboxes/{id}/proxy/{port}/",
    "/sandboxes/{id}/proxy/{port}/{*rest}",
];
/// What a caller with credentials needs to reach a sandbox's port through the proxy.
pub(crate) const PREVIEW_ACTION: Action = Action::Exec;

/// Every authenticated route.
pub(crate) const ROUTES: &[Route] = {
    use Action::*;
    &[
        route("GET", "/admin/audit", ReadAudit),
        route("GET", "/admin/diagnostics", UseAdminRoutes),
        route("GET", "/admin/metrics", UseAdminRoutes),
        route("GET", "/admin/metrics/scrape", UseAdminRoutes),
        route("GET", "/admin/providers", UseAdminRoutes),
        route("GET", "/admin/providers/{name}", UseAdminRoutes),
        route("POST", "/admin/providers/test", UseAdminRoutes),
        route("GET", "/admin/quotas", UseAdminRoutes),
        route("GET", "/admin/quotas/summary", UseAdminRoutes),
        route("GET", "/admin/quotas/{ownerID}", UseAdminRoutes),
        audited(
            "PUT",
            "/admin/quotas/{ownerID}",
            UseAdminRoutes,
            "quota.save",
        ),
        audited(
            "DELETE",
            "/admin/quotas/{ownerID}",
            UseAdminRoutes,
            "quota.delete",
        ),
        route("GET", "/admin/quotas/{ownerID}/usage", UseAdminRoutes),
        route("GET", "/admin/tenants", ManageTenants),
        audited("POST", "/admin/tenants", ManageTenants, "tenant.create"),
        route("GET", "/admin/tenants/{tenantID}", ManageTenants),
        audited(
            "DELETE",
            "/admin/tenants/{tenantID}",
            ManageTenants,
            "tenant.delete",
        ),
        route("GET", "/admin/tenants/{tenantID}/audit", AdministerTenant),
        route("GET", "/admin/tenants/{tenantID}/members", AdministerTenant),
        audited(
            "PUT",
            "/admin/tenants/{tenantID}/members/{subject}",
            AdministerTenant,
            "member.save",
        ),
        audited(
            "DELETE",
            "/admin/tenants/{tenantID}/members/{subject}",
            AdministerTenant,
            "member.delete",
        ),
        route(
            "GET",
            "/admin/tenants/{tenantID}/policies",
            AdministerTenant,
        ),
        audited(
            "POST",
            "/admin/tenants/{tenantID}/policies",
            AdministerTenant,
            "policy.create",
        ),
        route(
            "GET",
            "/admin/tenants/{tenantID}/policies/{policyID}",
            AdministerTenant,
        ),
        audited(
            "PUT",
            "/admin/tenants/{tenantID}/policies/{policyID}",
            AdministerTenant,
            "policy.update",
        ),
        audited(
            "DELETE",
            "/admin/tenants/{tenantID}/policies/{policyID}",
            AdministerTenant,
            "policy.delete",
        ),
        audited(
            "POST",
            "/admin/worker-tokens",
            ManageWorkers,
            "worker_token.issue",
        ),
        route("DELETE", "/admin/workers/{workerID}", ManageWorkers),
        route("POST", "/admin/workers/{workerID}/heartbeat", ManageWorkers),
        audited(
            "POST",
            "/admin/workers/{workerID}/drain",
            ManageWorkers,
            "worker.drain",
        ),
        audited(
            "POST",
            "/admin/workers/{workerID}/undrain",
            ManageWorkers,
            "worker.undrain",
        ),
        route("GET", "/diagnostics", ReadDiagnostics),
        route("GET", "/events", ReadEvents),
        route("GET", "/metrics", ReadDiagnostics),
        route("GET", "/metrics/scrape", ReadDiagnostics),
        route("GET", "/pool/status", ReadPool),
        route("GET", "/providers", ReadProviders),
        route("GET", "/providers/{name}", ReadProviders),
        route("POST", "/providers/test", TestProviders),
        route("GET", "/quotas", ReadQuotas),
        route("GET", "/quotas/summary", ReadQuotas),
        route("GET", "/quotas/{ownerID}", ReadQuotas),
        audited("PUT", "/quotas/{ownerID}", WriteQuotas, "quota.save"),
        audited("DELETE", "/quotas/{ownerID}", WriteQuotas, "quota.delete"),
        route("GET", "/quotas/{ownerID}/usage", ReadQuotas),
        route("GET", "/sandboxes", ReadSandboxes),
        route("POST", "/sandboxes", Spawn),
        route("DELETE", "/sandboxes", Prune),
        route("POST", "/sandboxes/admission", CheckAdmission),
        route("GET", "/sandboxes/{id}", ReadSandboxes),
        route("DELETE", "/sandboxes/{id}", Destroy),
        route("POST", "/sandboxes/{id}/exec", Exec),
        route("GET", "/sandboxes/{id}/exec/ws", Exec),
        route("GET", "/sandboxes/{id}/execs", ReadSandboxes),
        route("GET", "/sandboxes/{id}/execs/{exec_id}", ReadSandboxes),
        route("DELETE", "/sandboxes/{id}/execs/{exec_id}", Exec),
        route("GET", "/sandboxes/{id}/execs/{exec_id}/output", ReadLogs),
        route("POST", "/sandboxes/{id}/execs/{exec_id}/stdin", Exec),
        route("POST", "/sandboxes/{id}/execs/{exec_id}/signal", Exec),
        route("POST", "/sandboxes/{id}/extend", Extend),
        route("POST", "/sandboxes/{id}/pause", Pause),
        route("POST", "/sandboxes/{id}/resume", Pause),
        route("POST", "/sandboxes/{id}/preview-tokens", Exec),
        route("GET", "/sandboxes/{id}/files", ReadFiles),
        route("POST", "/sandboxes/{id}/files", WriteFiles),
        route("PUT", "/sandboxes/{id}/files", WriteFiles),
        route("GET", "/sandboxes/{id}/files/archive", ReadFiles),
        route("PUT", "/sandboxes/{id}/files/archive", WriteFiles),
        route("DELETE", "/sandboxes/{id}/files", WriteFiles),
        route("POST", "/sandboxes/{id}/files/chmod", WriteFiles),
        route("GET", "/sandboxes/{id}/files/glob", ReadFiles),
        route("GET", "/sandboxes/{id}/files/list", ReadFiles),
        route("POST", "/sandboxes/{id}/files/move", WriteFiles),
        route("GET", "/sandboxes/{id}/files/stat", ReadFiles),
        route("GET", "/sandboxes/{id}/logs", ReadLogs),
        route("GET", "/sandboxes/{id}/stats", ReadSandboxes),
        route("GET", "/snapshots", ReadSnapshots),
        route("GET", "/templates", ReadTemplates),
        route("POST", "/templates", WriteTemplates),
        route("GET", "/templates/{name}", ReadTemplates),
        route("PUT", "/templates/{name}", WriteTemplates),
        route("DELETE", "/templates/{name}", WriteTemplates),
        route("POST", "/templates/{name}/spawn", Spawn),
        route("POST", "/templates/{name}/build", WriteTemplates),
        route("GET", "/templates/{name}/builds", ReadTemplates),
        route("GET", "/templates/{name}/builds/{build_id}", ReadTemplates),
        route(
            "DELETE",
            "/templates/{name}/builds/{build_id}",
            WriteTemplates,
        ),
        route(
            "GET",
            "/templates/{name}/builds/{build_id}/logs",
            ReadTemplates,
        ),
        route("GET", "/workers", ReadWorkers),
        route("GET", "/workers/{workerID}", ReadWorkers),
    ]
};

/// The action of a route (`template` as matched, with the `/api/v1` prefix). HEAD is GET.
/// Unknown routes are admin-only: a route added without an entry fails closed.
pub(crate) fn route_action(method: &Method, template: &str) -> Action {
    let template = template.strip_prefix(API_PREFIX).unwrap_or(template);
    let method = if *method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    find(method, template).map_or(Action::UseAdminRoutes, |route| route.action)
}

/// The audit name of a route (`template` as matched, with the `/api/v1` prefix), when it has
/// one.
pub(crate) fn audit_name(method: &Method, template: &str) -> Option<&'static str> {
    let template = template.strip_prefix(API_PREFIX).unwrap_or(template);
    find(method.as_str(), template).and_then(|route| route.audit)
}

fn find(method: &str, template: &str) -> Option<&'static Route> {
    ROUTES
        .iter()
        .find(|route| route.method == method && route.template == template)
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
        let open = |path: &str| PROBES.contains(&path) || path.starts_with(WORKER_PREFIX);
        for (method, path) in &served {
            if open(path) {
                continue;
            }
            let template = path.strip_prefix(API_PREFIX).unwrap();
            let entries = ROUTES
                .iter()
                .filter(|r| r.method == method && r.template == template)
                .count();
            assert_eq!(entries, 1, "{method} {path} needs one entry in ROUTES");
        }
        for route in ROUTES {
            let path = format!("{API_PREFIX}{}", route.template);
            assert!(
                served.contains(&(route.method.to_owned(), path.clone())),
                "{} {path} is in ROUTES but not served",
                route.method
            );
        }
    }

    #[test]
    fn admin_routes_need_admin_actions() {
        use svc_core::access::RouteGroup;
        for route in ROUTES {
            let admin_group = matches!(
                route.action.group(),
                RouteGroup::Admin | RouteGroup::OwnTenantAdmin
            );
            assert_eq!(
                route.template.starts_with("/admin/"),
                admin_group,
                "{route:?}"
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
