//! `pool.*`: pool mode, where logical per-user sandboxes share pool VMs (decisions §2, §15).

use serde::{Deserialize, Serialize};

use super::defaults::SpawnOverflow;
use crate::duration::GoDuration;

/// `pool.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// Off by default; when on, `X-User-ID` is required on sandbox routes.
    pub enabled: bool,
    /// Provider of pool VMs; empty = the default provider.
    pub provider: String,
    /// Image of pool VMs.
    pub image: String,
    /// Most pool VMs at once.
    pub max_vms: u32,
    /// Most users per pool VM.
    pub max_users_per_vm: u32,
    /// Memory of each pool VM, in MiB.
    pub memory_mb: u64,
    /// vCPUs of each pool VM.
    pub vcpus: u32,
    /// `reject` or `queue` when the pool is full.
    pub overflow: SpawnOverflow,
    /// How long a pool VM without users is kept for the next user before it is destroyed.
    pub idle_timeout: GoDuration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            enabled: false,
            provider: String::new(),
            image: "alpine:latest".to_owned(),
            max_vms: 10,
            max_users_per_vm: 5,
            memory_mb: 2048,
            vcpus: 2,
            overflow: SpawnOverflow::Reject,
            idle_timeout: GoDuration::from_secs(300),
        }
    }
}
