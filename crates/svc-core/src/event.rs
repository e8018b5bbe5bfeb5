//! Lifecycle events as published on `GET /events` (interface Events; decisions §12).

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;

/// Every event type the service publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum EventType {
    /// A sandbox record was created.
    #[serde(rename = "sandbox.created")]
    SandboxCreated,
    /// A sandbox is running.
    #[serde(rename = "sandbox.running")]
    SandboxRunning,
    /// A sandbox was destroyed.
    #[serde(rename = "sandbox.destroyed")]
    SandboxDestroyed,
    /// A sandbox failed.
    #[serde(rename = "sandbox.error")]
    SandboxError,
    /// A command started.
    #[serde(rename = "exec.started")]
    ExecStarted,
    /// A command finished.
    #[serde(rename = "exec.completed")]
    ExecCompleted,
    /// A command could not run.
    #[serde(rename = "exec.failed")]
    ExecFailed,
    /// A command hit its deadline.
    #[serde(rename = "exec.timeout")]
    ExecTimeout,
    /// A file was written.
    #[serde(rename = "file.written")]
    FileWritten,
    /// A file was read.
    #[serde(rename = "file.read")]
    FileRead,
    /// An operation failed.
    #[serde(rename = "operation.failed")]
    OperationFailed,
    /// A limit denied a request.
    #[serde(rename = "resource.limit")]
    ResourceLimit,
    /// A provider failed.
    #[serde(rename = "provider.failed")]
    ProviderFailed,
    /// Reconciliation acted.
    #[serde(rename = "reconcile.action")]
    ReconcileAction,
    /// A spawn waits in the queue.
    #[serde(rename = "spawn.queued")]
    SpawnQueued,
    /// A queued spawn resumed.
    #[serde(rename = "spawn.dequeued")]
    SpawnDequeued,
    /// A queued spawn gave up.
    #[serde(rename = "spawn.queue_timeout")]
    SpawnQueueTimeout,
    /// An owner quota was saved.
    #[serde(rename = "quota.saved")]
    QuotaSaved,
    /// An owner quota was deleted.
    #[serde(rename = "quota.deleted")]
    QuotaDeleted,
}

impl EventType {
    /// Every type, for filters and docs.
    pub const ALL: [EventType; 19] = [
        EventType::SandboxCreated,
        EventType::SandboxRunning,
        EventType::SandboxDestroyed,
        EventType::SandboxError,
        EventType::ExecStarted,
        EventType::ExecCompleted,
        EventType::ExecFailed,
        EventType::ExecTimeout,
        EventType::FileWritten,
        EventType::FileRead,
        EventType::OperationFailed,
        EventType::ResourceLimit,
        EventType::ProviderFailed,
        EventType::ReconcileAction,
        EventType::SpawnQueued,
        EventType::SpawnDequeued,
        EventType::SpawnQueueTimeout,
        EventType::QuotaSaved,
        EventType::QuotaDeleted,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SandboxCreated => "sandbox.created",
            EventType::SandboxRunning => "sandbox.running",
            EventType::SandboxDestroyed => "sandbox.destroyed",
            EventType::SandboxError => "sandbox.error",
            EventType::ExecStarted => "exec.started",
            EventType::ExecCompleted => "exec.completed",
            EventType::ExecFailed => "exec.failed",
            EventType::ExecTimeout => "exec.timeout",
            EventType::FileWritten => "file.written",
            EventType::FileRead => "file.read",
            EventType::OperationFailed => "operation.failed",
            EventType::ResourceLimit => "resource.limit",
            EventType::ProviderFailed => "provider.failed",
            EventType::ReconcileAction => "reconcile.action",
            EventType::SpawnQueued => "spawn.queued",
            EventType::SpawnDequeued => "spawn.dequeued",
            EventType::SpawnQueueTimeout => "spawn.queue_timeout",
            EventType::QuotaSaved => "quota.saved",
            EventType::QuotaDeleted => "quota.deleted",
        }
    }

    /// Parses the wire name.
    pub fn parse(value: &str) -> Option<Self> {
        EventType::ALL.into_iter().find(|t| t.as_str() == value)
    }
}

/// A published event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Event {
    /// Unique across replicas.
    pub id: String,
    /// Event type.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// The sandbox concerned; empty when none.
    pub sandbox_id: String,
    /// When it happened.
    #[schema(value_type = String, format = DateTime)]
    pub timestamp: Timestamp,
    /// Type-specific payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Map<String, serde_json::Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for t in EventType::ALL {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
            assert_eq!(EventType::parse(t.as_str()), Some(t));
        }
        assert_eq!(EventType::parse("sandbox.nope"), None);
    }
}
