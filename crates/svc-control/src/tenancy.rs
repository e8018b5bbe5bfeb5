//! Tenants, their members and their policies (decisions §6): the admin operations and the
//! policy check every spawn passes.

use serde::Deserialize;
use svc_core::access::{Action, Role};
use svc_core::audit::AuditOutcome;
use svc_core::error::{echo, Resource};
use svc_core::event::{EventPayload, FailureEventData};
use svc_core::tenant::{
    check_tenant_id, compile_pattern, deciding_policy, is_member_role, new_policy_id, Member,
    Policy, PolicyEffect, PolicyResource, Tenant, DEFAULT_TENANT, MAX_POLICY_TEXT_LEN,
};
use svc_core::Error;
use utoipa::ToSchema;

use crate::audit::AuditRecord;
use crate::{ControlPlane, Principal};

/// Longest tenant name and member subject.
const MAX_TEXT_LEN: usize = 256;

/// `POST /admin/tenants`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TenantRequest {
    /// `[a-z0-9][a-z0-9_-]{0,62}`.
    pub id: String,
    /// Display name; the ID when omitted.
    #[serde(default)]
    pub name: Option<String>,
}

/// `PUT /admin/tenants/{tenantID}/members/{subject}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct MemberRequest {
    /// `viewer`, `operator` or `tenant_admin`.
    pub role: String,
}

/// `POST /admin/tenants/{tenantID}/policies` and `PUT .../policies/{policyID}` (a PUT replaces
/// every field).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct PolicyRequest {
    /// Display name, named in denials.
    pub name: String,
    /// `image`, `provider` or `network`.
    pub resource: String,
    /// Glob over the value (`*` also crosses `/`).
    pub pattern: String,
    /// `allow` or `deny`.
    pub effect: String,
    /// Higher is considered first; default 0.
    #[serde(default)]
    pub priority: i64,
}

fn bounded_text(field: &str, value: &str) -> Result<(), Error> {
    if value.trim().is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.len() > MAX_TEXT_LEN {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_TEXT_LEN} bytes"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(field, "must not contain control characters"));
    }
    Ok(())
}

/// The validated parts of a policy request.
struct PolicyFields {
    name: String,
    resource: PolicyResource,
    pattern: String,
    effect: PolicyEffect,
    priority: i64,
}

impl PolicyFields {
    fn into_policy(self, id: String, tenant_id: &str, now: svc_core::Timestamp) -> Policy {
        let now = svc_core::clock::truncate_to_micros(now);
        Policy {
            id,
            tenant_id: tenant_id.to_owned(),
            name: self.name,
            resource: self.resource,
            pattern: self.pattern,
            effect: self.effect,
            priority: self.priority,
            created_at: now,
            updated_at: now,
        }
    }
}

impl PolicyRequest {
    fn validate(self) -> Result<PolicyFields, Error> {
        bounded_text("name", &self.name)?;
        let resource = PolicyResource::parse(&self.resource).ok_or_else(|| {
            Error::invalid(
                "resource",
                format!(
                    "{} is not a policy resource (image, provider, network)",
                    echo(&self.resource)
                ),
            )
        })?;
        let effect = PolicyEffect::parse(&self.effect).ok_or_else(|| {
            Error::invalid(
                "effect",
                format!("{} is not an effect (allow, deny)", echo(&self.effect)),
            )
        })?;
        compile_pattern(&self.pattern).map_err(|m| Error::invalid("pattern", m))?;
        debug_assert!(self.pattern.len() <= MAX_POLICY_TEXT_LEN);
        Ok(PolicyFields {
            name: self.name,
            resource,
            pattern: self.pattern,
            effect,
            priority: self.priority,
        })
    }
}

impl ControlPlane {
    /// The tenant-scoped permission: `tenant_admin` only for its own tenant; admins (and the
    /// admin fallback) for every tenant.
    pub fn authorize_tenant(&self, principal: &Principal, tenant_id: &str) -> Result<(), Error> {
        self.authorize(principal, Action::AdministerTenant)?;
        if principal.role == Role::TenantAdmin && principal.tenant_id != tenant_id {
            return Err(Error::Denied {
                message: format!(
                    "role tenant_admin of tenant {} may not administer tenant {}",
                    principal.tenant_id,
                    echo(tenant_id)
                ),
            });
        }
        Ok(())
    }

    /// An existing tenant, or 404 (a malformed ID is simply not found).
    async fn existing_tenant(&self, tenant_id: &str) -> Result<Tenant, Error> {
        let not_found = || Error::not_found(Resource::Tenant, tenant_id);
        if check_tenant_id(tenant_id).is_err() {
            return Err(not_found());
        }
        self.store()
            .get_tenant(tenant_id)
            .await?
            .ok_or_else(not_found)
    }

