//! Sandbox and template rows.

use std::time::Duration;

use svc_core::sandbox::{Sandbox, SandboxState, StateReason};
use svc_core::template::Template;
use svc_core::{GoDuration, OwnerId, SandboxId};

use super::{as_u32, encode_map, json_map, micros, stored_row, timestamp};
use crate::{StoreError, StoreResult};

pub(crate) const SANDBOX_COLUMNS: &str = SandboxRow::COLUMNS;

pub(crate) const SANDBOX_COLUMN_COUNT: usize = SandboxRow::COLUMN_COUNT;

pub(crate) const TEMPLATE_COLUMNS: &str = TemplateRow::COLUMNS;

stored_row! {
    /// A sandbox row as stored.
    struct SandboxRow {
        pub(crate) id: String,
        state: String,
        provider: String,
        image: String,
        memory_mb: i64,
        vcpus: i64,
        created_at: i64,
        expires_at: i64,
        destroyed_at: Option<i64>,
        metadata: String,
        env: String,
        preview_domain: String,
        worker_id: Option<String>,
        tenant_id: String,
        owner_id: String,
        template: Option<String>,
        network: Option<String>,
        state_reason: Option<String>,
        state_message: Option<String>,
        paused_at: Option<i64>,
        paused_micros: i64,
        egress: String,
        exec_path: Option<String>,
    }
}

impl SandboxRow {
    pub(crate) fn from_domain(sandbox: &Sandbox) -> StoreResult<Self> {
        Ok(SandboxRow {
            id: sandbox.id.as_str().to_owned(),
            state: sandbox.state.as_str().to_owned(),
            provider: sandbox.provider.clone(),
            image: sandbox.image.clone(),
            memory_mb: i64::from(sandbox.memory_mb),
            vcpus: i64::from(sandbox.vcpus),
            created_at: micros(sandbox.created_at),
            expires_at: micros(sandbox.expires_at),
            destroyed_at: sandbox.destroyed_at.map(micros),
            metadata: encode_map(&sandbox.metadata)?,
            env: encode_map(&sandbox.env)?,
            preview_domain: sandbox.preview_domain.clone(),
            worker_id: sandbox.worker_id.clone(),
            tenant_id: sandbox.tenant_id.clone(),
            // The column holds '' for an anonymous sandbox (it is indexed and compared).
            owner_id: sandbox
                .owner_id
                .as_ref()
                .map(|owner| owner.as_str().to_owned())
                .unwrap_or_default(),
            template: sandbox.template.clone(),
            network: sandbox.network.clone(),
            state_reason: sandbox.state_reason.map(|r| r.as_str().to_owned()),
            state_message: sandbox.state_message.clone(),
            paused_at: sandbox.paused_at.map(micros),
            paused_micros: i64::try_from(sandbox.paused_for.as_micros()).unwrap_or(i64::MAX),
            egress: encode_egress(&sandbox.egress)?,
            exec_path: sandbox.exec_path.clone(),
        })
    }

    pub(crate) fn into_domain(self) -> StoreResult<Sandbox> {
        const E: &str = "sandbox";
        let key = self.id.clone();
        let corrupt = |message: String| StoreError::Corrupt {
            entity: E,
            key: key.clone(),
            message,
        };
        Ok(Sandbox {
            id: SandboxId::parse(&self.id).map_err(|e| corrupt(e.to_string()))?,
            state: SandboxState::parse(&self.state)
                .ok_or_else(|| corrupt(format!("unknown state {:?}", self.state)))?,
            provider: self.provider,
            image: self.image,
            memory_mb: as_u32(E, &key, self.memory_mb)?,
            vcpus: as_u32(E, &key, self.vcpus)?,
            created_at: timestamp(E, &key, self.created_at)?,
            expires_at: timestamp(E, &key, self.expires_at)?,
            destroyed_at: self
                .destroyed_at
                .map(|v| timestamp(E, &key, v))
                .transpose()?,
            metadata: json_map(E, &key, &self.metadata)?,
            env: json_map(E, &key, &self.env)?,
            preview_domain: self.preview_domain,
            worker_id: self.worker_id,
            tenant_id: self.tenant_id,
            owner_id: match self.owner_id.as_str() {
                "" => None,
                owner => Some(OwnerId::parse(owner).map_err(|e| corrupt(e.to_string()))?),
            },
            template: self.template,
            network: self.network,
            state_reason: self
                .state_reason
                .map(|r| {
                    StateReason::parse(&r)
                        .ok_or_else(|| corrupt(format!("unknown state reason {r:?}")))
                })
                .transpose()?,
            state_message: self.state_message,
            paused_at: self.paused_at.map(|v| timestamp(E, &key, v)).transpose()?,
            paused_for: Duration::from_micros(u64::try_from(self.paused_micros).unwrap_or(0)),
            egress: decode_egress(E, &key, &self.egress)?,
            exec_path: self.exec_path,
        })
    }
}

