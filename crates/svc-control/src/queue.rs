//! The spawn queue (`defaults.spawn_overflow: queue`; decisions §10): spawns denied for
//! capacity wait here, first in first out, up to `max_spawn_queue` of them, for at most
//! `spawn_queue_timeout`.
//!
//! Waking is a baton passed down the line. When capacity may have opened (a sandbox ended, a
//! quota changed) the head is woken and retries admission. A waiter that is admitted leaves and
//! wakes the one behind it (more may fit); one still refused by its owner's limit stays and
//! wakes the one behind it (another owner may fit); one refused by global capacity stays and
//! stops the baton (nobody behind can fit either). A waiter that leaves for any other reason
//! (timeout, client gone) also wakes the one behind it, so a wake-up it swallowed is not lost.
//! An epoch counter closes the gap between a refused admission and joining the queue.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use svc_core::config::SpawnOverflow;
use svc_core::GoDuration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often the head re-checks capacity without a wake-up: a safety net for capacity freed
/// where no wake-up is sent (another process on the same database).
const HEAD_POLL: Duration = Duration::from_secs(1);

/// The queue of waiting spawns and its statistics.
pub(crate) struct SpawnQueue {
    enabled: bool,
    max: usize,
    timeout: GoDuration,
    state: Mutex<State>,
    stats: Stats,
}

#[derive(Default)]
struct State {
    waiters: VecDeque<Waiter>,
    next_id: u64,
    /// Bumped whenever capacity may have opened.
    epoch: u64,
}

struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

#[derive(Default)]
struct Stats {
    queued: AtomicU64,
    dequeued: AtomicU64,
    timeouts: AtomicU64,
    wait_count: AtomicU64,
    wait_total_nanos: AtomicU64,
    wait_max_nanos: AtomicU64,
}

/// Why a spawn could not join the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueFull {
    /// `defaults.max_spawn_queue`.
    pub(crate) max: usize,
}

/// A place in the queue. Dropping it leaves the queue at once.
pub(crate) struct Ticket {
    queue: Arc<SpawnQueue>,
    id: u64,
    wake: Arc<Notify>,
    joined: Instant,
    deadline: Instant,
}

