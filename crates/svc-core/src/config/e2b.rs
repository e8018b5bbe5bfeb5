//! `e2b.*`: the E2B-compatible API on a listener of its own (decisions §20).

use serde::{Deserialize, Serialize};

/// `e2b.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct E2bConfig {
    /// Serve the E2B API (control plane and in-sandbox services).
    pub enabled: bool,
    /// Its listen address.
    pub host: String,
    /// Its port.
    pub port: u16,
}

impl Default for E2bConfig {
    fn default() -> Self {
        E2bConfig {
            enabled: false,
            host: "127.0.0.1".to_owned(),
            port: 3000,
        }
    }
}
