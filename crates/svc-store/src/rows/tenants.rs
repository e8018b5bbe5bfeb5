//! Tenant, member and policy rows.

use svc_core::access::Role;
use svc_core::tenant::{Member, Policy, PolicyEffect, PolicyResource, Tenant};

use super::{micros, stored_row, timestamp};
use crate::{StoreError, StoreResult};

pub(crate) const TENANT_COLUMNS: &str = TenantRow::COLUMNS;

pub(crate) const MEMBER_COLUMNS: &str = MemberRow::COLUMNS;

pub(crate) const POLICY_COLUMNS: &str = PolicyRow::COLUMNS;

fn corrupt(entity: &'static str, key: &str, message: String) -> StoreError {
    StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message,
    }
}

/// A role from its wire name.
fn parse_role(text: &str) -> Option<Role> {
    Role::ALL.into_iter().find(|role| role.as_str() == text)
}

/// The stored role of one membership.
pub(crate) fn decode_role(tenant_id: &str, subject: &str, role: &str) -> StoreResult<Role> {
    parse_role(role).ok_or_else(|| {
        corrupt(
            "member",
            &format!("{tenant_id}/{subject}"),
            format!("unknown role {role:?}"),
        )
    })
}

stored_row! {
    /// A tenant row as stored.
    struct TenantRow {
        id: String,
        name: String,
        created_at: i64,
    }
}

impl TenantRow {
    pub(crate) fn from_domain(tenant: &Tenant) -> Self {
        TenantRow {
            id: tenant.id.clone(),
            name: tenant.name.clone(),
            created_at: micros(tenant.created_at),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn into_domain(self) -> StoreResult<Tenant> {
        Ok(Tenant {
            created_at: timestamp("tenant", &self.id, self.created_at)?,
            name: self.name,
            id: self.id,
        })
    }
}

stored_row! {
    /// A member row as stored.
    struct MemberRow {
        tenant_id: String,
        subject: String,
        role: String,
        created_at: i64,
    }
}

impl MemberRow {
    pub(crate) fn from_domain(member: &Member) -> Self {
        MemberRow {
            tenant_id: member.tenant_id.clone(),
            subject: member.subject.clone(),
            role: member.role.as_str().to_owned(),
            created_at: micros(member.created_at),
        }
    }

    pub(crate) fn into_domain(self) -> StoreResult<Member> {
        let key = format!("{}/{}", self.tenant_id, self.subject);
        Ok(Member {
            role: decode_role(&self.tenant_id, &self.subject, &self.role)?,
            created_at: timestamp("member", &key, self.created_at)?,
            tenant_id: self.tenant_id,
            subject: self.subject,
        })
    }
}

stored_row! {
    /// A policy row as stored.
    struct PolicyRow {
        pub(crate) id: String,
        tenant_id: String,
        name: String,
        resource: String,
        pattern: String,
        effect: String,
        priority: i64,
        created_at: i64,
        updated_at: i64,
    }
}

impl PolicyRow {
    pub(crate) fn from_domain(policy: &Policy) -> Self {
        PolicyRow {
            id: policy.id.clone(),
            tenant_id: policy.tenant_id.clone(),
            name: policy.name.clone(),
            resource: policy.resource.as_str().to_owned(),
            pattern: policy.pattern.clone(),
            effect: policy.effect.as_str().to_owned(),
            priority: policy.priority,
            created_at: micros(policy.created_at),
            updated_at: micros(policy.updated_at),
        }
    }

    pub(crate) fn into_domain(self) -> StoreResult<Policy> {
        const E: &str = "policy";
        Ok(Policy {
            resource: PolicyResource::parse(&self.resource).ok_or_else(|| {
                corrupt(E, &self.id, format!("unknown resource {:?}", self.resource))
            })?,
            effect: PolicyEffect::parse(&self.effect)
                .ok_or_else(|| corrupt(E, &self.id, format!("unknown effect {:?}", self.effect)))?,
            created_at: timestamp(E, &self.id, self.created_at)?,
            updated_at: timestamp(E, &self.id, self.updated_at)?,
            tenant_id: self.tenant_id,
            name: self.name,
            pattern: self.pattern,
            priority: self.priority,
            id: self.id,
        })
    }
}
