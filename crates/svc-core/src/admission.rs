//! Capacity arithmetic for spawn admission (decisions §10). The store applies it inside the one
//! write that records a `creating` sandbox, so the check and the insert cannot be separated by
//! another spawn.

use serde::{Deserialize, Serialize};

use std::time::Duration;

use crate::duration::GoDuration;
use crate::error::LimitReason;
use crate::Error;

/// The TTL rule (decisions §10): a lifetime over `max_ttl` is refused (never queued); a zero
/// `max_ttl` means no ceiling.
pub fn check_ttl(max_ttl: GoDuration, lifetime: Duration) -> Result<(), Error> {
    let max = max_ttl.as_std();
    if !max.is_zero() && lifetime > max {
        return Err(Error::ResourceLimit {
            reason: LimitReason::MaxTtl,
            message: format!(
                "requested lifetime {} exceeds the maximum ttl {max_ttl} (max_ttl)",
                GoDuration::new(lifetime)
            ),
        });
    }
    Ok(())
}

/// The capacity limits in force for one spawn; `0` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityLimits {
    /// Sandboxes holding a runtime, across every owner.
    pub max_sandboxes: u64,
    /// Sandboxes holding a runtime for the spawn's owner (not applied to anonymous spawns).
    pub max_owner_sandboxes: u64,
}

/// Why a capacity check refused, with the counts that decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityDenial {
    /// `max_sandboxes` or `max_owner_sandboxes`.
    pub reason: LimitReason,
    /// Sandboxes counted against the limit.
    pub active: u64,
    /// The limit.
    pub limit: u64,
}

impl CapacityDenial {
    /// The caller-facing message, naming the limit.
    pub fn message(&self) -> String {
        let (what, key) = match self.reason {
            LimitReason::MaxOwnerSandboxes => ("owner sandbox limit", "max_sandboxes_per_owner"),
            _ => ("sandbox capacity", "max_sandboxes"),
        };
        format!(
            "{what} reached: {} of {} sandboxes active ({key})",
            self.active, self.limit
        )
    }
}

/// What the admitting write decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitOutcome {
    /// The sandbox was recorded.
    Admitted,
    /// Nothing was written.
    Denied(CapacityDenial),
}

impl CapacityLimits {
    /// Checks counts taken inside the admitting transaction. `owner_active` is `None` for
    /// anonymous spawns, which only the global limit applies to.
    pub fn check(&self, active: u64, owner_active: Option<u64>) -> Result<(), CapacityDenial> {
        if self.max_sandboxes > 0 && active >= self.max_sandboxes {
            return Err(CapacityDenial {
                reason: LimitReason::MaxSandboxes,
                active,
                limit: self.max_sandboxes,
            });
        }
        if let Some(owner_active) = owner_active {
            if self.max_owner_sandboxes > 0 && owner_active >= self.max_owner_sandboxes {
                return Err(CapacityDenial {
                    reason: LimitReason::MaxOwnerSandboxes,
                    active: owner_active,
                    limit: self.max_owner_sandboxes,
                });
            }
        }
        Ok(())
    }

    /// True when nothing needs counting.
    pub fn unlimited(&self) -> bool {
        self.max_sandboxes == 0 && self.max_owner_sandboxes == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_cap_is_inclusive_and_zero_is_unlimited() {
        let max = GoDuration::from_secs(3600);
        assert!(check_ttl(max, Duration::from_secs(3600)).is_ok());
        let err = check_ttl(max, Duration::from_secs(3601)).unwrap_err();
        assert!(matches!(
            err,
            Error::ResourceLimit {
                reason: LimitReason::MaxTtl,
                ..
            }
        ));
        assert!(check_ttl(GoDuration::ZERO, Duration::from_secs(10_000_000)).is_ok());
    }

    #[test]
    fn global_before_owner_and_zero_is_unlimited() {
        let limits = CapacityLimits {
            max_sandboxes: 5,
            max_owner_sandboxes: 2,
        };
        assert!(limits.check(4, Some(1)).is_ok());
        assert_eq!(
            limits.check(5, Some(2)).unwrap_err().reason,
            LimitReason::MaxSandboxes
        );
        let owner = limits.check(3, Some(2)).unwrap_err();
        assert_eq!(owner.reason, LimitReason::MaxOwnerSandboxes);
        assert!(owner.message().contains("max_sandboxes_per_owner"));
        assert!(limits.check(3, None).is_ok(), "anonymous: global only");
        assert!(CapacityLimits::default()
            .check(1_000_000, Some(1_000_000))
            .is_ok());
    }
}
