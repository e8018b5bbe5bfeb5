//! Per operation and provider: successes, failures and latency (interface "JSON metrics",
//! `operations`). Recorded for every provider call by [`super::metered::Metered`] and for every
//! exec by the exec path.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    success: u64,
    failure: u64,
    count: u64,
    total_us: u64,
    min_us: u64,
    max_us: u64,
}

/// The counters of every (operation, provider) pair seen so far.
#[derive(Default)]
pub struct OperationMetrics {
    tallies: Mutex<HashMap<(&'static str, &'static str), Tally>>,
}

/// One row of `operations`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct OperationStats {
    /// `spawn`, `destroy`, `exec`, `exec_stream`, `write_file`, ...
    pub operation: &'static str,
    /// Provider name.
    pub provider: &'static str,
    /// Calls that succeeded.
    pub success_total: u64,
    /// Calls that failed.
    pub failure_total: u64,
    /// Calls timed (all of them).
    pub latency_count: u64,
    /// Their total, in milliseconds.
    pub latency_total_ms: f64,
    /// The fastest.
    pub latency_min_ms: f64,
    /// The slowest.
    pub latency_max_ms: f64,
    /// The mean.
    pub latency_avg_ms: f64,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl OperationMetrics {
    /// Counts one call.
    pub fn record(
        &self,
        operation: &'static str,
        provider: &'static str,
        succeeded: bool,
        took: Duration,
    ) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let mut tallies = self
            .tallies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tally = tallies.entry((operation, provider)).or_default();
        if succeeded {
            tally.success += 1;
        } else {
            tally.failure += 1;
        }
        tally.min_us = if tally.count == 0 {
            us
        } else {
            tally.min_us.min(us)
        };
        tally.count += 1;
        tally.total_us = tally.total_us.saturating_add(us);
        tally.max_us = tally.max_us.max(us);
    }

    /// Every row, by operation then provider.
    pub fn snapshot(&self) -> Vec<OperationStats> {
        let tallies = self
            .tallies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut rows: Vec<OperationStats> = tallies
            .into_iter()
            .map(|((operation, provider), t)| OperationStats {
                operation,
                provider,
                success_total: t.success,
                failure_total: t.failure,
                latency_count: t.count,
                latency_total_ms: ms(t.total_us),
                latency_min_ms: ms(t.min_us),
                latency_max_ms: ms(t.max_us),
                latency_avg_ms: if t.count == 0 {
                    0.0
                } else {
                    ms(t.total_us) / t.count as f64
                },
            })
            .collect();
        rows.sort_by(|a, b| (a.operation, a.provider).cmp(&(b.operation, b.provider)));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_latencies_add_up() {
        let metrics = OperationMetrics::default();
        metrics.record("spawn", "mock", true, Duration::from_millis(4));
        metrics.record("spawn", "mock", false, Duration::from_millis(2));
        metrics.record("exec", "mock", true, Duration::from_micros(500));
        let rows = metrics.snapshot();
        assert_eq!(rows.len(), 2);
        let spawn = &rows[1];
        assert_eq!(
            (spawn.operation, spawn.success_total, spawn.failure_total),
            ("spawn", 1, 1)
        );
        assert_eq!(spawn.latency_count, 2);
        assert!((spawn.latency_total_ms - 6.0).abs() < 1e-9);
        assert!((spawn.latency_min_ms - 2.0).abs() < 1e-9);
        assert!((spawn.latency_max_ms - 4.0).abs() < 1e-9);
        assert!((spawn.latency_avg_ms - 3.0).abs() < 1e-9);
        assert!((rows[0].latency_min_ms - 0.5).abs() < 1e-9);
    }
}
