//! Warm pools (decisions §17): runtimes started ahead of the spawns that will want them.
//!
//! A template with `warm_pool: N` gets a pool on every server that runs its provider: up to N
//! ready runtimes, started in the background ([`fill`]) and handed to spawns of that template.
//! A spawn *claims* one: after admission (its own record, lease, owner, tenant, metadata, env
//! and TTL), the provider renames the runtime to the sandbox's ID ([`svc_provider::Provider::claim`]),
//! so every later call and the store's sandbox ID name the runtime the sandbox owns; its labels,
//! which cannot change, keep saying it was started warm. A runtime leaves the pool under the
//! pool's lock, so no runtime is handed out twice.
//!
//! Which spawns use a pool: a spawn naming the template (`POST /templates/{name}/spawn`, or
//! `POST /sandboxes` with `template`) uses that template's pool; a plain spawn uses the pool of
//! any template whose runtimes are what it would start (same provider, image, memory and vCPUs)
//! when it names no `network`. Either way a spawn that resolves to something else (a provider,
//! image or size overridden) starts cold.
//!
//! Warm runtimes are not sandboxes: no record, no quota, no lease. This module holds the pools
//! in memory; [`fill`] keeps them full, healthy and in line with the templates, and adopts the
//! ready runtimes a previous process left after a restart.

pub(crate) mod fill;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use svc_core::SandboxId;
use tokio::sync::Notify;

/// What a pool's runtimes are started as; a spawn that resolves to the same may take one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WarmSpec {
    pub(crate) provider: String,
    pub(crate) image: String,
    pub(crate) memory_mb: u32,
    pub(crate) vcpus: u32,
}

impl WarmSpec {
    /// The value of the runtime's `LABEL_WARM_SPEC` label.
    pub(crate) fn label(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.provider, self.image, self.memory_mb, self.vcpus
        )
    }
}

/// One template's pool.
#[derive(Debug)]
struct Pool {
    spec: WarmSpec,
    target: u32,
    ready: VecDeque<SandboxId>,
    /// Runtimes being started for it.
    starting: u32,
    hits: u64,
    misses: u64,
    /// After a failed start, no new one before this.
    backoff_until: Option<Instant>,
}

impl Pool {
    fn held(&self) -> usize {
        self.ready.len() + self.starting as usize
    }

    fn wants_more(&self, now: Instant) -> bool {
        self.held() < self.target as usize && self.backoff_until.is_none_or(|until| until <= now)
    }
}

/// A pool's numbers for `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolStats {
    pub(crate) template: String,
    pub(crate) ready: usize,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
}

/// A runtime that leaves its pool: to be removed from its provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Discarded {
    pub(crate) provider: String,
    pub(crate) id: SandboxId,
}

/// Every pool of this server.
#[derive(Debug, Default)]
pub(crate) struct WarmPools {
    pools: Mutex<Pools>,
    /// Wakes the filler: a claim, a template change.
    wake: Notify,
    /// A template changed here: the filler rereads the templates when it wakes (a claim or a
    /// finished start only needs the pools looked at).
    templates_changed: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Pools {
    by_template: BTreeMap<String, Pool>,
}

impl Pools {
    /// Each pool's share of `cap`, in template-name order.
    fn shares(&self, cap: usize) -> Vec<usize> {
        let targets: Vec<usize> = self
            .by_template
            .values()
            .map(|pool| pool.target as usize)
            .collect();
        round_robin_shares(&targets, cap)
    }
}

/// How many runtimes each pool gets of `cap` when they are filled one per pool per round.
fn round_robin_shares(targets: &[usize], cap: usize) -> Vec<usize> {
    let mut shares = vec![0; targets.len()];
    let mut left = cap;
    let mut progressed = true;
    while left > 0 && progressed {
        progressed = false;
        for (share, target) in shares.iter_mut().zip(targets) {
            if left > 0 && *share < *target {
                *share += 1;
                left -= 1;
                progressed = true;
            }
        }
    }
    shares
}

impl WarmPools {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pools> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the filler to look at the pools now.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// A template changed on this server: the filler rereads the templates now.
    pub(crate) fn templates_changed(&self) {
        self.templates_changed
            .store(true, std::sync::atomic::Ordering::Release);
        self.wake();
    }