stored_row! {
    /// A template row as stored.
    struct TemplateRow {
        pub(crate) name: String,
        image: String,
        memory_mb: i64,
        vcpus: i64,
        ttl_nanos: i64,
        provider: String,
        metadata: String,
        created_at: i64,
        updated_at: i64,
        warm_pool: i64,
        egress: String,
        tenant_id: Option<String>,
    }
}

impl TemplateRow {
    pub(crate) fn from_domain(template: &Template) -> StoreResult<Self> {
        Ok(TemplateRow {
            name: template.name.clone(),
            image: template.image.clone(),
            memory_mb: i64::from(template.memory_mb),
            vcpus: i64::from(template.vcpus),
            // GoDuration never exceeds i64::MAX nanoseconds.
            ttl_nanos: i64::try_from(template.ttl.as_std().as_nanos()).unwrap_or(i64::MAX),
            provider: template.provider.clone(),
            metadata: encode_map(&template.metadata)?,
            created_at: micros(template.created_at),
            updated_at: micros(template.updated_at),
            warm_pool: i64::from(template.warm_pool),
            egress: encode_egress(&template.egress)?,
            tenant_id: template.tenant_id.clone(),
        })
    }

    pub(crate) fn into_domain(self) -> StoreResult<Template> {
        const E: &str = "template";
        let key = self.name.clone();
        Ok(Template {
            image: self.image,
            memory_mb: as_u32(E, &key, self.memory_mb)?,
            vcpus: as_u32(E, &key, self.vcpus)?,
            ttl: GoDuration::new(Duration::from_nanos(
                u64::try_from(self.ttl_nanos).unwrap_or(0),
            )),
            provider: self.provider,
            metadata: json_map(E, &key, &self.metadata)?,
            created_at: timestamp(E, &key, self.created_at)?,
            updated_at: timestamp(E, &key, self.updated_at)?,
            warm_pool: as_u32(E, &key, self.warm_pool)?,
            egress: decode_egress(E, &key, &self.egress)?,
            warm_ready: 0,
            tenant_id: self.tenant_id,
            name: self.name,
        })
    }
}

/// The template listing of both backends (parameter marks `mark`: `?` or `$`): a page by name
/// of every template, or (`of_tenant`) of the global ones and one tenant's (decisions §30).
/// Parameters: the name the page starts after, the limit, then the tenant. Names are unique
/// across tenants, so either list walks the primary key in name order; the tenant is a filter
/// on that walk, not an optional one (`(? IS NULL OR ...)`, which no plan serves well).
pub(crate) fn template_list_sql(mark: char, of_tenant: bool) -> String {
    let tenant = if of_tenant {
        format!(" AND (tenant_id IS NULL OR tenant_id = {mark}3)")
    } else {
        String::new()
    };
    format!(
        "SELECT {TEMPLATE_COLUMNS} FROM templates WHERE name > {mark}1{tenant} \
         ORDER BY name LIMIT {mark}2"
    )
}

fn encode_egress(egress: &svc_core::egress::Egress) -> StoreResult<String> {
    serde_json::to_string(egress).map_err(|e| StoreError::Backend {
        operation: "encode egress",
        source: e.into(),
    })
}

fn decode_egress(
    entity: &'static str,
    key: &str,
    text: &str,
) -> StoreResult<svc_core::egress::Egress> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message: format!("egress: {e}"),
    })
}
