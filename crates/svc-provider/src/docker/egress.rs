//! Egress on docker (decisions §18). `none`: the container gets network mode `none` (loopback
//! only). `allowlist`: once the container runs, a firewall ruleset is loaded into the
//! container's own network namespace (`nsenter --net=/proc/<pid>/ns/net iptables-restore`):
//! loopback and replies pass, listed addresses and networks (with their ports) pass, anything
//! else is rejected at once (TCP reset, ICMP unreachable), so a denied connection fails fast
//! instead of timing out. Inbound only loopback, replies and the host pass, which keeps sibling
//! containers on the shared bridge out as a network of its own would. The rules live and die with the namespace: nothing is added to the
//! host's firewall, so nothing can be left there after a destroy or a crash. Host-name entries
//! are resolved on the host when the sandbox starts and their addresses allowed.

use std::process::Stdio;

use ipnet::IpNet;
use svc_core::egress::{Egress, EgressRule, EgressTarget};
use tokio::io::AsyncWriteExt;

use crate::ProviderError;

/// The rulesets for IPv4 and IPv6 of an allowlist whose entries come with the networks they
/// allow ([`resolve`]). With `proxy`, outgoing TCP to ports 80 and 443 anywhere not allowed
/// directly is redirected to the egress proxy, which admits it by the name it carries (the
/// `Host` header, or TLS's SNI): the transparent mode, for clients that ignore the proxy
/// variables.
pub(super) fn rulesets(
    rules: &[(EgressRule, Vec<IpNet>)],
    proxy: Option<std::net::SocketAddr>,
) -> (String, String) {
    let mut nat = String::new();
    if let Some(std::net::SocketAddr::V4(proxy)) = proxy {
        nat.push_str(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
             :POSTROUTING ACCEPT [0:0]\n-A OUTPUT -o lo -j RETURN\n",
        );
        nat.push_str(&format!("-A OUTPUT -d {}/32 -j RETURN\n", proxy.ip()));
        for net in rules.iter().flat_map(|(_, nets)| nets) {
            if let IpNet::V4(net) = net {
                nat.push_str(&format!("-A OUTPUT -d {net} -j RETURN\n"));
            }
        }
        for port in [80, 443] {
            nat.push_str(&format!(
                "-A OUTPUT -p tcp --dport {port} -j DNAT --to-destination {proxy}\n"
            ));
        }
        nat.push_str("COMMIT\n");
    }
    // Inbound: loopback, replies, and the host (previews connect from the gateway address, where
    // the proxy listens). Nothing else: a sibling container must not open a channel in and
    // pull data out past the allowlist.
    let filter = |host: Option<std::net::IpAddr>, unreachable: &str| {
        let mut table = String::from(
            "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT DROP [0:0]\n\
             -A INPUT -i lo -j ACCEPT\n\
             -A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n",
        );
        if let Some(host) = host {
            table.push_str(&format!("-A INPUT -s {} -j ACCEPT\n", IpNet::from(host)));
        }
        table.push_str(&format!(
            "-A INPUT -p tcp -j REJECT --reject-with tcp-reset\n\
             -A INPUT -j REJECT --reject-with {unreachable}\n\
             -A OUTPUT -o lo -j ACCEPT\n\
             -A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n"
        ));
        table
    };
    let host = proxy.map(|proxy| proxy.ip());
    let mut v4 = filter(
        host.filter(std::net::IpAddr::is_ipv4),
        "icmp-port-unreachable",
    );
    let mut v6 = filter(
        host.filter(std::net::IpAddr::is_ipv6),
        "icmp6-port-unreachable",
    );
    for (rule, nets) in rules {
        for net in nets {
            let table = match net {
                IpNet::V4(_) => &mut v4,
                IpNet::V6(_) => &mut v6,
            };
            match rule.port {
                Some(port) => {
                    for protocol in ["tcp", "udp"] {
                        table.push_str(&format!(
                            "-A OUTPUT -d {net} -p {protocol} --dport {port} -j ACCEPT\n"
                        ));
                    }
                }
                None => table.push_str(&format!("-A OUTPUT -d {net} -j ACCEPT\n")),
            }
        }
    }
    v4.push_str(
        "-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset\n\
         -A OUTPUT -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n",
    );
    v4.push_str(&nat);
    v6.push_str(
        "-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset\n\
         -A OUTPUT -j REJECT --reject-with icmp6-port-unreachable\nCOMMIT\n",
    );
    (v4, v6)
}

