//! Owner quota rows and the admission decision made from them. Each backend reads the quota and
//! the counts inside its serialised admitting transaction; what it reads is turned into a
//! decision here, so both backends decide identically (decisions §10).

use std::time::Duration;

use svc_core::admission::{ActiveCounts, Admission};
use svc_core::quota::{EffectiveLimits, GlobalLimits, OwnerQuota, QuotaLimits};
use svc_core::{GoDuration, OwnerId, Timestamp};

use super::{count, micros, stored_count, stored_row, timestamp};
use crate::StoreResult;

pub(crate) const QUOTA_COLUMNS: &str = QuotaRow::COLUMNS;

stored_row! {
    /// A quota row as stored.
    struct QuotaRow {
        owner_id: String,
        max_sandboxes: i64,
        max_ttl_secs: i64,
        max_exec_timeout_secs: i64,
        created_at: i64,
        updated_at: i64,
    }
}

fn stored_secs(value: GoDuration) -> i64 {
    i64::try_from(value.as_std().as_secs()).unwrap_or(i64::MAX)
}

impl QuotaRow {
    /// The row `put_quota` writes: created and updated at `at` (an upsert keeps the stored
    /// `created_at`).
    pub(crate) fn new(owner_id: &str, limits: QuotaLimits, at: Timestamp) -> Self {
        QuotaRow {
            owner_id: owner_id.to_owned(),
            max_sandboxes: stored_count(limits.max_sandboxes),
            max_ttl_secs: stored_secs(limits.max_ttl),
            max_exec_timeout_secs: stored_secs(limits.max_exec_timeout),
            created_at: micros(at),
            updated_at: micros(at),
        }
    }

    /// The limits (the table's CHECK constraints keep every value >= 0).
    pub(crate) fn limits(&self) -> QuotaLimits {
        let secs = |v: i64| GoDuration::from_secs(count(v));
        QuotaLimits {
            max_sandboxes: count(self.max_sandboxes),
            max_ttl: secs(self.max_ttl_secs),
            max_exec_timeout: secs(self.max_exec_timeout_secs),
        }
    }

    pub(crate) fn into_domain(self) -> StoreResult<OwnerQuota> {
        let limits = self.limits();
        Ok(OwnerQuota {
            created_at: timestamp("quota", &self.owner_id, self.created_at)?,
            updated_at: timestamp("quota", &self.owner_id, self.updated_at)?,
            owner_id: self.owner_id,
            max_sandboxes: limits.max_sandboxes,
            max_ttl: limits.max_ttl,
            max_exec_timeout: limits.max_exec_timeout,
        })
    }
}

/// One admission decision in the making: the owner's effective limits, known once the quota is
/// read, say which counts to read next; [`AdmissionPlan::decide`] then decides.
pub(crate) struct AdmissionPlan {
    limits: EffectiveLimits,
    anonymous: bool,
    report: bool,
}

impl AdmissionPlan {
    /// The plan for a spawn of `owner` (none: anonymous, held to the global limits only, so
    /// any `quota` is ignored). `report` counts everything the decision object shows;
    /// otherwise only what a non-zero limit compares against is counted.
    pub(crate) fn new(
        owner: Option<&OwnerId>,
        limits: GlobalLimits,
        quota: Option<QuotaLimits>,
        report: bool,
    ) -> Self {
        let anonymous = owner.is_none();
        let quota = quota.filter(|_| !anonymous);
        AdmissionPlan {
            limits: limits.effective(quota.as_ref()),
            anonymous,
            report,
        }
    }

    /// Which counts the decision needs: (every owner's, this owner's).
    pub(crate) fn counts_needed(&self) -> (bool, bool) {
        self.limits.counts_needed(self.anonymous, self.report)
    }

    /// Decides for a spawn living `lifetime`. Counts the plan does not need read 0 in the
    /// decision, whether or not the backend counted them.
    pub(crate) fn decide(&self, lifetime: Duration, counts: ActiveCounts) -> Admission {
        let (active, owner_active) = self.counts_needed();
        let counts = ActiveCounts {
            active: if active { counts.active } else { 0 },
            owner_active: if owner_active { counts.owner_active } else { 0 },
        };
        self.limits.decide(lifetime, counts, self.anonymous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(max_sandboxes: u64, per_owner: u64) -> GlobalLimits {
        GlobalLimits {
            max_sandboxes,
            max_sandboxes_per_owner: per_owner,
            max_ttl: GoDuration::from_secs(3600),
            max_exec_timeout: GoDuration::ZERO,
        }
    }

    const COUNTED: ActiveCounts = ActiveCounts {
        active: 7,
        owner_active: 3,
    };

    #[test]
    fn counts_a_limit_does_not_compare_against_read_zero() {
        let minute = Duration::from_secs(60);
        let alice = OwnerId::parse("alice").unwrap();
        let spawn = AdmissionPlan::new(Some(&alice), global(0, 5), None, false);
        assert_eq!(spawn.counts_needed(), (false, true));
        let decided = spawn.decide(minute, COUNTED);
        assert_eq!(
            (decided.active_sandboxes, decided.active_owner_sandboxes),
            (0, 3)
        );
        let check = AdmissionPlan::new(Some(&alice), global(0, 5), None, true);
        let reported = check.decide(minute, COUNTED);
        assert_eq!(
            (reported.active_sandboxes, reported.active_owner_sandboxes),
            (7, 3)
        );
    }

    #[test]
    fn anonymous_spawns_ignore_quotas_and_owner_counts() {
        let quota = QuotaLimits {
            max_sandboxes: 1,
            max_ttl: GoDuration::from_secs(10),
            max_exec_timeout: GoDuration::ZERO,
        };
        let plan = AdmissionPlan::new(None, global(10, 1), Some(quota), true);
        assert_eq!(plan.counts_needed(), (true, false));
        let decided = plan.decide(Duration::from_secs(60), COUNTED);
        assert!(decided.allowed, "{decided:?}");
        assert_eq!(decided.max_ttl, GoDuration::from_secs(3600));
        assert_eq!(decided.active_owner_sandboxes, 0);
    }
}
