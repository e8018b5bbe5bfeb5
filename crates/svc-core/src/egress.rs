//! Egress (decisions §18): what a sandbox may connect to. `all` (the default), `none` (loopback
//! only) or `allowlist`: entries `host`, `*.domain`, an IP or a CIDR, each with an optional
//! `:port` (IPv6 addresses with a port in brackets: `[2001:db8::1]:443`).

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::error::{echo, Error};

/// The egress mode.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EgressMode {
    /// Anything.
    #[default]
    All,
    /// Loopback only.
    None,
    /// Only what `allow` lists.
    Allowlist,
}

impl EgressMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EgressMode::All => "all",
            EgressMode::None => "none",
            EgressMode::Allowlist => "allowlist",
        }
    }
}

/// A sandbox's egress (`egress` on spawn, templates and sandboxes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Egress {
    /// `all`, `none` or `allowlist`.
    pub mode: EgressMode,
    /// Allowed destinations (mode `allowlist`).
    pub allow: Vec<String>,
}

/// One parsed allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressTarget {
    /// A host name, matched exactly (lowercase).
    Host(String),
    /// `*.domain`: any name below `domain` (not `domain` itself).
    Below(String),
    /// An address or a network.
    Net(IpNet),
}

/// A parsed entry: where, and on which port (any when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRule {
    /// The destination.
    pub target: EgressTarget,
    /// The port, or any.
    pub port: Option<u16>,
}

impl EgressRule {
    /// Parses one entry.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{}: {why}", echo(entry));
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(bad("an empty entry"));
        }
        let (host, port) = split_port(entry).map_err(|why| bad(&why))?;
        if let Ok(address) = host.parse::<IpAddr>() {
            return Ok(EgressRule {
                target: EgressTarget::Net(IpNet::from(address)),
                port,
            });
        }
        if let Ok(net) = host.parse::<IpNet>() {
            return Ok(EgressRule {
                target: EgressTarget::Net(net.trunc()),
                port,
            });
        }
        let (below, name) = match host.strip_prefix("*.") {
            Some(domain) => (true, domain),
            None => (false, host),
        };
        let name = name.to_ascii_lowercase();
        let valid_label = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if name.len() > 253 || !name.split('.').all(valid_label) {
            return Err(bad(
                "not a host name, *.domain, IP address or CIDR (with an optional :port)",
            ));
        }
        Ok(EgressRule {
            target: if below {
                EgressTarget::Below(name)
            } else {
                EgressTarget::Host(name)
            },
            port,
        })
    }

    /// Whether a connection to `host` (a name or an address) on `port` is allowed.
    pub fn admits(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match &self.target {
            EgressTarget::Host(name) => host == *name,
            EgressTarget::Below(domain) => host
                .strip_suffix(domain.as_str())
                .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
            EgressTarget::Net(net) => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok_and(|address| net.contains(&address)),
        }
    }
}

/// `host[:port]`, `[v6]:port`, a bare IPv6 address or CIDR.
fn split_port(entry: &str) -> Result<(&str, Option<u16>), String> {
    let port = |text: &str| {
        text.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("port {} is not 1 to 65535", echo(text)))
    };
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "a [ without its ]".to_owned())?;
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, Some(port(p)?))),
            None if after.is_empty() => Ok((host, None)),
            None => Err("unexpected text after ]".to_owned()),
        };
    }
    // More than one colon: an IPv6 address or network without a port.
    if entry.matches(':').count() > 1 {
        return Ok((entry, None));
    }
    match entry.split_once(':') {
        Some((host, p)) => Ok((host, Some(port(p)?))),
        None => Ok((entry, None)),
    }
}

/// The host's own addresses a sandbox never reaches through svc unless the operator allows it
/// (`providers.docker.egress_allow_host`, decisions §30): loopback, link-local (cloud metadata
/// services live there) and unspecified.
pub fn is_host_only(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.is_unspecified(),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| is_host_only(IpAddr::V4(v4)))
        }
    }
}