    /// `GET /admin/tenants`.
    pub async fn list_tenants(&self, principal: &Principal) -> Result<Vec<Tenant>, Error> {
        self.authorize(principal, Action::ManageTenants)?;
        Ok(self.store().list_tenants().await?)
    }

    /// `POST /admin/tenants`: 409 when the ID is taken.
    pub async fn create_tenant(
        &self,
        principal: &Principal,
        request: TenantRequest,
    ) -> Result<Tenant, Error> {
        self.authorize(principal, Action::ManageTenants)?;
        check_tenant_id(&request.id).map_err(|m| Error::invalid("id", m))?;
        let name = request.name.unwrap_or_else(|| request.id.clone());
        bounded_text("name", &name)?;
        let tenant = Tenant {
            id: request.id,
            name,
            created_at: svc_core::clock::truncate_to_micros(self.clock().now()),
        };
        self.store().create_tenant(&tenant).await?;
        Ok(tenant)
    }

    /// `GET /admin/tenants/{tenantID}`.
    pub async fn get_tenant(
        &self,
        principal: &Principal,
        tenant_id: &str,
    ) -> Result<Tenant, Error> {
        self.authorize(principal, Action::ManageTenants)?;
        self.existing_tenant(tenant_id).await
    }

    /// `DELETE /admin/tenants/{tenantID}`: with its members and policies. `default` stays.
    pub async fn delete_tenant(&self, principal: &Principal, tenant_id: &str) -> Result<(), Error> {
        self.authorize(principal, Action::ManageTenants)?;
        if tenant_id == DEFAULT_TENANT {
            return Err(Error::invalid(
                "tenantID",
                "the default tenant always exists and cannot be deleted",
            ));
        }
        if !self.store().delete_tenant(tenant_id).await? {
            return Err(Error::not_found(Resource::Tenant, tenant_id));
        }
        self.inner.member_roles.forget();
        Ok(())
    }

    /// `GET /admin/tenants/{tenantID}/members`.
    pub async fn list_members(
        &self,
        principal: &Principal,
        tenant_id: &str,
    ) -> Result<Vec<Member>, Error> {
        self.authorize_tenant(principal, tenant_id)?;
        self.existing_tenant(tenant_id).await?;
        Ok(self.store().list_members(tenant_id).await?)
    }

    /// `PUT /admin/tenants/{tenantID}/members/{subject}`.
    pub async fn put_member(
        &self,
        principal: &Principal,
        tenant_id: &str,
        subject: &str,
        request: MemberRequest,
    ) -> Result<Member, Error> {
        self.authorize_tenant(principal, tenant_id)?;
        bounded_text("subject", subject)?;
        let role = Role::ALL
            .into_iter()
            .find(|r| r.as_str() == request.role && is_member_role(*r))
            .ok_or_else(|| {
                Error::invalid(
                    "role",
                    format!(
                        "{} is not a member role (viewer, operator, tenant_admin)",
                        echo(&request.role)
                    ),
                )
            })?;
        self.existing_tenant(tenant_id).await?;
        let member = self
            .store()
            .put_member(&Member {
                tenant_id: tenant_id.to_owned(),
                subject: subject.to_owned(),
                role,
                created_at: svc_core::clock::truncate_to_micros(self.clock().now()),
            })
            .await?;
        self.inner.member_roles.forget();
        Ok(member)
    }

    /// `DELETE /admin/tenants/{tenantID}/members/{subject}`.
    pub async fn delete_member(
        &self,
        principal: &Principal,
        tenant_id: &str,
        subject: &str,
    ) -> Result<(), Error> {
        self.authorize_tenant(principal, tenant_id)?;
        self.existing_tenant(tenant_id).await?;
        if !self.store().delete_member(tenant_id, subject).await? {
            return Err(Error::not_found(Resource::Member, subject));
        }
        self.inner.member_roles.forget();
        Ok(())
    }

    /// `GET /admin/tenants/{tenantID}/policies`: highest priority first.
    pub async fn list_policies(
        &self,
        principal: &Principal,
        tenant_id: &str,
    ) -> Result<Vec<Policy>, Error> {
        self.authorize_tenant(principal, tenant_id)?;
        self.existing_tenant(tenant_id).await?;
        Ok(self.store().list_policies(tenant_id).await?)
    }

    /// `POST /admin/tenants/{tenantID}/policies`.
    pub async fn create_policy(
        &self,
        principal: &Principal,
        tenant_id: &str,
        request: PolicyRequest,
    ) -> Result<Policy, Error> {
        self.authorize_tenant(principal, tenant_id)?;
        let fields = request.validate()?;
        self.existing_tenant(tenant_id).await?;
        let policy = fields.into_policy(new_policy_id(), tenant_id, self.clock().now());
        self.store().create_policy(&policy).await?;
        Ok(policy)
    }

