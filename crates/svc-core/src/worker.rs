//! Workers and leases (interface "Worker", "Lease"; decisions §11). A worker is a process that
//! runs sandboxes; every replica is its own local worker. A lease fences one resource (a
//! sandbox: `resource_id` is its ID) to one worker at a time, with a generation that grows with
//! every change of holder, so a stale holder's action can be refused.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::{elapsed_between, Timestamp};

/// A worker's status.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WorkerStatus {
    /// Serving.
    #[default]
    Online,
    /// Reachable but failing (no healthy provider).
    Unhealthy,
    /// Stopped (set on shutdown).
    Offline,
    /// Finishing its sandboxes; takes no new ones.
    Draining,
}

impl WorkerStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerStatus::Online => "online",
            WorkerStatus::Unhealthy => "unhealthy",
            WorkerStatus::Offline => "offline",
            WorkerStatus::Draining => "draining",
        }
    }

    /// Parses the wire name.
    pub fn parse(value: &str) -> Option<Self> {
        [
            WorkerStatus::Online,
            WorkerStatus::Unhealthy,
            WorkerStatus::Offline,
            WorkerStatus::Draining,
        ]
        .into_iter()
        .find(|s| s.as_str() == value)
    }
}

impl fmt::Display for WorkerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a worker declares it can hold; `0` = unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct WorkerCapacity {
    /// Sandboxes at once.
    pub max_sandboxes: u64,
    /// Sandboxes at once per owner.
    pub max_sandboxes_per_owner: u64,
}

/// What a heartbeat says about a worker (the body of `POST /worker/{id}/heartbeat`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct WorkerHeartbeat {
    /// Host name.
    pub hostname: String,
    /// Status; `online` when omitted.
    pub status: WorkerStatus,
    /// Providers it runs.
    pub providers: Vec<String>,
    /// Capabilities (`api`, `single_node`, `spawn`, `exec`, `files`, ...).
    pub capabilities: Vec<String>,
    /// Declared capacity.
    pub capacity: WorkerCapacity,
    /// Where its RPC listens (`https://` when `worker.rpc_tls.enabled`); beyond the interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A registered worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Worker {
    /// Worker ID (`local` for the single-node server).
    pub id: String,
    /// Host name.
    pub hostname: String,
    /// Status.
    pub status: WorkerStatus,
    /// Providers it runs.
    pub providers: Vec<String>,
    /// Capabilities.
    pub capabilities: Vec<String>,
    /// Declared capacity.
    pub capacity: WorkerCapacity,
    /// Where its RPC listens, when it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Last heartbeat.
    #[schema(value_type = String, format = DateTime)]
    pub last_heartbeat: Timestamp,
    /// First registration.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// Last change.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// True when the last heartbeat is older than `worker.stale_after` (computed when read).
    pub stale: bool,
}

impl Worker {
    /// Sets `stale` for `now` and the freshness window.
    pub fn with_staleness(mut self, now: Timestamp, stale_after: Duration) -> Self {
        self.stale =
            self.last_heartbeat < now && elapsed_between(self.last_heartbeat, now) > stale_after;
        self
    }

    /// True when the worker runs `provider`.
    pub fn runs(&self, provider: &str) -> bool {
        self.providers.iter().any(|p| p == provider)
    }
}

/// A lease on one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Lease {
    /// The resource (a sandbox ID).
    pub resource_id: String,
    /// The worker holding it.
    pub holder_id: String,
    /// Grows by one with every new holder: the fencing token.
    pub generation: u64,
    /// When it lapses unless renewed.
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
}

impl Lease {
    /// True while unexpired at `now`.
    pub fn active_at(&self, now: Timestamp) -> bool {
        self.expires_at > now
    }
}

/// What an acquire decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAcquire {
    /// The caller holds the lease now.
    Acquired(Lease),
    /// Another worker holds an unexpired lease.
    Held(Lease),
}

/// Lease counts at one instant (diagnostics `leases`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct LeaseCounts {
    /// Every lease row.
    pub total: u64,
    /// Unexpired.
    pub active: u64,
    /// Expired (or released).
    pub expired: u64,
    /// Active leases per holder.
    pub by_holder: std::collections::BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::add_duration;

    #[test]
    fn staleness_is_computed_against_the_window() {
        let t0 = crate::Clock::now(&crate::clock::SystemClock);
        let worker = Worker {
            id: "w".into(),
            hostname: "h".into(),
            status: WorkerStatus::Online,
            providers: vec!["mock".into()],
            capabilities: Vec::new(),
            capacity: WorkerCapacity::default(),
            url: None,
            last_heartbeat: t0,
            created_at: t0,
            updated_at: t0,
            stale: false,
        };
        let window = Duration::from_secs(90);
        assert!(
            !worker
                .clone()
                .with_staleness(add_duration(t0, window), window)
                .stale
        );
        assert!(
            worker
                .clone()
                .with_staleness(add_duration(t0, Duration::from_secs(91)), window)
                .stale
        );
        assert!(worker.runs("mock") && !worker.runs("docker"));
    }

    #[test]
    fn statuses_round_trip() {
        for s in ["online", "unhealthy", "offline", "draining"] {
            assert_eq!(WorkerStatus::parse(s).unwrap().as_str(), s);
        }
        assert_eq!(WorkerStatus::parse("gone"), None);
    }
}
