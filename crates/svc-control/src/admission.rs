//! Spawn admission (decisions §10): the TTL cap, then global and per-owner capacity. Capacity
//! checks and the count they rely on are serialised by one gate per control plane, and a spawn
//! that passes holds a [`Reservation`] until its record is saved (or it fails), so concurrent
//! spawns never over-admit while the provider works outside the gate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use svc_core::config::DefaultsConfig;
use svc_core::error::LimitReason;
use svc_core::{Error, GoDuration};
use svc_store::Store;

#[derive(Debug, Default)]
struct Reserved {
    total: u64,
    by_owner: HashMap<String, u64>,
}

/// Capacity held by an admitted spawn that is not yet counted by the store.
pub(crate) struct Reservation {
    reserved: Option<Arc<Mutex<Reserved>>>,
    owner: String,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let Some(reserved) = &self.reserved else {
            return;
        };
        let mut reserved = reserved.lock().unwrap_or_else(PoisonError::into_inner);
        reserved.total = reserved.total.saturating_sub(1);
        if let Some(count) = reserved.by_owner.get_mut(&self.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                reserved.by_owner.remove(&self.owner);
            }
        }
    }
}

/// The admission gate.
#[derive(Default)]
pub(crate) struct Admission {
    gate: tokio::sync::Mutex<()>,
    reserved: Arc<Mutex<Reserved>>,
}

/// The effective maximum TTL; zero means unlimited.
pub(crate) fn check_ttl(defaults: &DefaultsConfig, lifetime: Duration) -> Result<(), Error> {
    let max = defaults.max_ttl.as_std();
    if !max.is_zero() && lifetime > max {
        return Err(Error::ResourceLimit {
            reason: LimitReason::MaxTtl,
            message: format!(
                "requested lifetime {} exceeds the maximum ttl {} (max_ttl)",
                GoDuration::new(lifetime),
                defaults.max_ttl
            ),
        });
    }
    Ok(())
}

impl Admission {
    /// Admits a spawn of `ttl` for `owner` or says why not.
    pub(crate) async fn admit(
        &self,
        defaults: &DefaultsConfig,
        store: &dyn Store,
        ttl: Duration,
        owner: &str,
    ) -> Result<Reservation, Error> {
        check_ttl(defaults, ttl)?;
        let per_owner_limited = defaults.max_sandboxes_per_owner > 0 && !owner.is_empty();
        if defaults.max_sandboxes == 0 && !per_owner_limited {
            return Ok(Reservation {
                reserved: None,
                owner: String::new(),
            });
        }
        let _gate = self.gate.lock().await;
        if defaults.max_sandboxes > 0 {
            let active = store.count_active_sandboxes(None).await?;
            let reserved = self
                .reserved
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .total;
            if active + reserved >= defaults.max_sandboxes {
                return Err(Error::ResourceLimit {
                    reason: LimitReason::MaxSandboxes,
                    message: format!(
                        "sandbox capacity reached: {} of {} sandboxes active (max_sandboxes)",
                        active + reserved,
                        defaults.max_sandboxes
                    ),
                });
            }
        }
        if per_owner_limited {
            let active = store.count_active_sandboxes(Some(owner)).await?;
            let reserved = self
                .reserved
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .by_owner
                .get(owner)
                .copied()
                .unwrap_or(0);
            if active + reserved >= defaults.max_sandboxes_per_owner {
                return Err(Error::ResourceLimit {
                    reason: LimitReason::MaxOwnerSandboxes,
                    message: format!(
                        "owner sandbox limit reached: {} of {} sandboxes active (max_sandboxes_per_owner)",
                        active + reserved,
                        defaults.max_sandboxes_per_owner
                    ),
                });
            }
        }
        let mut reserved = self.reserved.lock().unwrap_or_else(PoisonError::into_inner);
        reserved.total += 1;
        *reserved.by_owner.entry(owner.to_owned()).or_default() += 1;
        Ok(Reservation {
            reserved: Some(Arc::clone(&self.reserved)),
            owner: owner.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_cap_is_inclusive_and_zero_is_unlimited() {
        let mut defaults = DefaultsConfig {
            max_ttl: GoDuration::from_secs(3600),
            ..DefaultsConfig::default()
        };
        assert!(check_ttl(&defaults, Duration::from_secs(3600)).is_ok());
        let err = check_ttl(&defaults, Duration::from_secs(3601)).unwrap_err();
        assert!(matches!(
            err,
            Error::ResourceLimit {
                reason: LimitReason::MaxTtl,
                ..
            }
        ));
        defaults.max_ttl = GoDuration::ZERO;
        assert!(check_ttl(&defaults, Duration::from_secs(10_000_000)).is_ok());
    }
}
