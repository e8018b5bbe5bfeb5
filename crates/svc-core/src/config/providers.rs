//! `providers.*`: the sandbox backends and their settings (decisions §2, §14). Paths are kept as
//! configured; whether they exist is checked by the provider at start-up and by `svc doctor`,
//! because loading configuration has no side effects.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

/// Name of the mock provider.
pub const PROVIDER_MOCK: &str = "mock";
/// Name of the Docker provider.
pub const PROVIDER_DOCKER: &str = "docker";
/// Name of the Firecracker provider.
pub const PROVIDER_FIRECRACKER: &str = "firecracker";
/// Name of the QEMU microVM provider.
pub const PROVIDER_QEMU: &str = "qemu";
/// Every provider name a configuration may refer to.
pub const KNOWN_PROVIDERS: [&str; 4] = [
    PROVIDER_MOCK,
    PROVIDER_DOCKER,
    PROVIDER_FIRECRACKER,
    PROVIDER_QEMU,
];

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
    /// `providers.qemu.*`.
    pub qemu: QemuProviderConfig,
}

impl ProvidersConfig {
    /// Whether the named provider is enabled; `None` for a name that is no provider.
    pub fn is_enabled(&self, name: &str) -> Option<bool> {
        match name {
            PROVIDER_MOCK => Some(self.mock.enabled),
            PROVIDER_DOCKER => Some(self.docker.enabled),
            PROVIDER_FIRECRACKER => Some(self.firecracker.enabled),
            PROVIDER_QEMU => Some(self.qemu.enabled),
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
    /// Port of the egress proxy that sandboxes with an `allowlist` reach their allowed host
    /// names through, on their network's gateway address (decisions §18).
    pub egress_proxy_port: u16,
    /// Whether sandboxes run `svc-agent` as their init, with exec, files and logs through it
    /// (decisions §14, Docker fast path).
    pub agent: DockerAgentMode,
    /// The static `svc-agent`; empty = one beside the `svc` binary.
    pub agent_path: PathBuf,
    /// Where each sandbox's agent socket directory lives; empty = `svc-agent` under the system
    /// temp dir.
    pub agent_socket_dir: PathBuf,
    /// Networks a spawn's `network` may name besides `network_mode` (decisions §30): `host`,
    /// `container:<id>` and any other network only when the operator lists them here.
    pub allowed_networks: Vec<String>,
    /// Whether an egress allowlist may name loopback, link-local or unspecified addresses
    /// (decisions §30); the host's own bridge address stays allowed either way.
    pub egress_allow_host: bool,
}

/// `providers.docker.agent`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DockerAgentMode {
    /// The agent when one is found and the engine is local (a Unix socket on this host).
    #[default]
    Auto,
    /// The agent, or start-up stops naming `providers.docker.agent_path`.
    Always,
    /// The engine's exec and archive APIs only.
    Never,
}

impl DockerAgentMode {
    /// The configuration value.
    pub fn as_str(self) -> &'static str {
        match self {
            DockerAgentMode::Auto => "auto",
            DockerAgentMode::Always => "always",
            DockerAgentMode::Never => "never",
        }
    }
}

impl DockerProviderConfig {
    /// The directory holding every sandbox's agent socket directory.
    pub fn agent_socket_root(&self) -> PathBuf {
        if self.agent_socket_dir.as_os_str().is_empty() {
            std::env::temp_dir().join("svc-agent")
        } else {
            self.agent_socket_dir.clone()
        }
    }
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
            egress_proxy_port: 7424,
            agent: DockerAgentMode::Auto,
            agent_path: PathBuf::new(),
            agent_socket_dir: PathBuf::new(),
            allowed_networks: Vec::new(),
            egress_allow_host: false,
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
    /// The static guest agent, booted as the guest's init from an initramfs.
    pub agent_path: PathBuf,
    /// Per-VM sockets, logs, disks; empty = a directory under the system temp dir.
    pub data_dir: PathBuf,
    /// How long a guest has until its agent answers (as for `qemu`): a boot that misses it
    /// is killed and tried once more.
    pub boot_timeout: GoDuration,
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
            boot_timeout: GoDuration::from_secs(60),
        }
    }
}

/// How QEMU runs the guest's CPU (`providers.qemu.accel`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QemuAccel {
    /// KVM when a timed probe boot at start-up proves it usable, else TCG.
    #[default]
    Auto,
    /// Hardware virtualisation through `/dev/kvm`.
    Kvm,
    /// QEMU's software emulation.
    Tcg,
}

impl QemuAccel {
    /// QEMU's `-accel` value; `None` for `auto`, which the probe decides.
    pub fn as_qemu(self) -> Option<&'static str> {
        match self {
            QemuAccel::Auto => None,
            QemuAccel::Kvm => Some("kvm"),
            QemuAccel::Tcg => Some("tcg"),
        }
    }
}

/// `providers.qemu.*` keys (decisions §14).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct QemuProviderConfig {
    /// Off by default: needs QEMU, a kernel, the guest agent and a vsock backend.
    pub enabled: bool,
    /// `qemu-system-x86_64`; a bare name is looked up on `PATH`.
    pub qemu_path: PathBuf,
    /// The guest kernel (ELF `vmlinux`); the modules the guest loads live beside it in
    /// `modules/` (see `scripts/microvm-assets.sh`).
    pub kernel_path: PathBuf,
    /// Where per-image root filesystems are built and cached.
    pub rootfs_dir: PathBuf,
    /// The static guest agent, booted as the guest's init.
    pub agent_path: PathBuf,
    /// Per-VM sockets, logs, disks; empty = a directory under the system temp dir.
    pub data_dir: PathBuf,
    /// `auto`, `kvm` or `tcg`.
    pub accel: QemuAccel,
    /// `vhost-device-vsock`; a bare name is looked up on `PATH`.
    pub vsock_backend_path: PathBuf,
    /// How long a guest has until its agent answers; a boot that misses it is killed and
    /// tried once more.
    pub boot_timeout: GoDuration,
}

impl Default for QemuProviderConfig {
    fn default() -> Self {
        QemuProviderConfig {
            enabled: false,
            qemu_path: PathBuf::from("qemu-system-x86_64"),
            kernel_path: PathBuf::new(),
            rootfs_dir: PathBuf::new(),
            agent_path: PathBuf::new(),
            data_dir: PathBuf::new(),
            accel: QemuAccel::Auto,
            vsock_backend_path: PathBuf::from("vhost-device-vsock"),
            boot_timeout: GoDuration::from_secs(60),
        }
    }
}
