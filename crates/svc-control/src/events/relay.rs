//! Events across replicas (interface Events 5, decisions §12): with PostgreSQL, every replica
//! appends the events it publishes to the shared log (which NOTIFYs the others) and delivers the
//! other replicas' events to its own subscribers, each exactly once.
//!
//! A notification only says "look": the reader queries the log for rows after the last one it
//! read, so payloads of any size work, and a listener that lost its connection catches up from
//! the table instead of losing what it missed. Sequence numbers are handed out before commit,
//! so a row may become visible after a higher one was read: every read goes back a window of
//! rows and drops the IDs it has already delivered.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use svc_core::event::{Event, EventType};
use svc_store::EventLog;
use tokio_util::sync::CancellationToken;

use crate::ControlPlane;

/// How long a reader waits for a notification before looking anyway.
const POLL_FALLBACK: Duration = Duration::from_secs(2);
/// Rows re-read behind the last one seen, for rows that committed late.
const LATE_WINDOW: i64 = 256;
/// Rows read at most per look.
const PAGE: i64 = 1000;
/// Delivered rows remembered, to drop rows read twice.
const REMEMBERED: usize = 20_000;
/// How long rows stay in the log (a replica that was away longer replays from its history only).
const KEEP: Duration = Duration::from_secs(15 * 60);
/// Events appended at most per write.
const BATCH: usize = 256;
/// Pause after a failed write or read before trying again.
const RETRY: Duration = Duration::from_millis(500);

/// An event on the wire between replicas: the event with its tenant (not part of its JSON).
#[derive(Serialize, Deserialize)]
struct Relayed {
    tenant_id: Option<String>,
    event: Event,
}

/// Rows (by sequence number) delivered lately, oldest first out.
#[derive(Default)]
struct Seen {
    seqs: HashSet<i64>,
    order: VecDeque<i64>,
}

impl Seen {
    /// True the first time `seq` is offered.
    fn first(&mut self, seq: i64) -> bool {
        if !self.seqs.insert(seq) {
            return false;
        }
        if self.order.len() == REMEMBERED {
            if let Some(oldest) = self.order.pop_front() {
                self.seqs.remove(&oldest);
            }
        }
        self.order.push_back(seq);
        true
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
                let payload = serde_json::to_string(&Relayed {
                    tenant_id: event.tenant_id.clone(),
                    event: (*event).clone(),
                })
                .ok()?;
                Some((event.id.clone(), payload))
            })
            .collect();
        // Until the database takes them: a replica cut off from it keeps them in order.
        while let Err(err) = log.append_events(&instance, &payloads).await {
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
    let mut after = loop {
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
    let mut seen = Seen::default();
    let mut pruned_at = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = log.wait_for_events(&instance, POLL_FALLBACK) => {}
        }
        loop {
            let rows = match log
                .events_after(&instance, after.saturating_sub(LATE_WINDOW), PAGE)
                .await
            {
                Ok(rows) => rows,
                Err(err) => {
                    tracing::warn!(error = %err, "reading other replicas' events failed; retrying");
                    tokio::time::sleep(RETRY).await;
                    break;
                }
            };
            let full = rows.len() as i64 == PAGE;
            let mut advanced = false;
            for (seq, payload) in rows {
                if seq > after {
                    after = seq;
                    advanced = true;
                }
                if !seen.first(seq) {
                    continue;
                }
                match serde_json::from_str::<Relayed>(&payload) {
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
            if !(full && advanced) {
                break;
            }
        }
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
    use super::*;

    #[test]
    fn a_row_is_delivered_once_and_old_ones_are_forgotten() {
        let mut seen = Seen::default();
        assert!(seen.first(-1));
        assert!(!seen.first(-1));
        for seq in 0..REMEMBERED as i64 {
            assert!(seen.first(seq));
        }
        assert!(seen.first(-1), "forgotten after REMEMBERED others");
        assert_eq!(seen.seqs.len(), REMEMBERED);
    }
}
