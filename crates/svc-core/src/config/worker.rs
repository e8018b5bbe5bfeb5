//! `worker.*`: this replica's worker identity, heartbeat and lease timing, and TLS for worker RPC
//! (decisions §2, §11). The heartbeat loop renews held leases, so `lease_ttl` and `stale_after`
//! must both outlast one `heartbeat_interval` (checked in `validate`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::secret::Secret;
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
    /// What other nodes dial to reach this one (stored as the worker's `url`); empty: `http://`,
    /// or `https://` with `worker.rpc_tls.enabled`, plus `worker.rpc.listen`.
    pub advertise_url: String,
    /// This node's own capacity, shown as the worker's `capacity.max_sandboxes`; `0` = unlimited.
    pub max_sandboxes: u64,
    /// `worker.rpc.*`.
    pub rpc: RpcConfig,
    /// `worker.rpc_tls.*`.
    pub rpc_tls: RpcTlsConfig,
}

impl WorkerConfig {
    /// The URL other nodes dial (decisions §22): `advertise_url`, else the rpc listener's.
    pub fn url(&self) -> String {
        if !self.advertise_url.is_empty() {
            return self.advertise_url.clone();
        }
        let scheme = if self.rpc_tls.enabled {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.rpc.listen)
    }
}

/// `worker.rpc.*`: the node-to-node listener (decisions §22).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RpcConfig {
    /// Off by default: a call on a sandbox another node holds is 409 `lease_conflict`.
    pub enabled: bool,
    /// Where the node-to-node listener binds, apart from the API's.
    pub listen: String,
    /// What nodes present to each other (`Authorization: Bearer`), the same on every node;
    /// required when rpc is enabled without TLS.
    pub token: Secret,
}

impl Default for RpcConfig {
    fn default() -> Self {
        RpcConfig {
            enabled: false,
            listen: "127.0.0.1:7424".to_owned(),
            token: Secret::default(),
        }
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            id: DEFAULT_WORKER_ID.to_owned(),
            heartbeat_interval: GoDuration::from_secs(30),
            stale_after: GoDuration::from_secs(90),
            lease_ttl: GoDuration::from_secs(60),
            advertise_url: String::new(),
            max_sandboxes: 0,
            rpc: RpcConfig::default(),
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
