//! In-process publish/subscribe with history.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use rand::Rng;
use serde_json::{Map, Value};
use svc_core::event::{Event, EventPayload, EventType};
use svc_core::{Clock, SandboxId};
use tokio::sync::{broadcast, mpsc};

use super::EventFilter;

/// Live events a slow subscriber may fall behind by before it misses some.
const CHANNEL_CAPACITY: usize = 4096;

/// Counters for diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct EventStats {
    /// Live subscribers.
    pub subscribers: usize,
    /// Events currently held in history.
    pub history_size: usize,
    /// Events published since start.
    pub events_total: u64,
}

/// Publishes events to subscribers and keeps the most recent ones.
pub struct EventBus {
    sender: broadcast::Sender<Arc<Event>>,
    history: Mutex<VecDeque<Arc<Event>>>,
    history_capacity: usize,
    clock: Arc<dyn Clock>,
    /// Random per process, so IDs from different replicas never collide.
    instance: String,
    sequence: AtomicU64,
    total: AtomicU64,
    /// Where this process's own events also go, for other replicas (set when a shared
    /// database carries events, see [`EventBus::relay`]).
    outbox: OnceLock<mpsc::Sender<Arc<Event>>>,
}

/// Events waiting for the relay at most; beyond, other replicas miss them (local subscribers
/// never do).
const OUTBOX_CAPACITY: usize = 10_000;

/// A live subscription: replayed history first, then live events, both filtered.
pub struct Subscription {
    replay: VecDeque<Arc<Event>>,
    receiver: broadcast::Receiver<Arc<Event>>,
    filter: EventFilter,
}

