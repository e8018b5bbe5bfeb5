//! Lifecycle events as published on `GET /events` (interface Events; decisions §12).

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::LimitReason;
use crate::id::SandboxId;
use crate::sandbox::StateReason;

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
    /// A sandbox was paused.
    #[serde(rename = "sandbox.paused")]
    SandboxPaused,
    /// A paused sandbox runs again.
    #[serde(rename = "sandbox.resumed")]
    SandboxResumed,
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
    /// A template build started (decisions §17).
    #[serde(rename = "template.build_started")]
    TemplateBuildStarted,
    /// A template build succeeded; the template uses its image.
    #[serde(rename = "template.build_succeeded")]
    TemplateBuildSucceeded,
    /// A template build failed or was cancelled.
    #[serde(rename = "template.build_failed")]
    TemplateBuildFailed,
    /// A spawn is pulling its image.
    #[serde(rename = "image.pulling")]
    ImagePulling,
}

impl EventType {
    /// Every type, for filters and docs.
    pub const ALL: [EventType; 25] = [
        EventType::SandboxCreated,
        EventType::SandboxRunning,
        EventType::SandboxDestroyed,
        EventType::SandboxError,
        EventType::SandboxPaused,
        EventType::SandboxResumed,
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
        EventType::TemplateBuildStarted,
        EventType::TemplateBuildSucceeded,
        EventType::TemplateBuildFailed,
        EventType::ImagePulling,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SandboxCreated => "sandbox.created",
            EventType::SandboxRunning => "sandbox.running",
            EventType::SandboxDestroyed => "sandbox.destroyed",
            EventType::SandboxError => "sandbox.error",
            EventType::SandboxPaused => "sandbox.paused",
            EventType::SandboxResumed => "sandbox.resumed",
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
            EventType::TemplateBuildStarted => "template.build_started",
            EventType::TemplateBuildSucceeded => "template.build_succeeded",
            EventType::TemplateBuildFailed => "template.build_failed",
            EventType::ImagePulling => "image.pulling",
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
    /// The sandbox concerned. The wire always carries the field (interface Events), as `""`
    /// for events about no sandbox (quotas, limits).
    #[serde(with = "crate::empty_as_none")]
    #[schema(value_type = String)]
    pub sandbox_id: Option<SandboxId>,
    /// When it happened.
    #[schema(value_type = String, format = DateTime)]
    pub timestamp: Timestamp,
    /// Type-specific payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Map<String, serde_json::Value>>,
    /// The tenant it belongs to, if any; decides which OIDC subscribers get it. Not on the wire.
    #[serde(skip)]
    pub tenant_id: Option<String>,
}

/// Which exec form an `exec.*` event is about (its `operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecOperation {
    /// `POST /exec`.
    Exec,
    /// `POST /exec` with `stream: true`.
    ExecStream,
    /// `GET /exec/ws`.
    ExecInteractive,
}

/// `data` of `sandbox.*` events (decisions §12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxEventData {
    /// Provider name.
    pub provider: String,
    /// Image.
    pub image: String,
    /// Owner; empty when anonymous.
    #[serde(with = "crate::empty_as_none")]
    pub owner_id: Option<crate::OwnerId>,
    /// Tenant.
    pub tenant_id: String,
    /// The worker holding it.
    pub worker_id: Option<String>,
    /// Why it ended (`sandbox.destroyed`, `sandbox.error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<StateReason>,
    /// How it ended, in words: the record's `state_message` (`sandbox.destroyed`,
    /// `sandbox.error`); may be empty.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
    /// What went wrong (`sandbox.error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// True when the spawn pulled the image first (`sandbox.created`).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub image_pulled: bool,
}

/// `data` of `exec.*` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecEventData {
    /// The exec's ID; absent only in events of replicas older than exec IDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_id: Option<crate::ExecId>,
    /// The exec form.
    pub operation: ExecOperation,
    /// Provider name.
    pub provider: String,
    /// Exit code (`exec.completed`); absent when it could not be learnt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Wall time as a Go duration (`exec.completed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// What went wrong (`exec.failed`, `exec.timeout`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// True when svc ended it because its caller went away.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub cancelled: bool,
}

/// `data` of `file.*` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEventData {
    /// Absolute path inside the sandbox.
    pub path: String,
    /// Bytes written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// `data` of `resource.limit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitEventData {
    /// Which limit.
    pub reason: LimitReason,
    /// The owner it applied to; empty when anonymous.
    #[serde(with = "crate::empty_as_none")]
    pub owner_id: Option<crate::OwnerId>,
}