/// Every entry with the networks it allows: its own, or a host name's addresses now.
pub(super) async fn resolve(
    egress: &Egress,
) -> Result<Vec<(EgressRule, Vec<IpNet>)>, ProviderError> {
    let rules = egress.check().map_err(|e| ProviderError::InvalidRequest {
        message: e.to_string(),
    })?;
    let mut resolved = Vec::with_capacity(rules.len());
    for rule in rules {
        let nets = match &rule.target {
            EgressTarget::Net(net) => vec![*net],
            EgressTarget::Host(name) => {
                let port = rule.port.unwrap_or(0);
                match tokio::net::lookup_host((name.as_str(), port)).await {
                    Ok(addresses) => addresses.map(|a| IpNet::from(a.ip())).collect(),
                    Err(err) => {
                        tracing::warn!(host = %name, error = %err, "an egress host name did not resolve; it allows nothing");
                        Vec::new()
                    }
                }
            }
            // A wildcard names no addresses before a connection names its host.
            EgressTarget::Below(_) => Vec::new(),
        };
        resolved.push((rule, nets));
    }
    Ok(resolved)
}

/// Loads `ruleset` with `program` (`iptables-restore` or `ip6tables-restore`) into the network
/// namespace of process `pid`.
async fn load(pid: i64, program: &str, ruleset: &str) -> Result<(), String> {
    let mut child = tokio::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .arg(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("running nsenter {program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ruleset.as_bytes())
            .await
            .map_err(|e| format!("writing the ruleset: {e}"))?;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| format!("waiting for {program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The name servers the container's resolver asks (`/etc/resolv.conf` inside it).
async fn name_servers(pid: i64) -> Vec<IpNet> {
    let text = tokio::fs::read_to_string(format!("/proc/{pid}/root/etc/resolv.conf"))
        .await
        .unwrap_or_default();
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|address| address.trim().parse::<std::net::IpAddr>().ok())
        .map(IpNet::from)
        .collect()
}

/// Applies an allowlist to the running container whose main process is `pid`, reaching the
/// egress proxy at `proxy` (also for ports 80 and 443 it is not allowed directly) and its name
/// servers on port 53, so names resolve for the proxy's transparent mode.
pub(super) async fn apply(
    pid: i64,
    egress: &Egress,
    proxy: std::net::SocketAddr,
) -> Result<(), ProviderError> {
    let mut resolved = resolve(egress).await?;
    let extra: Vec<(IpNet, u16)> = std::iter::once((IpNet::from(proxy.ip()), proxy.port()))
        .chain(
            name_servers(pid)
                .await
                .into_iter()
                .map(|server| (server, 53)),
        )
        .collect();
    for (net, port) in &extra {
        resolved.push((
            EgressRule {
                target: EgressTarget::Net(*net),
                port: Some(*port),
            },
            vec![*net],
        ));
    }
    let (v4, v6) = rulesets(&resolved, Some(proxy));
    load(pid, "iptables-restore", &v4)
        .await
        .map_err(|e| ProviderError::failed(format!("enforcing egress: {e}")))?;
    let wants_v6 = resolved
        .iter()
        .any(|(_, nets)| nets.iter().any(|n| matches!(n, IpNet::V6(_))));
    if let Err(err) = load(pid, "ip6tables-restore", &v6).await {
        // A namespace without IPv6 has nothing to close; one that needs IPv6 rules must get them.
        if wants_v6 {
            return Err(ProviderError::failed(format!(
                "enforcing egress (IPv6): {err}"
            )));
        }
        tracing::debug!(error = %err, "no IPv6 egress rules loaded");
    }
    Ok(())
}

/// The gateway of a network from its IPAM configuration: the recorded gateway, else the first
/// host of its subnet. Docker puts the bridge's own address there, but records no gateway when
/// it adopted a bridge interface that already existed (seen with Engine 20.10 on `bridge`).
pub fn network_gateway(configs: &[bollard::models::IpamConfig]) -> Option<std::net::IpAddr> {
    configs
        .iter()
        .filter_map(|config| config.gateway.as_deref())
        .find_map(|gateway| gateway.parse().ok())
        .or_else(|| {
            configs
                .iter()
                .filter_map(|config| config.subnet.as_deref()?.parse::<IpNet>().ok())
                .find_map(|subnet| subnet.hosts().next())
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_network_without_a_recorded_gateway_uses_its_subnets_first_host() {
        let config = |subnet: Option<&str>, gateway: Option<&str>| bollard::models::IpamConfig {
            subnet: subnet.map(str::to_owned),
            gateway: gateway.map(str::to_owned),
            ..Default::default()
        };
        let recorded = [config(Some("172.17.0.0/16"), Some("172.17.0.9"))];
        assert_eq!(
            network_gateway(&recorded),
            Some("172.17.0.9".parse().unwrap())
        );
        let adopted = [config(Some("172.17.0.0/16"), None)];
        assert_eq!(
            network_gateway(&adopted),
            Some("172.17.0.1".parse().unwrap())
        );
        assert_eq!(network_gateway(&[config(None, None)]), None);
        assert_eq!(network_gateway(&[]), None);
    }

    #[test]
    fn rulesets_accept_the_listed_and_reject_the_rest() {
        let rules = vec![
            (
                EgressRule::parse("10.0.0.0/8:5432").unwrap(),
                vec!["10.0.0.0/8".parse().unwrap()],
            ),
            (
                EgressRule::parse("192.168.1.5").unwrap(),
                vec!["192.168.1.5/32".parse().unwrap()],
            ),
            (
                EgressRule::parse("2001:db8::/32").unwrap(),
                vec!["2001:db8::/32".parse().unwrap()],
            ),
        ];
        let (v4, v6) = rulesets(&rules, None);
        assert!(v4.contains("-A OUTPUT -d 10.0.0.0/8 -p tcp --dport 5432 -j ACCEPT"));
        assert!(v4.contains("-A OUTPUT -d 10.0.0.0/8 -p udp --dport 5432 -j ACCEPT"));
        assert!(v4.contains("-A OUTPUT -d 192.168.1.5/32 -j ACCEPT"));
        assert!(!v4.contains("2001:db8"));
        assert!(v6.contains("-A OUTPUT -d 2001:db8::/32 -j ACCEPT"));
        assert!(v4.ends_with("icmp-port-unreachable\nCOMMIT\n"));
        assert!(v6.ends_with("icmp6-port-unreachable\nCOMMIT\n"));
        assert!(v4.starts_with("*filter\n"));
        assert!(!v4.contains("*nat"));
        assert!(v4.contains(":INPUT DROP"));
        assert!(!v4.contains("-A INPUT -s"));
        let (v4, v6) = rulesets(&rules, Some("172.17.0.1:7424".parse().unwrap()));
        assert!(
            v4.contains("-A INPUT -s 172.17.0.1/32 -j ACCEPT"),
            "the host may connect in"
        );
        assert!(!v6.contains("-A INPUT -s"));
        assert!(v4.contains("*nat\n"));
        assert!(v4.contains("-A OUTPUT -d 10.0.0.0/8 -j RETURN"));
        assert!(
            v4.contains("-A OUTPUT -p tcp --dport 443 -j DNAT --to-destination 172.17.0.1:7424")
        );
        assert!(v4.ends_with("COMMIT\n"));
    }
}
