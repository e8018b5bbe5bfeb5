//! Events across replicas (interface Events 5, decisions §12): with PostgreSQL, every replica
//! appends the events it publishes to the shared log (which NOTIFYs the others) and delivers the
//! other replicas' events to its own subscribers, each exactly once.
//!
//! A notification only says "look": the reader queries the log for rows after its position, so
//! payloads of any size work, and a listener that lost its connection catches up from the table
//! instead of losing what it missed. Sequence numbers are handed out before commit, so a row may
//! become visible after a higher one was read: the position is the highest number below which
//! every row was seen (own rows count, without their payload), rows above it already delivered
//! are remembered, and a gap that stays open for [`GAP_TIMEOUT`] was a transaction that rolled
//! back.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use svc_core::event::{Event, EventType};
use svc_store::EventLog;
use tokio_util::sync::CancellationToken;

use crate::ControlPlane;

/// How long a reader waits for a notification before looking anyway.
const POLL_FALLBACK: Duration = Duration::from_secs(2);
/// How long a missing row number may stay missing before it counts as rolled back.
const GAP_TIMEOUT: Duration = Duration::from_secs(5);
/// Rows read at most per look.
const PAGE: i64 = 1000;
/// How long rows stay in the log (a replica that was away longer replays from its history only).
const KEEP: Duration = Duration::from_secs(15 * 60);
/// Events appended at most per write.
const BATCH: usize = 256;
/// Pause after a failed write or read before trying again.
const RETRY: Duration = Duration::from_millis(500);

/// An event on the wire between replicas: the event with its tenant (not part of its JSON).
#[derive(Deserialize)]
struct Relayed {
    tenant_id: Option<String>,
    event: Event,
}

/// [`Relayed`] as written, borrowing the published event.
#[derive(Serialize)]
struct RelayedRef<'a> {
    tenant_id: Option<&'a str>,
    event: &'a Event,
}

/// How far the reader got: every row up to `watermark` was seen; `above` are rows seen beyond
/// a gap (a row that has not committed yet, or never will).
struct Position {
    watermark: i64,
    above: BTreeSet<i64>,
    /// Since when the gap just above `watermark` (the value then) has been open.
    gap: Option<(i64, std::time::Instant)>,
}

impl Position {
    fn at(watermark: i64) -> Self {
        Position {
            watermark,
            above: BTreeSet::new(),
            gap: None,
        }
    }

    /// True the first time row `seq` is offered; marks it seen.
    fn first(&mut self, seq: i64) -> bool {
        seq > self.watermark && self.above.insert(seq)
    }

    /// Moves the watermark over the rows seen contiguously, and over a gap that stayed open
    /// longer than `gap_timeout`.
    fn settle(&mut self, now: std::time::Instant, gap_timeout: Duration) {
        loop {
            while self.above.remove(&(self.watermark + 1)) {
                self.watermark += 1;
            }
            let Some(&lowest) = self.above.first() else {
                self.gap = None;
                return;
            };
            match self.gap {
                Some((at, since)) if at == self.watermark => {
                    if now.duration_since(since) < gap_timeout {
                        return;
                    }
                    // Rolled back: nothing will ever fill it.
                    self.watermark = lowest - 1;
                    self.gap = None;
                }
                _ => {
                    self.gap = Some((self.watermark, now));
                    return;
                }
            }
        }
    }
}

/// Whether another replica's event may have made room for a queued spawn here: a sandbox
/// ended, or a quota changed.
fn frees_capacity(event_type: EventType) -> bool {
    matches!(
        event_type,
        EventType::SandboxDestroyed
            | EventType::SandboxError
            | EventType::QuotaSaved
            | EventType::QuotaDeleted
    )
}

/// Hands another replica's event to the local bus.
fn deliver(plane: &ControlPlane, seq: i64, payload: &str) {
    match serde_json::from_str::<Relayed>(payload) {
        Ok(relayed) => {
            let mut event = relayed.event;
            event.tenant_id = relayed.tenant_id;
            let frees_capacity = frees_capacity(event.event_type);
            plane.events().deliver_foreign(event);
            if frees_capacity {
                // Capacity freed by another replica: waiters here try again.
                plane.spawn_queue().capacity_changed();
            }
        }
        Err(err) => {
            tracing::warn!(seq, error = %err, "skipping an unreadable relayed event");
        }
    }
}

