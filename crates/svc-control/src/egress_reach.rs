//! What an egress allowlist may reach (decisions §30): never the host's own loopback,
//! link-local or unspecified addresses, whether an entry names them or a name resolves to them,
//! unless the operator allows it (`providers.docker.egress_allow_host`). The egress path checks
//! again after its own resolution; this check answers the spawn with 400 first.

use std::time::Duration;

use svc_core::egress::{
    is_host_only, net_reaches_host, Egress, EgressMode, EgressRule, EgressTarget,
};
use svc_core::error::echo;
use svc_core::Error;

/// How long one name may take to resolve; a name that does not resolve in time is left to the
/// egress path's own check.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// 400 naming the first allowlist entry that is, or resolves to, an address of the host.
pub(crate) async fn check_allowlist(egress: &Egress, allow_host: bool) -> Result<(), Error> {
    if allow_host || egress.mode != EgressMode::Allowlist {
        return Ok(());
    }
    let checks = egress.allow.iter().map(|entry| async move {
        let Ok(rule) = EgressRule::parse(entry) else {
            return Ok(());
        };
        let reaches = match &rule.target {
            EgressTarget::Net(net) => net_reaches_host(net),
            EgressTarget::Host(name) => resolves_to_host(name).await,
            // A wildcard names no host to resolve; the egress path checks each it connects to.
            EgressTarget::Below(_) => false,
        };
        if reaches {
            return Err(Error::invalid(
                "egress.allow",
                format!(
                    "{} reaches the host's own addresses (loopback, link-local or unspecified), \
                     which sandboxes may not (providers.docker.egress_allow_host)",
                    echo(entry)
                ),
            ));
        }
        Ok(())
    });
    futures::future::try_join_all(checks).await.map(drop)
}

async fn resolves_to_host(name: &str) -> bool {
    match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((name, 0))).await {
        Ok(Ok(mut addresses)) => addresses.any(|a| is_host_only(a.ip())),
        // Unknown now; the egress path refuses it if it later resolves to the host.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn entries_reaching_the_host_are_refused_unless_allowed() {
        for entry in [
            "localhost:8080",
            "127.0.0.1",
            "127.0.0.0/8",
            "[::1]:22",
            "169.254.169.254:80",
            "0.0.0.0",
            "0.0.0.0/0",
        ] {
            let err = check_allowlist(&Egress::allowlist(["example.com:443", entry]), false)
                .await
                .unwrap_err();
            assert_eq!(err.kind(), svc_core::ErrorKind::BadRequest, "{entry}");
            assert!(err.to_string().contains("egress.allow"), "{err}");
            check_allowlist(&Egress::allowlist([entry]), true)
                .await
                .unwrap();
        }
        check_allowlist(
            &Egress::allowlist(["10.0.0.0/8", "*.example.com", "192.0.2.7:443"]),
            false,
        )
        .await
        .unwrap();
    }
}
