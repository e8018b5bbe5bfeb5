//! Time as a dependency: every TTL, lease and heartbeat rule reads the injected [`Clock`], so
//! tests advance a [`ManualClock`] instead of sleeping.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

/// An instant on the wire: RFC 3339 in UTC with a `Z` suffix.
pub type Timestamp = DateTime<Utc>;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current instant, truncated to microseconds so that every store keeps it exactly.
    fn now(&self) -> Timestamp;
}

/// Truncates to microseconds (PostgreSQL's `timestamptz` precision).
pub fn truncate_to_micros(instant: Timestamp) -> Timestamp {
    instant
        .duration_trunc(TimeDelta::microseconds(1))
        .unwrap_or(instant)
}

/// Adds a std duration, saturating at the largest representable instant.
pub fn add_duration(instant: Timestamp, duration: Duration) -> Timestamp {
    TimeDelta::from_std(duration)
        .ok()
        .and_then(|delta| instant.checked_add_signed(delta))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Subtracts a std duration, saturating at the smallest representable instant.
pub fn sub_duration(instant: Timestamp, duration: Duration) -> Timestamp {
    TimeDelta::from_std(duration)
        .ok()
        .and_then(|delta| instant.checked_sub_signed(delta))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The elapsed std duration from `earlier` to `later`, zero when `later` is not after it.
pub fn elapsed_between(earlier: Timestamp, later: Timestamp) -> Duration {
    (later - earlier).to_std().unwrap_or(Duration::ZERO)
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one read of the wall clock every other reader goes through.
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Timestamp {
        truncate_to_micros(Utc::now())
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Mutex::new(truncate_to_micros(start)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now = add_duration(*now, by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_advances() {
        let start = SystemClock.now();
        let clock = ManualClock::new(start);
        clock.advance(Duration::from_secs(90));
        assert_eq!(
            elapsed_between(truncate_to_micros(start), clock.now()),
            Duration::from_secs(90)
        );
    }

    #[test]
    fn system_clock_is_micro_precise() {
        assert_eq!(SystemClock.now().timestamp_subsec_nanos() % 1_000, 0);
    }
}
