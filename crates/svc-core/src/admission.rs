//! The spawn admission decision (decisions §10). The store makes it inside the one write that
//! records a `creating` sandbox (the owner's quota and the counts read in the same transaction),
//! so the check and the insert cannot be separated by another spawn.

use serde::{Deserialize, Serialize};

use std::time::Duration;

use crate::duration::GoDuration;
use crate::error::LimitReason;
use crate::quota::EffectiveLimits;
use crate::Error;

/// The TTL rule (decisions §10): a lifetime over `max_ttl` is refused (never queued); a zero
/// `max_ttl` means no ceiling.
pub fn check_ttl(max_ttl: GoDuration, lifetime: Duration) -> Result<(), Error> {
    if exceeds_ttl(max_ttl, lifetime) {
        return Err(Error::ResourceLimit {
            reason: LimitReason::MaxTtl,
            message: ttl_message(max_ttl, lifetime),
        });
    }
    Ok(())
}

/// The admission decision (interface "Spawn admission decision"): what `POST
/// /sandboxes/admission` answers and what every spawn is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Admission {
    /// True when a spawn would be admitted now.
    pub allowed: bool,
    /// True when a denied spawn would wait in the spawn queue rather than fail.
    pub queueable: bool,
    /// The first limit that denies (decisions §10 order); absent when allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "max_sandboxes")]
    pub reason: Option<LimitReason>,
    /// Sandboxes holding a runtime, across every owner.
    pub active_sandboxes: u64,
    /// Global capacity (`0` = unlimited).
    pub max_sandboxes: u64,
    /// Sandboxes the owner holds (`0` for anonymous spawns).
    pub active_owner_sandboxes: u64,
    /// The owner's effective limit (`0` = unlimited).
    pub max_owner_sandboxes: u64,
    /// The owner's effective maximum lifetime (`0s` = unlimited).
    #[schema(value_type = String, example = "24h0m0s")]
    pub max_ttl: GoDuration,
}

/// Sandboxes counted inside the admitting transaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActiveCounts {
    /// Holding a runtime, across every owner.
    pub active: u64,
    /// Holding a runtime for the spawn's owner (`0` for anonymous spawns).
    pub owner_active: u64,
}

impl EffectiveLimits {
    /// Which counts a decision needs: (global, owner). An admission check reports both; a
    /// spawn only counts what a non-zero limit compares against.
    pub fn counts_needed(&self, anonymous: bool, report: bool) -> (bool, bool) {
        (
            report || self.max_sandboxes > 0,
            !anonymous && (report || self.max_owner_sandboxes > 0),
        )
    }

    /// Decides in decisions §10's order: `max_ttl`, `max_sandboxes`, `max_owner_sandboxes`.
    /// `queueable` is left false; only the spawn queue knows whether it has room. Anonymous
    /// spawns (no owner) are held to the global limits only.
    pub fn decide(&self, lifetime: Duration, counts: ActiveCounts, anonymous: bool) -> Admission {
        let reason = if exceeds_ttl(self.max_ttl, lifetime) {
            Some(LimitReason::MaxTtl)
        } else if self.max_sandboxes > 0 && counts.active >= self.max_sandboxes {
            Some(LimitReason::MaxSandboxes)
        } else if !anonymous
            && self.max_owner_sandboxes > 0
            && counts.owner_active >= self.max_owner_sandboxes
        {
            Some(LimitReason::MaxOwnerSandboxes)
        } else {
            None
        };
        Admission {
            allowed: reason.is_none(),
            queueable: false,
            reason,
            active_sandboxes: counts.active,
            max_sandboxes: self.max_sandboxes,
            active_owner_sandboxes: counts.owner_active,
            max_owner_sandboxes: self.max_owner_sandboxes,
            max_ttl: self.max_ttl,
        }
    }
}

impl Admission {
    /// True for the denials that capacity opening can lift (the queueable kind).
    pub fn capacity_denied(&self) -> bool {
        matches!(
            self.reason,
            Some(LimitReason::MaxSandboxes | LimitReason::MaxOwnerSandboxes)
        )
    }

