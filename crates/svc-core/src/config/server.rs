//! `server.*`: the HTTP listener, CORS, request limits and graceful shutdown (decisions §1, §2).

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

/// The CORS entry that allows any origin.
pub const CORS_ANY_ORIGIN: &str = "*";

/// `server.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Listen address.
    pub host: String,
    /// Listen port; `0` asks the OS for an ephemeral port.
    pub port: u16,
    /// Sandbox `preview_domain` is `<sandbox id>.<this>`.
    pub preview_domain: String,
    /// Allowed CORS origins; `*` means any origin.
    pub cors_allowed_origins: Vec<String>,
    /// How long in-flight requests may take to finish on SIGINT/SIGTERM.
    pub shutdown_timeout: GoDuration,
    /// Larger request bodies are refused with 413.
    pub max_body_bytes: u64,
    /// Larger streamed uploads (`PUT /files`, `PUT /files/archive`) are refused with 413;
    /// `0` means unlimited.
    pub max_upload_bytes: u64,
    /// Serves the web console at `/ui` (decisions §21); when false, `/ui` is 404.
    pub ui_enabled: bool,
    /// With no authentication configured, the only `Host` names (any port) a request may carry,
    /// besides `server.host` and the hosts under `server.preview_domain`; `*` allows any
    /// (decisions §30: a web page reaching a server by DNS rebinding carries its own name).
    pub allowed_hosts: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".to_owned(),
            port: 7423,
            preview_domain: "localhost".to_owned(),
            cors_allowed_origins: vec![CORS_ANY_ORIGIN.to_owned()],
            shutdown_timeout: GoDuration::from_secs(10),
            max_body_bytes: 64 * 1024 * 1024,
            max_upload_bytes: 0,
            ui_enabled: true,
            allowed_hosts: vec![
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
                "[::1]".to_owned(),
            ],
        }
    }
}

impl ServerConfig {
    /// True when the CORS list contains the `*` wildcard.
    pub fn cors_allows_any_origin(&self) -> bool {
        self.cors_allowed_origins
            .iter()
            .any(|origin| origin.trim() == CORS_ANY_ORIGIN)
    }
}
