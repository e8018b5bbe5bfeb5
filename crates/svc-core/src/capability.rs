//! What a provider can do, as named on the wire (`interface.md`, Provider).

use serde::{Deserialize, Serialize};

/// One capability a provider declares.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// Creates sandboxes.
    Spawn,
    /// Runs buffered commands.
    Exec,
    /// Streams command output.
    ExecStream,
    /// File operations.
    Files,
    /// Console / log output and interactive terminals.
    Console,
    /// Reports its health.
    Health,
    /// Lists its runtimes for reconciliation.
    RuntimeInventory,
    /// Sandboxes are containers.
    Container,
    /// Keeps root filesystem snapshots.
    Snapshots,
    /// Sandboxes are microVMs.
    Microvm,
    /// Talks to a guest agent over vsock.
    VsockAgent,
    /// Reports a sandbox's resource usage (`GET /sandboxes/{id}/stats`).
    Stats,
    /// Freezes and thaws a sandbox (`POST /sandboxes/{id}/pause` and `/resume`).
    Pause,
    /// Keeps started runtimes ready for a template's spawns and hands one to a sandbox
    /// (template `warm_pool`, decisions §17).
    WarmPool,
    /// Enforces a sandbox's `egress` modes `none` and `allowlist` (decisions §18).
    Egress,
}

impl Capability {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Spawn => "spawn",
            Capability::Exec => "exec",
            Capability::ExecStream => "exec_stream",
            Capability::Files => "files",
            Capability::Console => "console",
            Capability::Health => "health",
            Capability::RuntimeInventory => "runtime_inventory",
            Capability::Container => "container",
            Capability::Snapshots => "snapshots",
            Capability::Microvm => "microvm",
            Capability::VsockAgent => "vsock_agent",
            Capability::Stats => "stats",
            Capability::Pause => "pause",
            Capability::WarmPool => "warm_pool",
            Capability::Egress => "egress",
        }
    }
}
