//! `worker.*`: this replica's worker identity, heartbeat and lease timing, and TLS for worker RPC
//! (decisions §2, §11). The heartbeat loop renews held leases, so `lease_ttl` and `stale_after`
//! must both outlast one `heartbeat_interval` (checked in `validate`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

/// `worker.id` of a single-node set-up.
pub const DEFAULT_WORKER_ID: &str = "local";

/// `worker.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// ID of the local worker record.
    pub id: String,
    /// How often the local worker heartbeats and renews its leases.
    pub heartbeat_interval: GoDuration,
    /// Heartbeat freshness window: older heartbeats make a worker stale.
    pub stale_after: GoDuration,
    /// Lease lifetime.
    pub lease_ttl: GoDuration,
    /// `worker.rpc_tls.*`.
    pub rpc_tls: RpcTlsConfig,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            id: DEFAULT_WORKER_ID.to_owned(),
            heartbeat_interval: GoDuration::from_secs(30),
            stale_after: GoDuration::from_secs(90),
            lease_ttl: GoDuration::from_secs(60),
            rpc_tls: RpcTlsConfig::default(),
        }
    }
}

/// `worker.rpc_tls.*` keys: server side (`server_*`, `client_ca_file` to verify clients) and client
/// side (`ca_file`, `client_*`, `server_name`) of worker-to-worker RPC.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RpcTlsConfig {
    /// Off by default.
    pub enabled: bool,
    /// Server certificate (PEM).
    pub server_cert_file: PathBuf,
    /// Server private key (PEM).
    pub server_key_file: PathBuf,
    /// CA that client certificates must chain to; empty = no client certificates required.
    pub client_ca_file: PathBuf,
    /// CA the client trusts for the server certificate; empty = system roots.
    pub ca_file: PathBuf,
    /// Client certificate (PEM) for mutual TLS.
    pub client_cert_file: PathBuf,
    /// Client private key (PEM) for mutual TLS.
    pub client_key_file: PathBuf,
    /// Name the client expects in the server certificate; empty = the host dialled.
    pub server_name: String,
}
