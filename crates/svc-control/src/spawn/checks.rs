//! The checks of a spawn's fields against the provider that would run it and the operator's
//! limits (decisions §30), shared with templates, which are checked the same way when saved.
//! Each refusal is 400 naming the field.

use svc_core::error::echo;
use svc_core::sandbox::ImageKind;
use svc_core::{Capability, Error, OwnerId};
use svc_provider::Provider;

use crate::Principal;

/// A host-path image is only for providers that build root filesystems from one (microVMs).
pub(crate) fn check_image_for(
    image: &str,
    kind: ImageKind,
    provider: &dyn Provider,
) -> Result<(), Error> {
    if kind == ImageKind::HostPath && !provider.capabilities().contains(&Capability::Microvm) {
        return Err(Error::invalid(
            "image",
            format!(
                "{} is a host path, which only microVM providers accept; provider {} needs an image reference",
                echo(image),
                provider.name()
            ),
        ));
    }
    Ok(())
}

/// Egress other than `all` needs a provider that enforces it (capability `egress`).
pub(crate) fn check_egress_for(
    egress: &svc_core::egress::Egress,
    provider: &dyn Provider,
) -> Result<(), Error> {
    if egress.mode != svc_core::egress::EgressMode::All
        && !provider.capabilities().contains(&Capability::Egress)
    {
        return Err(Error::invalid(
            "egress",
            format!(
                "provider {} cannot enforce egress mode {} (no capability egress); use all",
                provider.name(),
                egress.mode.as_str()
            ),
        ));
    }
    Ok(())
}

/// The sizes a spawn or template may ask for (decisions §30): at least the provider's minimum
/// memory, at most `defaults.max_memory_mb` and `defaults.max_vcpus`, and no more vCPUs than
/// this host has when it runs the provider; 400 naming the field and the limit.
pub(crate) fn check_sizes(
    defaults: &svc_core::config::DefaultsConfig,
    memory_mb: u32,
    vcpus: u32,
    provider: Option<&dyn Provider>,
) -> Result<(), Error> {
    if let Some(provider) = provider {
        let least = provider.min_memory_mb();
        if memory_mb < least {
            return Err(Error::invalid(
                "memory_mb",
                format!(
                    "{memory_mb} MiB is below provider {}'s minimum of {least} MiB",
                    provider.name()
                ),
            ));
        }
    }
    if u64::from(memory_mb) > defaults.max_memory_mb {
        return Err(Error::invalid(
            "memory_mb",
            format!(
                "{memory_mb} MiB is above the limit of {} MiB (defaults.max_memory_mb)",
                defaults.max_memory_mb
            ),
        ));
    }
    if vcpus > defaults.max_vcpus {
        return Err(Error::invalid(
            "vcpus",
            format!(
                "{vcpus} is above the limit of {} (defaults.max_vcpus)",
                defaults.max_vcpus
            ),
        ));
    }
    let host = host_cpus();
    if provider.is_some() && vcpus > host {
        return Err(Error::invalid(
            "vcpus",
            format!("{vcpus} is more than this host's {host} CPUs"),
        ));
    }
    Ok(())
}

/// The CPUs this process may use, read once.
fn host_cpus() -> u32 {
    static CPUS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
    })
}

/// A spawn's `network` (decisions §30): the provider's own network, or one the operator listed
/// in `providers.docker.allowed_networks`; `host`, `container:<...>` and anything else are 400.
pub(super) fn check_network(
    config: &svc_core::config::Config,
    network: Option<&str>,
    provider: Option<&dyn Provider>,
) -> Result<(), Error> {
    let Some(named) = network else {
        return Ok(());
    };
    let own = provider.map_or_else(
        || config.providers.docker.network_mode.clone(),
        |p| p.default_network(),
    );
    let listed = &config.providers.docker.allowed_networks;
    if named == own || listed.iter().any(|n| n == named) {
        return Ok(());
    }
    Err(Error::invalid(
        "network",
        format!(
            "network {} is not allowed: name the provider's network ({own}) or one listed in \
             providers.docker.allowed_networks",
            echo(named)
        ),
    ))
}

/// Owner: `X-User-ID` (already validated), else the body's `owner_id`, else the OIDC subject,
/// else none (decisions §5).
pub(super) fn resolve_owner(
    principal: &Principal,
    body_owner: Option<&str>,
) -> Result<Option<OwnerId>, Error> {
    if let Some(owner) = &principal.owner {
        return Ok(Some(owner.clone()));
    }
    match body_owner {
        // An OIDC caller owns what it spawns, when its subject is a valid owner ID.
        None => Ok(principal
            .subject
            .as_deref()
            .and_then(|sub| OwnerId::parse(sub).ok())),
        Some(owner) => {
            let owner =
                OwnerId::parse(owner).map_err(|e| Error::invalid("owner_id", e.to_string()))?;
            principal.check_may_act_as("owner_id", owner.as_str())?;
            Ok(Some(owner))
        }
    }
}