impl SpawnQueue {
    pub(crate) fn new(overflow: SpawnOverflow, max: usize, timeout: GoDuration) -> Self {
        SpawnQueue {
            enabled: overflow == SpawnOverflow::Queue,
            max,
            timeout,
            state: Mutex::new(State::default()),
            stats: Stats::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a list and two counters, consistent after every statement.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `defaults.spawn_queue_timeout`.
    pub(crate) fn timeout(&self) -> GoDuration {
        self.timeout
    }

    /// Read before an admission attempt and handed to [`SpawnQueue::join`].
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// True when a capacity denial would wait rather than fail now.
    pub(crate) fn has_room(&self) -> bool {
        self.enabled && self.lock().waiters.len() < self.max
    }

    /// Spawns waiting now.
    pub(crate) fn depth(&self) -> usize {
        self.lock().waiters.len()
    }

    /// Capacity may have opened: wakes the head.
    pub(crate) fn capacity_changed(&self) {
        let mut state = self.lock();
        state.epoch = state.epoch.wrapping_add(1);
        if let Some(head) = state.waiters.front() {
            head.wake.notify_one();
        }
    }

    /// Joins at the tail. `seen_epoch` is [`SpawnQueue::epoch`] from before the refused
    /// admission: when capacity changed since, the ticket starts awake.
    pub(crate) fn join(self: &Arc<Self>, seen_epoch: u64) -> Result<Ticket, QueueFull> {
        let mut state = self.lock();
        if !self.enabled || state.waiters.len() >= self.max {
            return Err(QueueFull { max: self.max });
        }
        let id = state.next_id;
        state.next_id += 1;
        let wake = Arc::new(Notify::new());
        if state.epoch != seen_epoch {
            wake.notify_one();
        }
        state.waiters.push_back(Waiter {
            id,
            wake: Arc::clone(&wake),
        });
        drop(state);
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        let joined = Instant::now();
        Ok(Ticket {
            queue: Arc::clone(self),
            id,
            wake,
            joined,
            deadline: joined + self.timeout.as_std(),
        })
    }

    /// Wakes the waiter right behind `id` (or the head, when `id` is gone).
    fn wake_behind(&self, state: &State, id: u64) {
        let next = state.waiters.iter().find(|w| w.id > id);
        if let Some(next) = next {
            next.wake.notify_one();
        }
    }

    /// The scheduler object of interface.md, as far as the queue knows it.
    pub(crate) fn stats(&self) -> QueueStats {
        let count = self.stats.wait_count.load(Ordering::Relaxed);
        let total = Duration::from_nanos(self.stats.wait_total_nanos.load(Ordering::Relaxed));
        let max = Duration::from_nanos(self.stats.wait_max_nanos.load(Ordering::Relaxed));
        let avg = u32::try_from(count)
            .ok()
            .filter(|c| *c > 0)
            .map_or(Duration::ZERO, |c| total / c);
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        QueueStats {
            spawn_overflow: if self.enabled { "queue" } else { "reject" },
            spawn_queue_depth: self.depth(),
            max_spawn_queue: self.max,
            spawn_queue_timeout: self.timeout,
            spawn_queued_total: self.stats.queued.load(Ordering::Relaxed),
            spawn_dequeued_total: self.stats.dequeued.load(Ordering::Relaxed),
            spawn_queue_timeouts: self.stats.timeouts.load(Ordering::Relaxed),
            spawn_queue_wait_count: count,
            spawn_queue_wait_total: GoDuration::new(total),
            spawn_queue_wait_max: GoDuration::new(max),
            spawn_queue_wait_avg: GoDuration::new(avg),
            spawn_queue_wait_total_ms: millis(total),
            spawn_queue_wait_max_ms: millis(max),
            spawn_queue_wait_avg_ms: millis(avg),
        }
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Capacity may have opened: retry admission.
    Retry,
    /// `spawn_queue_timeout` passed.
    TimedOut,
}

impl Ticket {
    /// Waits for a wake-up (or, at the head, for the poll interval), or the deadline.
    pub(crate) async fn wait(&self) -> Woken {
        loop {
            let poll = tokio::time::sleep(HEAD_POLL);
            tokio::select! {
                () = self.wake.notified() => return Woken::Retry,
                () = tokio::time::sleep_until(self.deadline) => return Woken::TimedOut,
                () = poll => {
                    if self.is_head() {
                        return Woken::Retry;
                    }
                }
            }
        }
    }

    fn is_head(&self) -> bool {
        self.queue
            .lock()
            .waiters
            .front()
            .is_some_and(|w| w.id == self.id)
    }

    /// Still refused, by the owner's own limit: someone behind may fit.
    pub(crate) fn pass_on(&self) {
        let state = self.queue.lock();
        self.queue.wake_behind(&state, self.id);
    }

    /// How long this spawn has waited.
    pub(crate) fn waited(&self) -> Duration {
        self.joined.elapsed()
    }

    /// Admitted: leaves the queue and records the wait.
    pub(crate) fn dequeued(self) -> Duration {
        let waited = self.waited();
        let stats = &self.queue.stats;
        stats.dequeued.fetch_add(1, Ordering::Relaxed);
        stats.wait_count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        stats.wait_total_nanos.fetch_add(nanos, Ordering::Relaxed);
        stats.wait_max_nanos.fetch_max(nanos, Ordering::Relaxed);
        waited
    }

    /// Gave up at the deadline: leaves the queue and counts the timeout.
    pub(crate) fn timed_out(self) -> Duration {
        self.queue.stats.timeouts.fetch_add(1, Ordering::Relaxed);
        self.waited()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.queue.lock();
        if let Some(at) = state.waiters.iter().position(|w| w.id == self.id) {
            state.waiters.remove(at);
        }
        self.queue.wake_behind(&state, self.id);
    }
}

/// Queue statistics: the scheduler object's queue fields (interface.md), for diagnostics and
/// metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct QueueStats {
    /// `reject` or `queue`.
    pub spawn_overflow: &'static str,
    /// Spawns waiting now.
    pub spawn_queue_depth: usize,
    /// `defaults.max_spawn_queue`.
    pub max_spawn_queue: usize,
    /// `defaults.spawn_queue_timeout`.
    #[schema(value_type = String)]
    pub spawn_queue_timeout: GoDuration,
    /// Spawns that ever joined the queue.
    pub spawn_queued_total: u64,
    /// Spawns admitted after waiting.
    pub spawn_dequeued_total: u64,
    /// Spawns that gave up at the timeout.
    pub spawn_queue_timeouts: u64,
    /// Waits measured (one per dequeued spawn).
    pub spawn_queue_wait_count: u64,
    /// Their total.
    #[schema(value_type = String)]
    pub spawn_queue_wait_total: GoDuration,
    /// The longest.
    #[schema(value_type = String)]
    pub spawn_queue_wait_max: GoDuration,
    /// The mean.
    #[schema(value_type = String)]
    pub spawn_queue_wait_avg: GoDuration,
    /// The total in milliseconds.
    pub spawn_queue_wait_total_ms: u64,
    /// The longest in milliseconds.
    pub spawn_queue_wait_max_ms: u64,
    /// The mean in milliseconds.
    pub spawn_queue_wait_avg_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(max: usize) -> Arc<SpawnQueue> {
        Arc::new(SpawnQueue::new(
            SpawnOverflow::Queue,
            max,
            GoDuration::from_secs(30),
        ))
    }

    async fn woken(ticket: &Ticket) -> bool {
        tokio::time::timeout(Duration::from_millis(20), ticket.wake.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn wakes_the_head_then_passes_the_baton_in_order() {
        let q = queue(10);
        let epoch = q.epoch();
        let a = q.join(epoch).unwrap();
        let b = q.join(epoch).unwrap();
        let c = q.join(epoch).unwrap();
        q.capacity_changed();
        assert!(!woken(&b).await && !woken(&c).await, "only the head wakes");
        assert!(woken(&a).await);
        a.pass_on();
        assert!(woken(&b).await, "the owner-limited head wakes the next");
        assert!(!woken(&c).await);
        drop(b);
        assert!(woken(&c).await, "leaving wakes the one behind");
        assert_eq!(q.depth(), 2);
        drop(a);
        drop(c);
        assert_eq!(q.depth(), 0);
    }

    #[tokio::test]
    async fn a_change_before_joining_is_not_lost_and_a_full_queue_refuses() {
        let q = queue(1);
        let seen = q.epoch();
        q.capacity_changed();
        let t = q.join(seen).unwrap();
        assert!(woken(&t).await, "capacity opened between refusal and join");
        assert_eq!(q.join(q.epoch()).err(), Some(QueueFull { max: 1 }));
        assert!(!q.has_room());
        drop(t);
        assert!(q.has_room());
    }

    #[tokio::test]
    async fn stats_record_waits_and_timeouts() {
        let q = queue(10);
        let a = q.join(q.epoch()).unwrap();
        tokio::time::sleep(Duration::from_millis(15)).await;
        let waited = a.dequeued();
        assert!(waited >= Duration::from_millis(15));
        let b = q.join(q.epoch()).unwrap();
        b.timed_out();
        let stats = q.stats();
        assert_eq!(
            (
                stats.spawn_queued_total,
                stats.spawn_dequeued_total,
                stats.spawn_queue_timeouts,
                stats.spawn_queue_wait_count,
                stats.spawn_queue_depth
            ),
            (2, 1, 1, 1, 0)
        );
        assert!(stats.spawn_queue_wait_max_ms >= 15);
        assert_eq!(stats.spawn_queue_wait_avg, stats.spawn_queue_wait_max);
        assert_eq!(stats.spawn_overflow, "queue");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_at_the_deadline() {
        let q = Arc::new(SpawnQueue::new(
            SpawnOverflow::Queue,
            10,
            GoDuration::from_secs(5),
        ));
        let head = q.join(q.epoch()).unwrap();
        let behind = q.join(q.epoch()).unwrap();
        // The head polls; the one behind only wakes when woken or at its deadline.
        assert_eq!(head.wait().await, Woken::Retry);
        assert_eq!(behind.wait().await, Woken::TimedOut);
    }
}