/// `data` of `operation.failed` and `provider.failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureEventData {
    /// The operation (`spawn`, `destroy`, `exec`, ...).
    pub operation: String,
    /// Provider name.
    pub provider: String,
    /// The caller-facing message.
    pub error: String,
}

/// `data` of `spawn.*` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpawnQueueEventData {
    /// The waiting spawn's owner; empty when anonymous.
    #[serde(with = "crate::empty_as_none")]
    pub owner_id: Option<crate::OwnerId>,
    /// How long it waited (Go duration string); absent on `spawn.queued`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
}

/// `data` of `reconcile.action` events (decisions §11).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReconcileEventData {
    /// `adopted_runtime`, `marked_destroyed`, `marked_error` or `taken_over`.
    pub action: String,
    /// The provider of the runtime.
    pub provider: String,
    /// Its image.
    pub image: String,
}

/// `data` of `quota.*` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaEventData {
    /// The owner whose quota changed.
    pub owner_id: String,
}

/// `data` of `template.build_*` events (decisions §17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuildEventData {
    /// The template built.
    pub template: String,
    /// The build.
    pub build_id: String,
    /// The image made, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Why it failed (`cancelled` for a cancel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `data` of `image.pulling` events (decisions §17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullEventData {
    /// The image being pulled.
    pub image: String,
    /// Bytes pulled so far.
    pub current_bytes: u64,
    /// Bytes to pull, as far as known yet.
    pub total_bytes: u64,
}

/// An event to publish: its type and its typed data, which decide each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventPayload {
    /// `sandbox.created`.
    SandboxCreated(SandboxEventData),
    /// `sandbox.running`.
    SandboxRunning(SandboxEventData),
    /// `sandbox.destroyed`.
    SandboxDestroyed(SandboxEventData),
    /// `sandbox.error`.
    SandboxError(SandboxEventData),
    /// `sandbox.paused`.
    SandboxPaused(SandboxEventData),
    /// `sandbox.resumed`.
    SandboxResumed(SandboxEventData),
    /// `exec.started`.
    ExecStarted(ExecEventData),
    /// `exec.completed`.
    ExecCompleted(ExecEventData),
    /// `exec.failed`.
    ExecFailed(ExecEventData),
    /// `exec.timeout`.
    ExecTimeout(ExecEventData),
    /// `file.written`.
    FileWritten(FileEventData),
    /// `file.read`.
    FileRead(FileEventData),
    /// `operation.failed`.
    OperationFailed(FailureEventData),
    /// `provider.failed`.
    ProviderFailed(FailureEventData),
    /// `resource.limit`.
    ResourceLimit(LimitEventData),
    /// `spawn.queued`.
    SpawnQueued(SpawnQueueEventData),
    /// `spawn.dequeued`.
    SpawnDequeued(SpawnQueueEventData),
    /// `spawn.queue_timeout`.
    SpawnQueueTimeout(SpawnQueueEventData),
    /// `reconcile.action`.
    ReconcileAction(ReconcileEventData),
    /// `quota.saved`.
    QuotaSaved(QuotaEventData),
    /// `quota.deleted`.
    QuotaDeleted(QuotaEventData),
    /// `template.build_started`.
    TemplateBuildStarted(BuildEventData),
    /// `template.build_succeeded`.
    TemplateBuildSucceeded(BuildEventData),
    /// `template.build_failed`.
    TemplateBuildFailed(BuildEventData),
    /// `image.pulling`.
    ImagePulling(PullEventData),
}