/// Whether `net` holds any address [`is_host_only`] refuses (`0.0.0.0/0` does).
pub fn net_reaches_host(net: &IpNet) -> bool {
    const HOST_ONLY: [&str; 7] = [
        "127.0.0.0/8",
        "169.254.0.0/16",
        "0.0.0.0/32",
        "::1/128",
        "::/128",
        "fe80::/10",
        "::ffff:127.0.0.0/104",
    ];
    HOST_ONLY
        .iter()
        .filter_map(|n| n.parse::<IpNet>().ok())
        .any(|host| host.contains(net) || net.contains(&host))
}

impl Egress {
    /// Mode `allowlist` with `entries`.
    pub fn allowlist<S: Into<String>>(entries: impl IntoIterator<Item = S>) -> Self {
        Egress {
            mode: EgressMode::Allowlist,
            allow: entries.into_iter().map(Into::into).collect(),
        }
    }

    /// Checks the entries (400 naming the first bad one) and the mode's needs.
    pub fn check(&self) -> Result<Vec<EgressRule>, Error> {
        if self.mode != EgressMode::Allowlist && !self.allow.is_empty() {
            return Err(Error::invalid(
                "egress.allow",
                format!("is only for mode allowlist, not {}", self.mode.as_str()),
            ));
        }
        if self.allow.len() > 256 {
            return Err(Error::invalid("egress.allow", "at most 256 entries"));
        }
        self.allow
            .iter()
            .map(|entry| EgressRule::parse(entry).map_err(|m| Error::invalid("egress.allow", m)))
            .collect()
    }

    /// Whether `host:port` is allowed (mode `all`: always; `none`: never).
    pub fn admits(&self, host: &str, port: u16) -> bool {
        match self.mode {
            EgressMode::All => true,
            EgressMode::None => false,
            EgressMode::Allowlist => self
                .allow
                .iter()
                .filter_map(|e| EgressRule::parse(e).ok())
                .any(|rule| rule.admits(host, port)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn allow(entries: &[&str]) -> Egress {
        Egress::allowlist(entries.iter().copied())
    }

    #[test]
    fn entries_parse() {
        for good in [
            "example.com",
            "Example.COM:443",
            "*.pypi.org",
            "10.0.0.1",
            "10.0.0.0/8:5432",
            "2001:db8::1",
            "[2001:db8::1]:443",
            "2001:db8::/32",
            "localhost:8080",
        ] {
            assert!(EgressRule::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "exa mple.com",
            "host:0",
            "host:99999",
            "*.",
            "-a.com",
            "[::1",
            "a..b",
        ] {
            assert!(EgressRule::parse(bad).is_err(), "{bad}");
        }
        assert!(allow(&["x.com", "bad host"]).check().is_err());
        assert!(Egress {
            mode: EgressMode::None,
            allow: vec!["x.com".into()],
        }
        .check()
        .is_err());
    }

    #[test]
    fn admits_by_name_wildcard_network_and_port() {
        let egress = allow(&[
            "example.com:443",
            "*.pypi.org",
            "10.1.0.0/16",
            "192.168.1.5:80",
        ]);
        assert!(egress.admits("example.com", 443));
        assert!(egress.admits("EXAMPLE.com.", 443));
        assert!(!egress.admits("example.com", 80));
        assert!(!egress.admits("www.example.com", 443));
        assert!(egress.admits("files.pypi.org", 443));
        assert!(
            !egress.admits("pypi.org", 443),
            "*.domain is below the domain"
        );
        assert!(!egress.admits("evilpypi.org", 443));
        assert!(egress.admits("10.1.200.3", 5432));
        assert!(!egress.admits("10.2.0.1", 5432));
        assert!(egress.admits("192.168.1.5", 80));
        assert!(!egress.admits("192.168.1.5", 81));
        assert!(Egress::default().admits("anything", 1));
        assert!(!Egress {
            mode: EgressMode::None,
            allow: vec![],
        }
        .admits("127.0.0.1", 80));
    }
}