impl Subscription {
    /// The next matching event; `None` when the bus is gone. A subscriber that falls too far
    /// behind skips what it missed rather than stalling publishers.
    pub async fn next(&mut self) -> Option<Arc<Event>> {
        if let Some(event) = self.replay.pop_front() {
            return Some(event);
        }
        loop {
            match self.receiver.recv().await {
                Ok(event) if self.filter.matches(&event) => return Some(event),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "event subscriber fell behind; events skipped");
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl EventBus {
    /// A bus keeping at most `history_capacity` events.
    pub fn new(history_capacity: usize, clock: Arc<dyn Clock>) -> Self {
        let (sender, _) = broadcast::channel(CHANNEL_CAPACITY);
        let instance: [u8; 6] = rand::rng().random();
        EventBus {
            sender,
            history: Mutex::new(VecDeque::with_capacity(history_capacity.min(4096))),
            history_capacity: history_capacity.max(1),
            clock,
            instance: hex::encode(instance),
            sequence: AtomicU64::new(0),
            total: AtomicU64::new(0),
            outbox: OnceLock::new(),
        }
    }

    /// Publishes `payload` about `sandbox_id` (if any) and returns the event.
    /// The event belongs to no tenant: OIDC subscribers, who see only their tenant's events,
    /// do not get it.
    pub fn publish(&self, sandbox_id: Option<&SandboxId>, payload: EventPayload) -> Arc<Event> {
        let event_type = payload.event_type();
        self.publish_raw(event_type, None, sandbox_id, Some(payload.into_data()))
    }

    /// Publishes `payload` about `sandbox_id` (if any) in `tenant_id`.
    pub fn publish_in(
        &self,
        tenant_id: &str,
        sandbox_id: Option<&SandboxId>,
        payload: EventPayload,
    ) -> Arc<Event> {
        let event_type = payload.event_type();
        self.publish_raw(
            event_type,
            Some(tenant_id),
            sandbox_id,
            Some(payload.into_data()),
        )
    }

    fn publish_raw(
        &self,
        event_type: EventType,
        tenant_id: Option<&str>,
        sandbox_id: Option<&SandboxId>,
        data: Option<Map<String, Value>>,
    ) -> Arc<Event> {
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed) + 1;
        let event = Arc::new(Event {
            id: format!("ev-{}-{sequence:010}", self.instance),
            event_type,
            sandbox_id: sandbox_id.cloned(),
            tenant_id: tenant_id.map(str::to_owned),
            timestamp: self.clock.now(),
            data,
        });
        self.deliver(&event);
        if let Some(outbox) = self.outbox.get() {
            if outbox.try_send(Arc::clone(&event)).is_err() {
                tracing::warn!(event_id = %event.id, "the event relay is behind; other replicas miss this event");
            }
        }
        tracing::debug!(
            event_type = event_type.as_str(),
            sandbox_id = sandbox_id.map(SandboxId::as_str),
            "event published"
        );
        event
    }

    /// Into history and to every live subscriber.
    fn deliver(&self, event: &Arc<Event>) {
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        if history.len() == self.history_capacity {
            history.pop_front();
        }
        history.push_back(Arc::clone(event));
        self.total.fetch_add(1, Ordering::Relaxed);
        // No receivers is not an error: events still go to history.
        let _ = self.sender.send(Arc::clone(event));
    }

    /// This process's instance ID (a part of every event ID it makes).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Starts relaying: every event published from now on is also sent to the returned
    /// receiver (once; later calls get `None`).
    pub fn relay(&self) -> Option<mpsc::Receiver<Arc<Event>>> {
        let (sender, receiver) = mpsc::channel(OUTBOX_CAPACITY);
        self.outbox.set(sender).ok().map(|()| receiver)
    }

    /// Delivers an event another replica published, as it was (its ID, time and tenant), to the
    /// local history and subscribers; it is not relayed again.
    pub fn deliver_foreign(&self, event: Event) {
        self.deliver(&Arc::new(event));
    }

    /// Subscribes. With `last_event_id`, history newer than that event is replayed first; an
    /// ID no longer in history replays the whole history.
    pub fn subscribe(&self, filter: EventFilter, last_event_id: Option<&str>) -> Subscription {
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        let receiver = self.sender.subscribe();
        let replay = match last_event_id {
            None => VecDeque::new(),
            Some(last) => {
                let start = history
                    .iter()
                    .position(|event| event.id == last)
                    .map_or(0, |index| index + 1);
                history
                    .iter()
                    .skip(start)
                    .filter(|event| filter.matches(event))
                    .cloned()
                    .collect()
            }
        };
        drop(history);
        Subscription {
            replay,
            receiver,
            filter,
        }
    }

    /// A copy of the history, oldest first.
    pub fn history(&self) -> Vec<Arc<Event>> {
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Counters for diagnostics.
    pub fn stats(&self) -> EventStats {
        EventStats {
            subscribers: self.sender.receiver_count(),
            history_size: self
                .history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            events_total: self.total.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_core::SystemClock;

    fn bus(capacity: usize) -> EventBus {
        EventBus::new(capacity, Arc::new(SystemClock))
    }

    fn id(n: u8) -> SandboxId {
        SandboxId::parse(&format!("sb-{n:016x}")).unwrap()
    }

    #[tokio::test]
    async fn tenant_subscribers_get_only_their_tenants_events() {
        let bus = bus(10);
        let mut sub = bus.subscribe(
            EventFilter {
                tenant_id: Some("acme".to_owned()),
                ..EventFilter::default()
            },
            None,
        );
        bus.publish_raw(EventType::SandboxCreated, None, Some(&id(1)), None);
        bus.publish_raw(EventType::SandboxCreated, Some("other"), Some(&id(2)), None);
        bus.publish_raw(EventType::SandboxCreated, Some("acme"), Some(&id(3)), None);
        let event = sub.next().await.unwrap();
        assert_eq!(event.sandbox_id, Some(id(3)));
        assert_eq!(event.tenant_id.as_deref(), Some("acme"));
    }

    #[tokio::test]
    async fn live_events_are_filtered() {
        let bus = bus(10);
        let mut sub = bus.subscribe(
            EventFilter {
                types: [EventType::SandboxDestroyed].into(),
                sandbox_id: Some(id(2).to_string()),
                tenant_id: None,
            },
            None,
        );
        bus.publish_raw(EventType::SandboxCreated, None, Some(&id(2)), None);
        bus.publish_raw(EventType::SandboxDestroyed, None, Some(&id(1)), None);
        let wanted = bus.publish_raw(EventType::SandboxDestroyed, None, Some(&id(2)), None);
        assert_eq!(sub.next().await.unwrap().id, wanted.id);
    }

    #[tokio::test]
    async fn replays_after_last_event_id_and_bounds_history() {
        let bus = bus(3);
        let ids: Vec<_> = (0..5)
            .map(|_| {
                bus.publish_raw(EventType::SandboxCreated, None, None, None)
                    .id
                    .clone()
            })
            .collect();
        assert_eq!(bus.stats().history_size, 3);
        assert_eq!(bus.stats().events_total, 5);
        let mut sub = bus.subscribe(EventFilter::default(), Some(&ids[3]));
        assert_eq!(sub.next().await.unwrap().id, ids[4]);
        // An ID that fell out of history replays everything held.
        let mut sub = bus.subscribe(EventFilter::default(), Some(&ids[0]));
        for expected in &ids[2..] {
            assert_eq!(&sub.next().await.unwrap().id, expected);
        }
        let live = bus.publish_raw(EventType::SandboxRunning, None, None, None);
        assert_eq!(sub.next().await.unwrap().id, live.id);
    }

    #[test]
    fn parses_type_lists() {
        let types = EventFilter::parse_types("sandbox.created, exec.timeout").unwrap();
        assert_eq!(types.len(), 2);
        assert!(EventFilter::parse_types("sandbox.nope").is_err());
    }
}
