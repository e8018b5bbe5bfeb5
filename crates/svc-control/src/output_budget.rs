//! The memory all buffered execs together may hold (`exec.buffered_memory_bytes`, decisions
//! §30): a buffered exec answers only at its end, so its output waits in memory; each takes
//! what it holds from one budget and gives it back when it answers. An exec that finds the
//! budget spent keeps what fits and answers `truncated: true`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The bytes still free.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    free: AtomicU64,
}

impl OutputBudget {
    pub(crate) fn new(bytes: u64) -> Arc<Self> {
        Arc::new(OutputBudget {
            free: AtomicU64::new(bytes),
        })
    }

    /// A holder that takes from this budget and gives everything back when dropped.
    pub(crate) fn holder(self: &Arc<Self>) -> Held {
        Held {
            budget: Arc::clone(self),
            bytes: 0,
        }
    }

    /// Takes up to `want` bytes; returns how many it got.
    fn take(&self, want: u64) -> u64 {
        let mut free = self.free.load(Ordering::Relaxed);
        loop {
            let granted = want.min(free);
            if granted == 0 {
                return 0;
            }
            match self.free.compare_exchange_weak(
                free,
                free - granted,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return granted,
                Err(now) => free = now,
            }
        }
    }

    /// The bytes free now (for tests).
    #[cfg(test)]
    fn free(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }
}

/// What one buffered exec holds.
#[derive(Debug)]
pub(crate) struct Held {
    budget: Arc<OutputBudget>,
    bytes: u64,
}

impl Held {
    /// Takes up to `want` more bytes; returns how many it may keep.
    pub(crate) fn take(&mut self, want: usize) -> usize {
        let granted = self.budget.take(want as u64);
        self.bytes += granted;
        // `granted` never exceeds `want`, a usize.
        usize::try_from(granted).unwrap_or(want)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.free.fetch_add(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_share_the_budget_and_give_it_back() {
        let budget = OutputBudget::new(100);
        let mut a = budget.holder();
        let mut b = budget.holder();
        assert_eq!(a.take(60), 60);
        assert_eq!(b.take(60), 40, "only what is left");
        assert_eq!(b.take(1), 0);
        drop(a);
        assert_eq!(budget.free(), 60);
        assert_eq!(b.take(70), 60);
        drop(b);
        assert_eq!(budget.free(), 100);
    }
}
