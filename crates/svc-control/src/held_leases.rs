//! The leases this worker holds, as far as it knows them: sandbox ID to expiry. Only the holder
//! can extend a lease and nobody can take one before it expires, so an entry is a safe lower
//! bound on how long the lease is ours; while it has time left, checks need no store read.
//! Entries follow every change this process makes (taken with a spawn or an acquire, extended
//! by the heartbeat's renew-all under the same condition the store applies, dropped when the
//! sandbox ends). After a restart the map is empty and the store answers instead.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use svc_core::clock::add_duration;
use svc_core::Timestamp;

#[derive(Default)]
pub(crate) struct HeldLeases {
    map: Mutex<HashMap<String, Timestamp>>,
}

impl HeldLeases {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Timestamp>> {
        // A map of plain values: a panic cannot leave it half-written.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This worker holds `id` until `expires_at`.
    pub(crate) fn record(&self, id: &str, expires_at: Timestamp) {
        self.lock().insert(id.to_owned(), expires_at);
    }

    /// The sandbox ended (its lease lapsed with it).
    pub(crate) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// True when this worker knows it holds `id` past `until`.
    pub(crate) fn held_past(&self, id: &str, until: Timestamp) -> bool {
        self.lock().get(id).is_some_and(|expiry| *expiry > until)
    }

    /// The store renewed every unexpired lease of this worker to `now + ttl`: the same here;
    /// lapsed entries are dropped.
    pub(crate) fn renewed(&self, now: Timestamp, ttl: Duration) {
        let renewed = add_duration(now, ttl);
        self.lock().retain(|_, expiry| {
            if *expiry > now {
                *expiry = renewed;
                true
            } else {
                false
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_store_rules() {
        let held = HeldLeases::default();
        let t0 = svc_core::Clock::now(&svc_core::clock::SystemClock);
        let at = |s: u64| add_duration(t0, Duration::from_secs(s));
        held.record("a", at(10));
        held.record("b", at(3));
        assert!(held.held_past("a", at(9)) && !held.held_past("a", at(10)));
        held.renewed(at(5), Duration::from_secs(10));
        assert!(held.held_past("a", at(14)), "renewed while active");
        assert!(
            !held.held_past("b", at(0)),
            "lapsed before the renewal: gone"
        );
        held.forget("a");
        assert!(!held.held_past("a", at(0)));
    }
}
