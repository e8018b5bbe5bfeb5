//! Rows to domain values and back. Timestamps are microseconds since the epoch; maps are JSON.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::DateTime;
use rusqlite::{ErrorCode, Row, ToSql};
use svc_core::sandbox::{Metadata, Sandbox, SandboxState, StateReason};
use svc_core::template::Template;
use svc_core::{GoDuration, SandboxId, Timestamp};

use crate::{StoreError, StoreResult};

pub(super) const SANDBOX_COLUMNS: &str =
    "id, state, provider, image, memory_mb, vcpus, created_at, \
    expires_at, destroyed_at, metadata, env, preview_domain, worker_id, tenant_id, owner_id, \
    template, network, state_reason, state_message";

/// How many columns [`SANDBOX_COLUMNS`] names (and [`SandboxRow::params`] binds).
pub(super) const SANDBOX_COLUMN_COUNT: usize = 19;

pub(super) const TEMPLATE_COLUMNS: &str =
    "name, image, memory_mb, vcpus, ttl_nanos, provider, metadata, created_at, updated_at";

pub(super) fn micros(at: Timestamp) -> i64 {
    at.timestamp_micros()
}

pub(super) fn timestamp(entity: &'static str, key: &str, value: i64) -> StoreResult<Timestamp> {
    DateTime::from_timestamp_micros(value).ok_or_else(|| StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message: format!("timestamp {value} out of range"),
    })
}

pub(super) fn backend(operation: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + Copy {
    move |err| match err.sqlite_error_code() {
        Some(
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::CannotOpen
            | ErrorCode::DiskFull
            | ErrorCode::ReadOnly,
        ) => StoreError::Unavailable {
            operation,
            source: err.into(),
        },
        _ => StoreError::Backend {
            operation,
            source: err.into(),
        },
    }
}

pub(super) fn conflict_or_backend<'a>(
    operation: &'static str,
    entity: &'static str,
    key: &'a str,
) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |err| match err.sqlite_error_code() {
        Some(ErrorCode::ConstraintViolation) => StoreError::Conflict {
            entity,
            key: key.to_owned(),
        },
        _ => backend(operation)(err),
    }
}

fn json_map(entity: &'static str, key: &str, text: &str) -> StoreResult<BTreeMap<String, String>> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message: e.to_string(),
    })
}

fn encode_map(map: &BTreeMap<String, String>) -> StoreResult<String> {
    serde_json::to_string(map).map_err(|e| StoreError::Backend {
        operation: "encode map",
        source: e.into(),
    })
}

fn as_i64(value: u32) -> i64 {
    i64::from(value)
}

fn as_u32(entity: &'static str, key: &str, value: i64) -> StoreResult<u32> {
    u32::try_from(value).map_err(|_| StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message: format!("value {value} out of range"),
    })
}

/// A sandbox row as stored.
pub(super) struct SandboxRow {
    pub(super) id: String,
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
}

impl SandboxRow {
    pub(super) fn from_domain(sandbox: &Sandbox) -> StoreResult<Self> {
        Ok(SandboxRow {
            id: sandbox.id.as_str().to_owned(),
            state: sandbox.state.as_str().to_owned(),
            provider: sandbox.provider.clone(),
            image: sandbox.image.clone(),
            memory_mb: as_i64(sandbox.memory_mb),
            vcpus: as_i64(sandbox.vcpus),
            created_at: micros(sandbox.created_at),
            expires_at: micros(sandbox.expires_at),
            destroyed_at: sandbox.destroyed_at.map(micros),
            metadata: encode_map(&sandbox.metadata)?,
            env: encode_map(&sandbox.env)?,
            preview_domain: sandbox.preview_domain.clone(),
            worker_id: sandbox.worker_id.clone(),
            tenant_id: sandbox.tenant_id.clone(),
            owner_id: sandbox.owner_id.clone(),
            template: sandbox.template.clone(),
            network: sandbox.network.clone(),
            state_reason: sandbox.state_reason.map(|r| r.as_str().to_owned()),
            state_message: sandbox.state_message.clone(),
        })
    }

