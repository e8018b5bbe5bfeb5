//! `providers.*`: the sandbox backends and their settings (decisions §2, §14). Paths are kept as
//! configured; whether they exist is checked by the provider at start-up and by `svc doctor`,
//! because loading configuration has no side effects.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Name of the mock provider.
pub const PROVIDER_MOCK: &str = "mock";
/// Name of the Docker provider.
pub const PROVIDER_DOCKER: &str = "docker";
/// Name of the Firecracker provider.
pub const PROVIDER_FIRECRACKER: &str = "firecracker";
/// Every provider name a configuration may refer to.
pub const KNOWN_PROVIDERS: [&str; 3] = [PROVIDER_MOCK, PROVIDER_DOCKER, PROVIDER_FIRECRACKER];

/// `providers.*` keys.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProvidersConfig {
    /// Default provider name; empty = auto (`docker` if reachable at start-up, else `mock`).
    pub default: String,
    /// `providers.mock.*`.
    pub mock: MockProviderConfig,
    /// `providers.docker.*`.
    pub docker: DockerProviderConfig,
    /// `providers.firecracker.*`.
    pub firecracker: FirecrackerProviderConfig,
}

impl ProvidersConfig {
    /// Whether the named provider is enabled; `None` for a name that is no provider.
    pub fn is_enabled(&self, name: &str) -> Option<bool> {
        match name {
            PROVIDER_MOCK => Some(self.mock.enabled),
            PROVIDER_DOCKER => Some(self.docker.enabled),
            PROVIDER_FIRECRACKER => Some(self.firecracker.enabled),
            _ => None,
        }
    }
}

/// `providers.mock.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MockProviderConfig {
    /// Development/test provider; no isolation.
    pub enabled: bool,
    /// Directory holding every mock sandbox; empty = `svc-mock` under the system temp dir.
    /// Not in the decisions table: added so that several servers on one host stay apart.
    pub root_dir: PathBuf,
}

impl Default for MockProviderConfig {
    fn default() -> Self {
        MockProviderConfig {
            enabled: true,
            root_dir: PathBuf::new(),
        }
    }
}

/// `providers.docker.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DockerProviderConfig {
    /// Disabled silently (reported unhealthy) when no engine answers.
    pub enabled: bool,
    /// Engine socket; empty = `DOCKER_HOST` or the platform default socket.
    pub socket: String,
    /// OCI runtime, e.g. `runc`, `runsc`, `kata-runtime`.
    pub runtime: String,
    /// `none`, `bridge`, or a network name.
    pub network_mode: String,
    /// Mount the container root filesystem read-only.
    pub read_only_rootfs: bool,
    /// Seccomp profile (`default` = the engine's).
    pub seccomp_profile: String,
    /// Capabilities dropped from every container.
    pub dropped_caps: Vec<String>,
    /// Capabilities added to every container.
    pub added_caps: Vec<String>,
    /// Maximum number of processes per container.
    pub pids_limit: u32,
    /// User inside the container; empty = image default.
    pub user: String,
}

impl Default for DockerProviderConfig {
    fn default() -> Self {
        DockerProviderConfig {
            enabled: true,
            socket: String::new(),
            runtime: "runc".to_owned(),
            network_mode: "bridge".to_owned(),
            read_only_rootfs: false,
            seccomp_profile: "default".to_owned(),
            dropped_caps: vec!["ALL".to_owned()],
            added_caps: Vec::new(),
            pids_limit: 256,
            user: String::new(),
        }
    }
}

/// `providers.firecracker.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FirecrackerProviderConfig {
    /// Off by default: needs KVM, a kernel and the guest agent.
    pub enabled: bool,
    /// Firecracker binary; a bare name is looked up on `PATH`.
    pub firecracker_path: PathBuf,
    /// Uncompressed guest kernel.
    pub kernel_path: PathBuf,
    /// Where per-image root filesystems are built and cached.
    pub rootfs_dir: PathBuf,
    /// Guest agent binary copied into every root filesystem.
    pub agent_path: PathBuf,
    /// Per-VM sockets, logs, disks; empty = a directory under the system temp dir.
    pub data_dir: PathBuf,
}

impl Default for FirecrackerProviderConfig {
    fn default() -> Self {
        FirecrackerProviderConfig {
            enabled: false,
            firecracker_path: PathBuf::from("firecracker"),
            kernel_path: PathBuf::new(),
            rootfs_dir: PathBuf::new(),
            agent_path: PathBuf::new(),
            data_dir: PathBuf::new(),
        }
    }
}