    /// The 429 for a denial, naming the reason and the limit; `lifetime` is what was asked.
    pub fn error(&self, lifetime: Duration) -> Option<Error> {
        let reason = self.reason?;
        let message = match reason {
            LimitReason::MaxTtl => ttl_message(self.max_ttl, lifetime),
            LimitReason::MaxOwnerSandboxes => format!(
                "owner sandbox limit reached: {} of {} sandboxes active (max_owner_sandboxes)",
                self.active_owner_sandboxes, self.max_owner_sandboxes
            ),
            _ => format!(
                "sandbox capacity reached: {} of {} sandboxes active (max_sandboxes)",
                self.active_sandboxes, self.max_sandboxes
            ),
        };
        Some(Error::ResourceLimit { reason, message })
    }
}

fn exceeds_ttl(max_ttl: GoDuration, lifetime: Duration) -> bool {
    let max = max_ttl.as_std();
    !max.is_zero() && lifetime > max
}

fn ttl_message(max_ttl: GoDuration, lifetime: Duration) -> String {
    format!(
        "requested lifetime {} exceeds the maximum ttl {max_ttl} (max_ttl)",
        GoDuration::new(lifetime)
    )
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

    fn limits(max_ttl: u64, max: u64, owner: u64) -> EffectiveLimits {
        EffectiveLimits {
            max_sandboxes: max,
            max_owner_sandboxes: owner,
            max_ttl: GoDuration::from_secs(max_ttl),
            max_exec_timeout: GoDuration::ZERO,
        }
    }

    fn counts(active: u64, owner_active: u64) -> ActiveCounts {
        ActiveCounts {
            active,
            owner_active,
        }
    }

    #[test]
    fn reasons_come_in_order_ttl_global_owner() {
        let l = limits(60, 5, 2);
        let long = Duration::from_secs(61);
        let short = Duration::from_secs(60);
        let reason = |lifetime, c| l.decide(lifetime, c, false).reason;
        assert_eq!(reason(long, counts(5, 2)), Some(LimitReason::MaxTtl));
        assert_eq!(reason(short, counts(5, 2)), Some(LimitReason::MaxSandboxes));
        assert_eq!(
            reason(short, counts(4, 2)),
            Some(LimitReason::MaxOwnerSandboxes)
        );
        let allowed = l.decide(short, counts(4, 1), false);
        assert!(allowed.allowed && allowed.reason.is_none() && !allowed.queueable);
        assert_eq!(
            l.decide(short, counts(4, 9), true).reason,
            None,
            "anonymous: global only"
        );
        assert!(
            limits(0, 0, 0)
                .decide(
                    Duration::from_secs(1 << 40),
                    counts(1 << 20, 1 << 20),
                    false
                )
                .allowed
        );
    }

    #[test]
    fn denial_messages_name_the_limit() {
        let l = limits(60, 5, 2);
        let message = |lifetime, c| {
            l.decide(Duration::from_secs(lifetime), c, false)
                .error(Duration::from_secs(lifetime))
                .unwrap()
                .to_string()
        };
        assert!(message(61, counts(0, 0)).contains("max_ttl"));
        assert!(message(1, counts(5, 0)).contains("5 of 5 sandboxes active (max_sandboxes)"));
        assert!(message(1, counts(1, 2)).contains("2 of 2 sandboxes active (max_owner_sandboxes)"));
        assert!(l
            .decide(Duration::from_secs(1), counts(0, 0), false)
            .error(Duration::ZERO)
            .is_none());
    }

    #[test]
    fn the_decision_renders_as_the_interface_object() {
        let denied = limits(60, 5, 2).decide(Duration::from_secs(1), counts(5, 1), false);
        let json = serde_json::to_value(denied).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "allowed": false, "queueable": false, "reason": "max_sandboxes",
                "active_sandboxes": 5, "max_sandboxes": 5, "active_owner_sandboxes": 1,
                "max_owner_sandboxes": 2, "max_ttl": "1m0s"
            })
        );
        let allowed = limits(0, 0, 0).decide(Duration::from_secs(1), counts(0, 0), false);
        assert!(serde_json::to_value(allowed)
            .unwrap()
            .get("reason")
            .is_none());
    }
}