/// Runs both directions until `cancel`.
pub(crate) async fn run(plane: ControlPlane, log: Arc<dyn EventLog>, cancel: CancellationToken) {
    let Some(outbox) = plane.events().relay() else {
        return;
    };
    let writer = tokio::spawn(write(
        plane.clone(),
        Arc::clone(&log),
        outbox,
        cancel.clone(),
    ));
    read(plane, log, cancel).await;
    let _ = writer.await;
}

async fn write(
    plane: ControlPlane,
    log: Arc<dyn EventLog>,
    mut outbox: tokio::sync::mpsc::Receiver<Arc<Event>>,
    cancel: CancellationToken,
) {
    let instance = plane.events().instance().to_owned();
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let received = tokio::select! {
            () = cancel.cancelled() => return,
            n = outbox.recv_many(&mut batch, BATCH) => n,
        };
        if received == 0 {
            return;
        }
        let payloads: Vec<(String, String)> = batch
            .drain(..)
            .filter_map(|event| {
                let payload = serde_json::to_string(&RelayedRef {
                    tenant_id: event.tenant_id.as_deref(),
                    event: &event,
                })
                .ok()?;
                Some((event.id.clone(), payload))
            })
            .collect();
        // Until the database takes them: a replica cut off from it keeps them in order.
        while let Err(err) = log
            .append_events(&instance, &payloads, plane.clock().now())
            .await
        {
            tracing::warn!(error = %err, "relaying events to other replicas failed; retrying");
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }
}

async fn read(plane: ControlPlane, log: Arc<dyn EventLog>, cancel: CancellationToken) {
    let instance = plane.events().instance().to_owned();
    let prepared = plane
        .inner
        .relay_start
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let start = loop {
        if let Some(seq) = prepared {
            break seq;
        }
        match log.last_event_seq().await {
            Ok(seq) => break seq,
            Err(err) => {
                tracing::warn!(error = %err, "reading the shared event log failed; retrying");
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    };
    let mut position = Position::at(start);
    let mut pruned_at = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = log.wait_for_events(&instance, POLL_FALLBACK) => {}
        }
        let mut cursor = position.watermark;
        loop {
            let rows = match log.events_after(&instance, cursor, PAGE).await {
                Ok(rows) => rows,
                Err(err) => {
                    tracing::warn!(error = %err, "reading other replicas' events failed; retrying");
                    tokio::time::sleep(RETRY).await;
                    break;
                }
            };
            let full = rows.len() as i64 == PAGE;
            for (seq, payload) in rows {
                cursor = cursor.max(seq);
                if !position.first(seq) {
                    continue;
                }
                // This replica's own rows come without their payload: they only close gaps.
                let Some(payload) = payload else { continue };
                deliver(&plane, seq, &payload);
            }
            if !full {
                break;
            }
        }
        position.settle(std::time::Instant::now(), GAP_TIMEOUT);
        if pruned_at.elapsed() > KEEP / 3 {
            pruned_at = tokio::time::Instant::now();
            let cutoff = svc_core::clock::sub_duration(plane.clock().now(), KEEP);
            if let Err(err) = log.prune_events(cutoff).await {
                tracing::warn!(error = %err, "pruning the shared event log failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn rows_are_delivered_once_and_the_watermark_follows_contiguous_rows() {
        let now = Instant::now();
        let mut position = Position::at(10);
        assert!(!position.first(9), "below the start");
        assert!(position.first(11));
        assert!(position.first(13));
        assert!(!position.first(13), "twice");
        position.settle(now, GAP_TIMEOUT);
        assert_eq!(position.watermark, 11, "12 is missing");
        assert!(!position.first(13), "still remembered above the gap");
        // 12 commits late: delivered, and the watermark closes up.
        assert!(position.first(12));
        position.settle(now, GAP_TIMEOUT);
        assert_eq!(position.watermark, 13);
        assert!(position.above.is_empty());
    }

    #[test]
    fn a_gap_that_stays_open_was_a_rollback() {
        let start = Instant::now();
        let mut position = Position::at(0);
        position.first(2);
        position.first(3);
        position.settle(start, GAP_TIMEOUT);
        assert_eq!(position.watermark, 0);
        position.settle(start + GAP_TIMEOUT / 2, GAP_TIMEOUT);
        assert_eq!(position.watermark, 0, "not yet");
        position.settle(start + GAP_TIMEOUT, GAP_TIMEOUT);
        assert_eq!(position.watermark, 3, "1 never came");
        assert!(
            !position.first(1),
            "a row below the watermark is not delivered late"
        );
    }
}
