//! The microVM assets as `scripts/microvm-assets.sh` lays them out in one directory: what a
//! configuration (and the tests) point the microVM providers at.

use std::path::{Path, PathBuf};

use svc_core::config::{QemuAccel, QemuProviderConfig};

/// Where the assets live unless `SVC_MICROVM_ASSETS` says otherwise.
pub const DEFAULT_ASSETS_DIR: &str = "/var/cache/svc-microvm";

/// A complete assets directory.
#[derive(Debug, Clone)]
pub struct Assets {
    dir: PathBuf,
}

impl Assets {
    /// The directory `SVC_MICROVM_ASSETS` names (else the default), when every asset is there;
    /// otherwise a message naming what is missing.
    pub fn find() -> Result<Assets, String> {
        let dir = std::env::var_os("SVC_MICROVM_ASSETS")
            .map_or_else(|| PathBuf::from(DEFAULT_ASSETS_DIR), PathBuf::from);
        let assets = Assets { dir };
        let missing: Vec<String> = [
            assets.kernel(),
            assets.agent(),
            assets.dir.join("modules/order"),
            assets.vsock_backend(),
        ]
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
        if missing.is_empty() {
            Ok(assets)
        } else {
            Err(format!(
                "microVM assets missing: {} (scripts/microvm-assets.sh prepares them)",
                missing.join(", ")
            ))
        }
    }

    /// The ELF kernel.
    pub fn kernel(&self) -> PathBuf {
        self.dir.join("vmlinux")
    }

    /// The static guest agent.
    pub fn agent(&self) -> PathBuf {
        self.dir.join("svc-agent")
    }

    /// The kernel modules the guest loads (with their `order`).
    pub fn modules(&self) -> PathBuf {
        self.dir.join("modules")
    }

    /// `vhost-device-vsock`.
    pub fn vsock_backend(&self) -> PathBuf {
        self.dir.join("vhost/bin/vhost-device-vsock")
    }

    /// An enabled qemu provider on these assets, emulating the CPU, keeping its VMs and root
    /// disks under `state`.
    pub fn qemu_config(&self, state: &Path) -> QemuProviderConfig {
        QemuProviderConfig {
            enabled: true,
            kernel_path: self.kernel(),
            agent_path: self.agent(),
            vsock_backend_path: self.vsock_backend(),
            data_dir: state.join("vms"),
            rootfs_dir: state.join("rootfs"),
            accel: QemuAccel::Tcg,
            ..QemuProviderConfig::default()
        }
    }
}