    /// Whether a template changed since the last call.
    pub(crate) fn take_templates_changed(&self) -> bool {
        self.templates_changed
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Takes a ready runtime for a spawn of `spec`: from `template`'s pool when the spawn
    /// names one, else from the first pool of the same spec that has one ready. A hit or a
    /// miss is counted on the pool consulted; a spawn no pool could serve counts nothing.
    pub(crate) fn take(&self, template: Option<&str>, spec: &WarmSpec) -> Option<SandboxId> {
        let mut pools = self.lock();
        let name = match template {
            Some(name) => name.to_owned(),
            None => {
                let matching = || pools.by_template.iter().filter(|(_, p)| p.spec == *spec);
                let chosen = matching()
                    .find(|(_, pool)| !pool.ready.is_empty())
                    .or_else(|| matching().next());
                chosen?.0.clone()
            }
        };
        let pool = pools.by_template.get_mut(&name)?;
        let taken = if pool.spec == *spec {
            pool.ready.pop_front()
        } else {
            None
        };
        if taken.is_some() {
            pool.hits += 1;
        } else {
            pool.misses += 1;
        }
        drop(pools);
        self.wake();
        taken
    }

    /// Ready runtimes of `template` on this server.
    pub(crate) fn ready(&self, template: &str) -> u32 {
        self.lock().by_template.get(template).map_or(0, |pool| {
            u32::try_from(pool.ready.len()).unwrap_or(u32::MAX)
        })
    }

    /// Every pool's numbers, by template name.
    pub(crate) fn stats(&self) -> Vec<PoolStats> {
        self.lock()
            .by_template
            .iter()
            .map(|(template, pool)| PoolStats {
                template: template.clone(),
                ready: pool.ready.len(),
                hits: pool.hits,
                misses: pool.misses,
            })
            .collect()
    }

    /// Brings the pools in line with the templates that want one (`wanted`: name → spec and
    /// size). A pool whose template is gone, or no longer wants runtimes, is dropped; one whose
    /// spec changed is emptied and refilled; one that shrank gives back its surplus. Returns
    /// the ready runtimes to remove. Runtimes still starting for an old spec are removed when
    /// they arrive ([`WarmPools::started`]).
    pub(crate) fn reconfigure(&self, wanted: &BTreeMap<String, (WarmSpec, u32)>) -> Vec<Discarded> {
        let mut pools = self.lock();
        let mut discarded = Vec::new();
        let mut discard = |spec: &WarmSpec, ids: &mut VecDeque<SandboxId>, keep: usize| {
            while ids.len() > keep {
                if let Some(id) = ids.pop_back() {
                    discarded.push(Discarded {
                        provider: spec.provider.clone(),
                        id,
                    });
                }
            }
        };
        pools.by_template.retain(|name, pool| {
            if wanted.contains_key(name) {
                return true;
            }
            discard(&pool.spec, &mut pool.ready, 0);
            false
        });
        for (name, (spec, target)) in wanted {
            let pool = pools
                .by_template
                .entry(name.clone())
                .or_insert_with(|| Pool {
                    spec: spec.clone(),
                    target: *target,
                    ready: VecDeque::new(),
                    starting: 0,
                    hits: 0,
                    misses: 0,
                    backoff_until: None,
                });
            if pool.spec != *spec {
                discard(&pool.spec, &mut pool.ready, 0);
                pool.spec = spec.clone();
                pool.backoff_until = None;
            }
            pool.target = *target;
            discard(&pool.spec, &mut pool.ready, *target as usize);
        }
        discarded
    }

    /// Shares `cap` among the pools and picks what to change now: the runtimes to start (each
    /// counted as starting at once) and the ready runtimes over a pool's share to remove. The
    /// shares are what filling round robin would give (one runtime per pool per round, in
    /// template-name order, until the pools are full or `cap` is reached), whatever order the
    /// templates came in: a pool made later still gets its share once the cap is reached.
    pub(crate) fn plan(
        &self,
        cap: usize,
        now: Instant,
    ) -> (Vec<(String, WarmSpec)>, Vec<Discarded>) {
        let mut pools = self.lock();
        let shares = pools.shares(cap);
        let (mut starts, mut discarded) = (Vec::new(), Vec::new());
        for ((name, pool), share) in pools.by_template.iter_mut().zip(shares) {
            while pool.held() > share && !pool.ready.is_empty() {
                if let Some(id) = pool.ready.pop_back() {
                    discarded.push(Discarded {
                        provider: pool.spec.provider.clone(),
                        id,
                    });
                }
            }
            while pool.held() < share && pool.wants_more(now) {
                pool.starting += 1;
                starts.push((name.clone(), pool.spec.clone()));
            }
        }
        (starts, discarded)
    }

    /// A runtime started for `template` as `spec` is ready. False when the pool no longer wants
    /// it (template gone or changed, pool full): the caller removes it.
    pub(crate) fn started(&self, template: &str, spec: &WarmSpec, id: SandboxId) -> bool {
        let mut pools = self.lock();
        let Some(pool) = pools.by_template.get_mut(template) else {
            return false;
        };
        pool.starting = pool.starting.saturating_sub(1);
        if pool.spec != *spec || pool.held() >= pool.target as usize {
            return false;
        }
        pool.ready.push_back(id);
        true
    }

    /// A start for `template` failed: no new one before `until`.
    pub(crate) fn start_failed(&self, template: &str, until: Instant) {
        if let Some(pool) = self.lock().by_template.get_mut(template) {
            pool.starting = pool.starting.saturating_sub(1);
            pool.backoff_until = Some(until);
        }
    }

    /// Takes a runtime a previous process left ready into `template`'s pool, when the pool
    /// exists, was started as `spec_label`, and has room within its share of `cap`.
    pub(crate) fn adopt(
        &self,
        template: &str,
        spec_label: &str,
        id: SandboxId,
        cap: usize,
    ) -> bool {
        let mut pools = self.lock();
        let shares = pools.shares(cap);
        let Some((pool, share)) = pools
            .by_template
            .iter_mut()
            .zip(shares)
            .find_map(|((name, pool), share)| (name == template).then_some((pool, share)))
        else {
            return false;
        };
        if pool.spec.label() != spec_label || pool.held() >= share {
            return false;
        }
        pool.ready.push_back(id);
        true
    }

    /// The ready runtimes now, for the health check: `(template, provider, id)`.
    pub(crate) fn ready_runtimes(&self) -> Vec<(String, String, SandboxId)> {
        self.lock()
            .by_template
            .iter()
            .flat_map(|(name, pool)| {
                pool.ready
                    .iter()
                    .map(|id| (name.clone(), pool.spec.provider.clone(), id.clone()))
            })
            .collect()
    }

    /// Drops `id` from `template`'s ready runtimes; false when it is no longer there (claimed
    /// meanwhile).
    pub(crate) fn remove_ready(&self, template: &str, id: &SandboxId) -> bool {
        let mut pools = self.lock();
        let Some(pool) = pools.by_template.get_mut(template) else {
            return false;
        };
        let before = pool.ready.len();
        pool.ready.retain(|ready| ready != id);
        pool.ready.len() != before
    }

    /// Waits for [`WarmPools::wake`].
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec(image: &str) -> WarmSpec {
        WarmSpec {
            provider: "mock".into(),
            image: image.into(),
            memory_mb: 512,
            vcpus: 1,
        }
    }

    fn wanted(pools: &[(&str, &str, u32)]) -> BTreeMap<String, (WarmSpec, u32)> {
        pools
            .iter()
            .map(|(name, image, n)| ((*name).to_owned(), (spec(image), *n)))
            .collect()
    }

    fn fill(pools: &WarmPools, cap: usize) -> Vec<String> {
        let (starts, discarded) = pools.plan(cap, Instant::now());
        assert!(discarded.is_empty());
        for (template, spec) in &starts {
            assert!(pools.started(template, spec, SandboxId::generate()));
        }
        starts.into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn fills_round_robin_up_to_the_cap() {
        let pools = WarmPools::default();
        pools.reconfigure(&wanted(&[("a", "x", 3), ("b", "y", 3)]));
        let started = fill(&pools, 4);
        assert_eq!(started.len(), 4);
        assert_eq!(pools.ready("a"), 2, "{started:?}");
        assert_eq!(pools.ready("b"), 2);
        assert!(fill(&pools, 4).is_empty(), "the cap holds");
        assert_eq!(fill(&pools, 10).len(), 2, "then each pool up to its size");
        assert_eq!((pools.ready("a"), pools.ready("b")), (3, 3));
        assert_eq!(round_robin_shares(&[1, 5, 2], 6), [1, 3, 2]);
    }

    #[test]
    fn a_later_pool_gets_its_share_of_a_reached_cap() {
        let pools = WarmPools::default();
        pools.reconfigure(&wanted(&[("b", "y", 3)]));
        fill(&pools, 3);
        pools.reconfigure(&wanted(&[("a", "x", 3), ("b", "y", 3)]));
        let (starts, discarded) = pools.plan(3, Instant::now());
        assert_eq!(discarded.len(), 2, "b gives back its surplus");
        let started: Vec<_> = starts.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(started, ["a", "a"]);
    }

    #[test]
    fn take_counts_hits_and_misses_and_never_hands_out_twice() {
        let pools = WarmPools::default();
        pools.reconfigure(&wanted(&[("a", "x", 2)]));
        fill(&pools, 10);
        let first = pools.take(Some("a"), &spec("x")).unwrap();
        let second = pools.take(None, &spec("x")).unwrap();
        assert_ne!(first, second);
        assert_eq!(pools.take(Some("a"), &spec("x")), None);
        assert_eq!(
            pools.take(Some("a"), &spec("other")),
            None,
            "a spec mismatch"
        );
        assert_eq!(
            pools.take(None, &spec("other")),
            None,
            "no pool: not counted"
        );
        assert_eq!(
            pools.take(Some("none"), &spec("x")),
            None,
            "no pool: not counted"
        );
        let stats = pools.stats();
        assert_eq!((stats[0].hits, stats[0].misses), (2, 2));
    }

    #[test]
    fn reconfigure_replaces_shrinks_and_removes() {
        let pools = WarmPools::default();
        pools.reconfigure(&wanted(&[("a", "x", 3), ("b", "y", 1)]));
        fill(&pools, 10);
        assert_eq!(
            pools
                .reconfigure(&wanted(&[("a", "x", 1), ("b", "y", 1)]))
                .len(),
            2
        );
        assert_eq!(pools.ready("a"), 1);
        let changed = pools.reconfigure(&wanted(&[("a", "z", 1), ("b", "y", 1)]));
        assert_eq!(changed.len(), 1, "a new image empties the pool");
        assert_eq!(pools.ready("a"), 0);
        assert_eq!(pools.reconfigure(&wanted(&[])).len(), 1, "b's runtime goes");
        assert!(pools.stats().is_empty());
    }

    #[test]
    fn a_runtime_started_for_an_old_spec_is_refused() {
        let pools = WarmPools::default();
        pools.reconfigure(&wanted(&[("a", "x", 1)]));
        let (starts, _) = pools.plan(10, Instant::now());
        pools.reconfigure(&wanted(&[("a", "z", 1)]));
        assert!(!pools.started("a", &starts[0].1, SandboxId::generate()));
        assert_eq!(pools.plan(10, Instant::now()).0.len(), 1, "refilled");
    }

    #[test]
    fn adoption_respects_spec_size_and_cap() {
        let pools = WarmPools::default();
        pools.reconfigure(&wanted(&[("a", "x", 1)]));
        let label = spec("x").label();
        assert!(!pools.adopt("a", "mock|other|512|1", SandboxId::generate(), 10));
        assert!(!pools.adopt("a", &label, SandboxId::generate(), 0));
        assert!(pools.adopt("a", &label, SandboxId::generate(), 10));
        assert!(!pools.adopt("a", &label, SandboxId::generate(), 10), "full");
        assert!(!pools.adopt("gone", &label, SandboxId::generate(), 10));
    }

    #[test]
    fn a_failed_start_backs_off() {
        let pools = WarmPools::default();
        pools.reconfigure(&wanted(&[("a", "x", 1)]));
        let now = Instant::now();
        assert_eq!(pools.plan(10, now).0.len(), 1);
        pools.start_failed("a", now + std::time::Duration::from_secs(5));
        assert!(pools.plan(10, now).0.is_empty());
        assert_eq!(
            pools
                .plan(10, now + std::time::Duration::from_secs(6))
                .0
                .len(),
            1
        );
    }
}
