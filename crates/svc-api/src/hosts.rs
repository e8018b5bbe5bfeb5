//! The `Host` check of a server without authentication (decisions §30): every caller is admin
//! there, so a web page the operator's browser opens could drive it, directly by loopback or by
//! DNS rebinding; such a page's requests carry its own host name. Requests naming a host outside
//! `server.allowed_hosts` (plus `server.host` and the preview hosts) are refused before anything
//! else runs. With authentication configured the check does not apply.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use svc_core::config::Config;
use svc_core::error::echo;
use svc_core::Error;

use crate::error::ApiError;

/// The host names a request may carry; `None` when any may.
#[derive(Debug)]
pub struct AllowedHosts {
    names: Vec<String>,
    preview_domain: String,
}

impl AllowedHosts {
    /// The check for a listener of `config` on `listen_host`; `None` when authentication is
    /// configured or `*` is listed.
    pub fn for_listener(config: &Config, listen_host: &str) -> Option<Arc<Self>> {
        let server = &config.server;
        if config.auth.required() || server.allowed_hosts.iter().any(|h| h.trim() == "*") {
            return None;
        }
        let mut names: Vec<String> = server.allowed_hosts.iter().map(|h| normalize(h)).collect();
        names.push(normalize(listen_host));
        Some(Arc::new(AllowedHosts {
            names,
            preview_domain: normalize(&server.preview_domain),
        }))
    }

    /// Whether a request whose `Host` header is `host` (with or without a port) may go on.
    pub fn allows(&self, host: &str) -> bool {
        let name = normalize(host);
        self.names.contains(&name)
            || (!self.preview_domain.is_empty()
                && name
                    .strip_suffix(self.preview_domain.as_str())
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')))
    }
}

/// The host name of a `Host` value: lowercase, without its port or a final dot; an IPv6
/// address keeps its brackets.
fn normalize(host: &str) -> String {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((address, _)) => return format!("[{}]", address.to_ascii_lowercase()),
            None => host,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        },
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The middleware: 403 naming the host, before routing, authentication or any body is read.
/// A request without a `Host` (HTTP/1.0 tools) comes from no browser and goes on.
pub async fn check(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    match host {
        Some(host) if !allowed.allows(&host) => ApiError(Error::Denied {
            message: format!(
                "host {} is not allowed: without authentication only the hosts in \
                 server.allowed_hosts may reach this server (it stops web pages driving it \
                 by DNS rebinding); add the name there, or configure authentication",
                echo(&host)
            ),
        })
        .into_response(),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_defaults_allow_loopback_names_the_listen_address_and_previews() {
        let config = Config::default();
        let allowed = AllowedHosts::for_listener(&config, &config.server.host).unwrap();
        for host in [
            "localhost",
            "localhost:7423",
            "LOCALHOST.",
            "127.0.0.1:80",
            "[::1]:7423",
            "[::1]",
            "abc-3000.localhost:7423",
        ] {
            assert!(allowed.allows(host), "{host}");
        }
        for host in [
            "evil.example:7423",
            "localhost.evil.example",
            "127.0.0.2",
            "[::2]",
            "xlocalhost",
            ".localhost",
        ] {
            assert!(!allowed.allows(host), "{host}");
        }
    }

    #[test]
    fn a_wildcard_or_authentication_turns_the_check_off() {
        let mut config = Config::default();
        config.server.allowed_hosts = vec!["*".to_owned()];
        assert!(AllowedHosts::for_listener(&config, &config.server.host).is_none());
        let mut config = Config::default();
        config.auth.enabled = true;
        assert!(AllowedHosts::for_listener(&config, &config.server.host).is_none());
        let mut config = Config::default();
        config.server.allowed_hosts = vec!["svc.internal".to_owned()];
        config.server.host = "10.0.0.5".to_owned();
        let allowed = AllowedHosts::for_listener(&config, &config.server.host).unwrap();
        assert!(allowed.allows("svc.internal:7423"));
        assert!(allowed.allows("10.0.0.5:7423"));
        assert!(!allowed.allows("localhost"));
    }
}