    pub(super) fn params(&self) -> [&dyn ToSql; SANDBOX_COLUMN_COUNT] {
        [
            &self.id,
            &self.state,
            &self.provider,
            &self.image,
            &self.memory_mb,
            &self.vcpus,
            &self.created_at,
            &self.expires_at,
            &self.destroyed_at,
            &self.metadata,
            &self.env,
            &self.preview_domain,
            &self.worker_id,
            &self.tenant_id,
            &self.owner_id,
            &self.template,
            &self.network,
            &self.state_reason,
            &self.state_message,
        ]
    }

    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(SandboxRow {
            id: row.get(0)?,
            state: row.get(1)?,
            provider: row.get(2)?,
            image: row.get(3)?,
            memory_mb: row.get(4)?,
            vcpus: row.get(5)?,
            created_at: row.get(6)?,
            expires_at: row.get(7)?,
            destroyed_at: row.get(8)?,
            metadata: row.get(9)?,
            env: row.get(10)?,
            preview_domain: row.get(11)?,
            worker_id: row.get(12)?,
            tenant_id: row.get(13)?,
            owner_id: row.get(14)?,
            template: row.get(15)?,
            network: row.get(16)?,
            state_reason: row.get(17)?,
            state_message: row.get(18)?,
        })
    }

    pub(super) fn into_domain(self) -> StoreResult<Sandbox> {
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
            owner_id: self.owner_id,
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
        })
    }
}

/// A template row as stored.
pub(super) struct TemplateRow {
    pub(super) name: String,
    image: String,
    memory_mb: i64,
    vcpus: i64,
    ttl_nanos: i64,
    provider: String,
    metadata: String,
    created_at: i64,
    updated_at: i64,
}

impl TemplateRow {
    pub(super) fn from_domain(template: &Template) -> StoreResult<Self> {
        Ok(TemplateRow {
            name: template.name.clone(),
            image: template.image.clone(),
            memory_mb: as_i64(template.memory_mb),
            vcpus: as_i64(template.vcpus),
            // GoDuration never exceeds i64::MAX nanoseconds.
            ttl_nanos: i64::try_from(template.ttl.as_std().as_nanos()).unwrap_or(i64::MAX),
            provider: template.provider.clone(),
            metadata: encode_map(&template.metadata)?,
            created_at: micros(template.created_at),
            updated_at: micros(template.updated_at),
        })
    }

    pub(super) fn params(&self) -> [&dyn ToSql; 9] {
        [
            &self.name,
            &self.image,
            &self.memory_mb,
            &self.vcpus,
            &self.ttl_nanos,
            &self.provider,
            &self.metadata,
            &self.created_at,
            &self.updated_at,
        ]
    }

    pub(super) fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(TemplateRow {
            name: row.get(0)?,
            image: row.get(1)?,
            memory_mb: row.get(2)?,
            vcpus: row.get(3)?,
            ttl_nanos: row.get(4)?,
            provider: row.get(5)?,
            metadata: row.get(6)?,
            created_at: row.get(7)?,
            updated_at: row.get(8)?,
        })
    }

    pub(super) fn into_domain(self) -> StoreResult<Template> {
        const E: &str = "template";
        let key = self.name.clone();
        let metadata: Metadata = json_map(E, &key, &self.metadata)?;
        Ok(Template {
            image: self.image,
            memory_mb: as_u32(E, &key, self.memory_mb)?,
            vcpus: as_u32(E, &key, self.vcpus)?,
            ttl: GoDuration::new(Duration::from_nanos(
                u64::try_from(self.ttl_nanos).unwrap_or(0),
            )),
            provider: self.provider,
            metadata,
            created_at: timestamp(E, &key, self.created_at)?,
            updated_at: timestamp(E, &key, self.updated_at)?,
            name: self.name,
        })
    }
}
