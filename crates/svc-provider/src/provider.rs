//! The provider trait and the values it exchanges with the control plane.

use std::collections::BTreeMap;

use async_trait::async_trait;
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::{Capability, SandboxId, Timestamp};

use crate::{ByteStream, ExecSession, ExecSpec, ExecState, FileInfo, ProviderError, Upload};

/// Label marking a runtime as svc's.
pub const LABEL_MANAGED: &str = "dev.svc.managed";
/// Label carrying the sandbox ID.
pub const LABEL_SANDBOX_ID: &str = "dev.svc.sandbox_id";
/// Label carrying the owner.
pub const LABEL_OWNER: &str = "dev.svc.owner";
/// Label carrying the tenant.
pub const LABEL_TENANT: &str = "dev.svc.tenant";
/// Label carrying the worker that created it.
pub const LABEL_WORKER: &str = "dev.svc.worker";
/// Label: the installation ID of the database that recorded the runtime.
pub const LABEL_INSTALLATION: &str = "dev.svc.installation";
/// Label marking a runtime as a shared pool VM (pool mode), which holds the workspaces of
/// logical sandboxes and is never a sandbox of its own.
pub const LABEL_POOL: &str = "dev.svc.pool";
/// Label marking a runtime started ahead for a template's warm pool (decisions §17). It stays
/// on the runtime after a sandbox claims it: labels cannot change after creation.
pub const LABEL_WARM: &str = "dev.svc.warm";
/// Label naming the template a warm runtime was started for.
pub const LABEL_TEMPLATE: &str = "dev.svc.template";
/// Label: what the warm runtime was started as (provider, image, size, network), so a pool can
/// tell after a restart whether it still matches its template.
pub const LABEL_WARM_SPEC: &str = "dev.svc.warm_spec";

/// What the control plane asks a provider to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnSpec {
    /// The sandbox ID, chosen before the spawn.
    pub id: SandboxId,
    /// Image name.
    pub image: String,
    /// Memory limit in MiB.
    pub memory_mb: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Default environment.
    pub env: BTreeMap<String, String>,
    /// Network mode; `None` = the provider's configured default.
    pub network: Option<String>,
    /// Labels to attach (the `LABEL_*` keys).
    pub labels: BTreeMap<String, String>,
    /// The runtime hosts several users' workspaces (a pool VM): its root must manage other
    /// users' files and processes, so a container keeps the capabilities `CHOWN`,
    /// `DAC_OVERRIDE`, `FOWNER` and `KILL` (its other users' commands get none) and runs as
    /// root whatever `providers.docker.user` says.
    pub multi_user: bool,
    /// What the runtime may connect to; providers declaring `egress` enforce it.
    pub egress: svc_core::egress::Egress,
    /// Where the spawn reports how far pulling its image is (decisions §17).
    pub progress: crate::ProgressSink,
}

/// A runtime as the provider sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// The sandbox it belongs to.
    pub sandbox_id: SandboxId,
    /// Image name.
    pub image: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// True while it runs.
    pub running: bool,
    /// True when the spawn had to pull the image first.
    pub image_pulled: bool,
}

impl RuntimeInfo {
    /// The runtime a spawn of `spec` just started.
    pub fn started(spec: &SpawnSpec, image_pulled: bool) -> Self {
        RuntimeInfo {
            sandbox_id: spec.id.clone(),
            image: spec.image.clone(),
            labels: spec.labels.clone(),
            running: true,
            image_pulled,
        }
    }
}

/// A runtime that ended on its own (its VMM crashed, its agent died), as the provider noticed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeFailure {
    /// The sandbox it ran.
    pub sandbox_id: SandboxId,
    /// What happened, for `state_message` and events.
    pub message: String,
    /// Whether it may speak for the provider as a whole (a VMM that crashed), which then counts
    /// as unhealthy until its next check; one container's agent dying does not.
    pub provider_wide: bool,
}

/// Whether a sandbox's runtime exists and runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeStatus {
    /// Running.
    Running,
    /// Exists but stopped.
    Stopped,
    /// Gone.
    Missing,
}

