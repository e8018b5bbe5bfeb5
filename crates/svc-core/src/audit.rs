//! The audit log (decisions §6): who did what, to what, in which tenant, with what outcome.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::Timestamp;

/// Default and largest page of `GET /admin/audit`.
pub const DEFAULT_AUDIT_LIMIT: u32 = 100;
/// Largest `limit` accepted.
pub const MAX_AUDIT_LIMIT: u32 = 1000;

/// The CSV header, in the field order of [`AuditEntry`].
pub const AUDIT_FIELDS: [&str; 9] = [
    "id",
    "timestamp",
    "actor",
    "role",
    "tenant_id",
    "action",
    "resource",
    "outcome",
    "details",
];

/// How an audited request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditOutcome {
    /// Done.
    Success,
    /// Refused by a role or a policy.
    Denied,
    /// Attempted and failed (bad input, conflict, internal error).
    Failure,
}

impl AuditOutcome {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOutcome::Success => "success",
            AuditOutcome::Denied => "denied",
            AuditOutcome::Failure => "failure",
        }
    }

    /// Parses the wire name.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Success, Self::Denied, Self::Failure]
            .into_iter()
            .find(|o| o.as_str() == text)
    }
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// `aud-` and 16 hex characters.
    pub id: String,
    /// When it happened.
    #[schema(value_type = String, format = DateTime)]
    pub timestamp: Timestamp,
    /// Who: the OIDC subject, or `api-key`, `admin-api-key`, `anonymous`, `system`.
    pub actor: String,
    /// The actor's role.
    pub role: String,
    /// The tenant concerned.
    pub tenant_id: String,
    /// What, e.g. `tenant.create`, `policy.update`, `quota.save`, `policy.denied`.
    pub action: String,
    /// The object acted on (a path or an ID).
    pub resource: String,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// More about it (status, error code, denied value...).
    #[schema(value_type = Object)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl AuditEntry {
    /// A new audit ID.
    pub fn new_id() -> String {
        format!("aud-{}", hex::encode(rand::random::<[u8; 8]>()))
    }
}

/// Which entries `GET /admin/audit` returns (all conditions must hold), newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Exact tenant.
    pub tenant_id: Option<String>,
    /// Exact actor.
    pub actor: Option<String>,
    /// Exact action.
    pub action: Option<String>,
    /// At or after.
    pub since: Option<Timestamp>,
    /// At or before.
    pub until: Option<Timestamp>,
    /// At most this many (1..=[`MAX_AUDIT_LIMIT`], and one more when paging asks whether
    /// another page follows).
    pub limit: u32,
    /// Only entries after this one, newest first (keyset paging).
    pub after: Option<AuditPosition>,
}

/// A place in the audit log's order, newest first: `timestamp` descending, then insertion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPosition {
    /// The entry's time.
    pub timestamp: Timestamp,
    /// The entry, which orders entries of the same microsecond by when it was written.
    pub id: String,
}