    /// `GET /admin/tenants/{tenantID}/policies/{policyID}`.
    pub async fn get_policy(
        &self,
        principal: &Principal,
        tenant_id: &str,
        policy_id: &str,
    ) -> Result<Policy, Error> {
        self.authorize_tenant(principal, tenant_id)?;
        self.existing_tenant(tenant_id).await?;
        self.store()
            .get_policy(tenant_id, policy_id)
            .await?
            .ok_or_else(|| Error::not_found(Resource::Policy, policy_id))
    }

    /// `PUT /admin/tenants/{tenantID}/policies/{policyID}`: replaces the policy's fields.
    pub async fn update_policy(
        &self,
        principal: &Principal,
        tenant_id: &str,
        policy_id: &str,
        request: PolicyRequest,
    ) -> Result<Policy, Error> {
        self.authorize_tenant(principal, tenant_id)?;
        let fields = request.validate()?;
        self.existing_tenant(tenant_id).await?;
        // The store keeps the stored `created_at`.
        let policy = fields.into_policy(policy_id.to_owned(), tenant_id, self.clock().now());
        self.store()
            .update_policy(&policy)
            .await?
            .ok_or_else(|| Error::not_found(Resource::Policy, policy_id))
    }

    /// `DELETE /admin/tenants/{tenantID}/policies/{policyID}`.
    pub async fn delete_policy(
        &self,
        principal: &Principal,
        tenant_id: &str,
        policy_id: &str,
    ) -> Result<(), Error> {
        self.authorize_tenant(principal, tenant_id)?;
        self.existing_tenant(tenant_id).await?;
        if !self.store().delete_policy(tenant_id, policy_id).await? {
            return Err(Error::not_found(Resource::Policy, policy_id));
        }
        Ok(())
    }

    /// The tenant a spawn lands in: the caller's, or the body's `tenant_id`. API-key and
    /// admin callers may name any existing tenant (else 400); an OIDC caller only its own
    /// (else 403).
    pub(crate) async fn spawn_tenant(
        &self,
        principal: &Principal,
        requested: Option<&str>,
    ) -> Result<String, Error> {
        let Some(requested) = requested else {
            return Ok(principal.tenant_id.clone().into_owned());
        };
        if principal.tenant_scoped {
            if requested == principal.tenant_id {
                return Ok(requested.to_owned());
            }
            return Err(Error::Denied {
                message: format!(
                    "a caller of tenant {} may not spawn in tenant {}",
                    principal.tenant_id,
                    echo(requested)
                ),
            });
        }
        self.named_tenant("tenant_id", requested).await
    }

    /// A tenant named in a body's `field`: its ID when it exists, else 400 naming the field
    /// (a malformed ID is simply one that does not exist).
    pub(crate) async fn named_tenant(&self, field: &str, requested: &str) -> Result<String, Error> {
        let missing =
            || Error::invalid(field, format!("tenant {} does not exist", echo(requested)));
        if check_tenant_id(requested).is_err() {
            return Err(missing());
        }
        match self.store().get_tenant(requested).await? {
            Some(tenant) => Ok(tenant.id),
            None => Err(missing()),
        }
    }

    /// The policy check of a spawn (decisions §6): for each resource, the tenant's matching
    /// policies by descending priority, deny first at equal priority; the first decides. A
    /// denial is 403 `policy_denied`, an `operation.failed` event and an audit entry.
    pub(crate) async fn check_policies(
        &self,
        principal: &Principal,
        tenant_id: &str,
        values: &[(PolicyResource, Option<&str>)],
        provider: &str,
    ) -> Result<(), Error> {
        let policies = self.store().list_policies(tenant_id).await?;
        if policies.is_empty() {
            return Ok(());
        }
        for &(resource, value) in values {
            let Some(value) = value else { continue };
            let Some(policy) = deciding_policy(&policies, resource, value) else {
                continue;
            };
            if policy.effect == PolicyEffect::Allow {
                continue;
            }
            let error = Error::PolicyDenied {
                policy_name: policy.name.clone(),
                policy_id: policy.id.clone(),
                resource: resource.as_str(),
                value: value.to_owned(),
            };
            self.events().publish_in(
                tenant_id,
                None,
                EventPayload::OperationFailed(FailureEventData {
                    operation: "spawn".to_owned(),
                    provider: provider.to_owned(),
                    error: error.to_string(),
                }),
            );
            let mut details = serde_json::Map::new();
            details.insert("policy_id".into(), policy.id.clone().into());
            details.insert("policy_name".into(), policy.name.clone().into());
            details.insert("resource".into(), resource.as_str().into());
            details.insert("value".into(), value.into());
            self.record_audit(AuditRecord {
                principal,
                tenant_id,
                action: "policy.denied",
                resource: format!("{}:{value}", resource.as_str()),
                outcome: AuditOutcome::Denied,
                details,
            })
            .await;
            return Err(error);
        }
        Ok(())
    }
}