/// A sandbox's resource usage at one moment (`GET /sandboxes/{id}/stats`, decisions §13).
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct SandboxStats {
    /// CPU use over the sampling window, in percent of one CPU (200 = two CPUs busy).
    pub cpu_percent: f64,
    /// Memory in use.
    pub memory_bytes: u64,
    /// The memory limit (0 when none is known).
    pub memory_limit_bytes: u64,
    /// Processes (or threads, as the runtime counts them).
    pub pids: u64,
    /// Bytes received on the sandbox's network interfaces.
    pub net_rx_bytes: u64,
    /// Bytes sent.
    pub net_tx_bytes: u64,
    /// When the sample was taken.
    #[schema(value_type = String, format = DateTime)]
    pub sampled_at: svc_core::Timestamp,
}

/// A cached root filesystem (`GET /snapshots`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct SnapshotInfo {
    /// Image it was built from.
    pub image: String,
    /// Guest kernel.
    pub kernel: String,
    /// Size in bytes.
    pub size: u64,
    /// When it was built.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

/// A sandbox backend. Object-safe: the binary picks implementations once, behind `Arc<dyn ..>`.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The wire name (`mock`, `docker`, `firecracker`).
    fn name(&self) -> &'static str;

    /// What it can do.
    fn capabilities(&self) -> &'static [Capability];

    /// Settings shown in provider detail; never secrets.
    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value>;

    /// The network mode a sandbox gets when its spawn names none (what tenant policies on
    /// `network` see). Processes on the host share its network, hence `host`.
    fn default_network(&self) -> String {
        "host".to_owned()
    }

    /// The least memory, in MiB, a runtime of this provider can be given; a spawn asking for
    /// less is refused with 400 (decisions §30).
    fn min_memory_mb(&self) -> u32 {
        1
    }

    /// Checks the backend answers.
    async fn health(&self) -> Result<(), ProviderError>;

    /// Starts what the provider prepares in the background while serving (qemu's KVM probe);
    /// called once when the service starts, never by one-off checks such as `svc doctor`.
    async fn warm_up(&self) {}

    /// Runtimes that end on their own, as the provider notices them; the first caller takes
    /// the receiver. Providers that cannot watch their runtimes answer `None` and leave it to
    /// reconciliation.
    fn take_failures(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<RuntimeFailure>> {
        None
    }

    /// Creates and starts a runtime. On error nothing is left behind.
    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError>;

    /// Hands the warm runtime `warm` to sandbox `id` (capability `warm_pool`): from now on
    /// every call names it by `id`, and [`Provider::inventory`] lists it under `id` while its
    /// labels keep naming `warm`. On error the runtime is still `warm`'s.
    async fn claim(&self, _warm: &SandboxId, _id: &SandboxId) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported { op: "claim" })
    }

    /// Removes a runtime; a runtime that is already gone is success.
    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError>;

    /// Whether the runtime exists and runs.
    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError>;

    /// The runtime's resource usage now (capability `stats`).
    async fn stats(&self, _id: &SandboxId) -> Result<SandboxStats, ProviderError> {
        Err(ProviderError::Unsupported { op: "stats" })
    }

    /// Freezes the runtime's processes (capability `pause`); a paused runtime stays paused.
    async fn pause(&self, _id: &SandboxId) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported { op: "pause" })
    }

    /// Thaws a paused runtime; a running one stays running.
    async fn resume(&self, _id: &SandboxId) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported { op: "resume" })
    }

    /// Every runtime carrying svc's labels.
    async fn inventory(&self) -> Result<Vec<RuntimeInfo>, ProviderError> {
        Err(ProviderError::Unsupported { op: "inventory" })
    }

    /// The most recent `lines` console or log lines, in order.
    async fn logs(&self, _id: &SandboxId, _lines: usize) -> Result<Vec<String>, ProviderError> {
        Err(ProviderError::Unsupported { op: "logs" })
    }

    /// How svc reaches the runtime's commands and files, for a provider with more than one
    /// way: docker's `agent` or `engine` (decisions §14). `None` for the others.
    async fn exec_path(&self, _id: &SandboxId) -> Option<String> {
        None
    }

    /// Whether [`ExecSpec::user`] is honoured: the command runs as that user, so a pool
    /// workspace's commands cannot read another workspace's files.
    fn runs_exec_as_user(&self) -> bool {
        false
    }

    /// Starts a command; see [`ExecSession`].
    async fn exec(&self, _id: &SandboxId, _spec: ExecSpec) -> Result<ExecSession, ProviderError> {
        Err(ProviderError::Unsupported { op: "exec" })
    }

    /// A command started before svc restarted, found by its [`crate::ExecControl::handle`]:
    /// its state now, and a control that can still signal or kill it (stdin is gone).
    async fn exec_state(
        &self,
        _id: &SandboxId,
        _handle: &str,
    ) -> Result<(ExecState, Option<std::sync::Arc<dyn crate::ExecControl>>), ProviderError> {
        Ok((ExecState::Gone, None))
    }

    /// Writes a file (creating parent directories) with `mode`, streaming `content`.
    async fn write_file(
        &self,
        _id: &SandboxId,
        _path: &NonRootPath,
        _mode: u32,
        _content: Upload,
    ) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported { op: "write_file" })
    }

    /// Streams a file's bytes.
    async fn read_file(
        &self,
        _id: &SandboxId,
        _path: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        Err(ProviderError::Unsupported { op: "read_file" })
    }

    /// Streams directory `dir` as a tar archive whose names are relative to it (`./`, then `a`
    /// or `./a`, `sub/` or `./sub/`); symlinks are stored, not followed.
    async fn read_archive(
        &self,
        _id: &SandboxId,
        _dir: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        Err(ProviderError::Unsupported { op: "read_archive" })
    }

    /// Extracts `archive` into `dir`, created when missing. The archive comes checked by
    /// [`crate::archive::checked`]: its stream fails just before any entry that would leave
    /// `dir`, and the extraction fails with it.
    async fn write_archive(
        &self,
        _id: &SandboxId,
        _dir: &SandboxPath,
        _archive: ByteStream,
    ) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported {
            op: "write_archive",
        })
    }

    /// Deletes a file, or a directory (non-empty ones only when `recursive`).
    async fn delete_file(
        &self,
        _id: &SandboxId,
        _path: &NonRootPath,
        _recursive: bool,
    ) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported { op: "delete_file" })
    }

    /// Lists a directory, sorted by name.
    async fn list_dir(
        &self,
        _id: &SandboxId,
        _path: &SandboxPath,
    ) -> Result<Vec<FileInfo>, ProviderError> {
        Err(ProviderError::Unsupported { op: "list_dir" })
    }

    /// Moves a file or directory, replacing an existing destination file.
    async fn move_path(
        &self,
        _id: &SandboxId,
        _from: &NonRootPath,
        _to: &NonRootPath,
    ) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported { op: "move_path" })
    }

    /// Changes permission bits.
    async fn chmod(
        &self,
        _id: &SandboxId,
        _path: &SandboxPath,
        _mode: u32,
    ) -> Result<(), ProviderError> {
        Err(ProviderError::Unsupported { op: "chmod" })
    }

    /// Describes one path.
    async fn stat(&self, _id: &SandboxId, _path: &SandboxPath) -> Result<FileInfo, ProviderError> {
        Err(ProviderError::Unsupported { op: "stat" })
    }

    /// Absolute paths matching an absolute glob (`*`, `?`, `[..]`, `**`), sorted.
    async fn glob(
        &self,
        _id: &SandboxId,
        _pattern: &SandboxGlob,
    ) -> Result<Vec<String>, ProviderError> {
        Err(ProviderError::Unsupported { op: "glob" })
    }

    /// Opens a TCP connection to `port` inside the sandbox (previews, decisions §18). Nothing
    /// listening there is [`ProviderError::Unreachable`].
    async fn connect(
        &self,
        _id: &SandboxId,
        _port: u16,
    ) -> Result<crate::PortStream, ProviderError> {
        Err(ProviderError::Unsupported { op: "connect" })
    }

    /// Cached root filesystems; none for providers without snapshots.
    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>, ProviderError> {
        Ok(Vec::new())
    }
}