impl EventPayload {
    /// The event type this payload is published as.
    pub fn event_type(&self) -> EventType {
        match self {
            EventPayload::SandboxCreated(_) => EventType::SandboxCreated,
            EventPayload::SandboxRunning(_) => EventType::SandboxRunning,
            EventPayload::SandboxDestroyed(_) => EventType::SandboxDestroyed,
            EventPayload::SandboxError(_) => EventType::SandboxError,
            EventPayload::SandboxPaused(_) => EventType::SandboxPaused,
            EventPayload::SandboxResumed(_) => EventType::SandboxResumed,
            EventPayload::ExecStarted(_) => EventType::ExecStarted,
            EventPayload::ExecCompleted(_) => EventType::ExecCompleted,
            EventPayload::ExecFailed(_) => EventType::ExecFailed,
            EventPayload::ExecTimeout(_) => EventType::ExecTimeout,
            EventPayload::FileWritten(_) => EventType::FileWritten,
            EventPayload::FileRead(_) => EventType::FileRead,
            EventPayload::OperationFailed(_) => EventType::OperationFailed,
            EventPayload::ProviderFailed(_) => EventType::ProviderFailed,
            EventPayload::ResourceLimit(_) => EventType::ResourceLimit,
            EventPayload::SpawnQueued(_) => EventType::SpawnQueued,
            EventPayload::SpawnDequeued(_) => EventType::SpawnDequeued,
            EventPayload::SpawnQueueTimeout(_) => EventType::SpawnQueueTimeout,
            EventPayload::ReconcileAction(_) => EventType::ReconcileAction,
            EventPayload::QuotaSaved(_) => EventType::QuotaSaved,
            EventPayload::QuotaDeleted(_) => EventType::QuotaDeleted,
            EventPayload::TemplateBuildStarted(_) => EventType::TemplateBuildStarted,
            EventPayload::TemplateBuildSucceeded(_) => EventType::TemplateBuildSucceeded,
            EventPayload::TemplateBuildFailed(_) => EventType::TemplateBuildFailed,
            EventPayload::ImagePulling(_) => EventType::ImagePulling,
        }
    }

    /// The `data` object as it goes on the wire.
    pub fn into_data(self) -> serde_json::Map<String, serde_json::Value> {
        let value = match self {
            EventPayload::SandboxCreated(d)
            | EventPayload::SandboxRunning(d)
            | EventPayload::SandboxDestroyed(d)
            | EventPayload::SandboxError(d)
            | EventPayload::SandboxPaused(d)
            | EventPayload::SandboxResumed(d) => serde_json::to_value(d),
            EventPayload::ExecStarted(d)
            | EventPayload::ExecCompleted(d)
            | EventPayload::ExecFailed(d)
            | EventPayload::ExecTimeout(d) => serde_json::to_value(d),
            EventPayload::FileWritten(d) | EventPayload::FileRead(d) => serde_json::to_value(d),
            EventPayload::OperationFailed(d) | EventPayload::ProviderFailed(d) => {
                serde_json::to_value(d)
            }
            EventPayload::ResourceLimit(d) => serde_json::to_value(d),
            EventPayload::SpawnQueued(d)
            | EventPayload::SpawnDequeued(d)
            | EventPayload::SpawnQueueTimeout(d) => serde_json::to_value(d),
            EventPayload::ReconcileAction(d) => serde_json::to_value(d),
            EventPayload::QuotaSaved(d) | EventPayload::QuotaDeleted(d) => serde_json::to_value(d),
            EventPayload::TemplateBuildStarted(d)
            | EventPayload::TemplateBuildSucceeded(d)
            | EventPayload::TemplateBuildFailed(d) => serde_json::to_value(d),
            EventPayload::ImagePulling(d) => serde_json::to_value(d),
        };
        match value {
            Ok(serde_json::Value::Object(map)) => map,
            // Every payload is a struct of strings, numbers and booleans.
            _ => serde_json::Map::new(),
        }
    }
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

    #[test]
    fn payloads_render_decided_keys() {
        let data = EventPayload::ExecCompleted(ExecEventData {
            exec_id: Some(crate::ExecId::parse("ex-0123456789abcdef").unwrap()),
            operation: ExecOperation::ExecStream,
            provider: "mock".into(),
            exit_code: Some(3),
            duration: Some("1.5s".into()),
            error: None,
            cancelled: false,
        });
        assert_eq!(data.event_type(), EventType::ExecCompleted);
        assert_eq!(
            serde_json::Value::Object(data.into_data()),
            serde_json::json!({"exec_id": "ex-0123456789abcdef", "operation": "exec_stream", "provider": "mock", "exit_code": 3, "duration": "1.5s"})
        );
        let limit = EventPayload::ResourceLimit(LimitEventData {
            reason: LimitReason::MaxSandboxes,
            owner_id: None,
        });
        assert_eq!(
            serde_json::Value::Object(limit.into_data()),
            serde_json::json!({"reason": "max_sandboxes", "owner_id": ""})
        );
    }

    #[test]
    fn missing_sandbox_is_an_empty_string_on_the_wire() {
        let event = Event {
            id: "ev-1".into(),
            event_type: EventType::QuotaSaved,
            sandbox_id: None,
            timestamp: chrono::DateTime::UNIX_EPOCH,
            data: None,
            tenant_id: Some("acme".into()),
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["sandbox_id"], "");
        assert!(
            json.get("tenant_id").is_none(),
            "the tenant stays off the wire"
        );
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(
            back,
            Event {
                tenant_id: None,
                ..event
            }
        );
    }
}
