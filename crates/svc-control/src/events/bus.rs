//! In-process publish/subscribe with history.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use rand::Rng;
use serde_json::{Map, Value};
use svc_core::config::EventsConfig;
use svc_core::event::{Event, EventPayload, EventType};
use svc_core::{Clock, SandboxId};
use tokio::sync::{broadcast, mpsc};

use super::EventFilter;

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
    sender: broadcast::Sender<Arc<Delivery>>,
    history: Mutex<VecDeque<Arc<Delivery>>>,
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

/// An event as subscribers get it: the event, and its JSON, made once for all of them (with
/// thousands of subscribers, serializing per subscriber was most of an event's fan-out).
#[derive(Debug)]
pub struct Delivery {
    event: Arc<Event>,
    json: OnceLock<Box<str>>,
}

impl Delivery {
    fn new(event: Arc<Event>) -> Arc<Self> {
        Arc::new(Delivery {
            event,
            json: OnceLock::new(),
        })
    }

    /// The event.
    pub fn event(&self) -> &Arc<Event> {
        &self.event
    }

    /// The event as JSON, as the wire carries it.
    pub fn json(&self) -> &str {
        self.json.get_or_init(|| {
            serde_json::to_string(self.event.as_ref())
                .unwrap_or_default()
                .into_boxed_str()
        })
    }
}

impl std::ops::Deref for Delivery {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.event
    }
}

/// A live subscription: replayed history first, then live events, both filtered.
///
/// Live events come from one ring shared by every subscriber (`events.subscriber_buffer`
/// events long), each subscriber only a position in it: publishing never waits for anyone, a
/// slow subscriber costs no memory of its own, and one that falls a whole ring behind is told
/// ([`Ended::Overflow`]) and ends rather than silently skipping.
pub struct Subscription {
    replay: VecDeque<Arc<Delivery>>,
    receiver: broadcast::Receiver<Arc<Delivery>>,
    filter: EventFilter,
    ended: bool,
}

/// Why a subscription ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The bus is gone (shutdown).
    Closed,
    /// The subscriber fell more than `events.subscriber_buffer` events behind; `missed` of them
    /// are lost to it (a resume with `Last-Event-ID` replays what history still holds).
    Overflow {
        /// Events it missed.
        missed: u64,
    },
}

impl Subscription {
    /// The next matching event, or why there is none and never will be.
    pub async fn recv(&mut self) -> Result<Arc<Delivery>, Ended> {
        if let Some(event) = self.replay.pop_front() {
            return Ok(event);
        }
        if self.ended {
            return Err(Ended::Closed);
        }
        loop {
            match self.receiver.recv().await {
                Ok(delivery) if self.filter.matches(&delivery.event) => return Ok(delivery),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    self.ended = true;
                    tracing::info!(missed, "an event subscriber fell behind; dropped");
                    return Err(Ended::Overflow { missed });
                }
                Err(broadcast::error::RecvError::Closed) => {
                    self.ended = true;
                    return Err(Ended::Closed);
                }
            }
        }
    }

    /// The next matching event; `None` once the subscription ended (see [`Subscription::recv`]).
    pub async fn next(&mut self) -> Option<Arc<Event>> {
        self.recv()
            .await
            .ok()
            .map(|delivery| Arc::clone(&delivery.event))
    }
}

impl EventBus {
    /// A bus keeping at most `events.history_size` events, whose subscribers may fall
    /// `events.subscriber_buffer` behind.
    pub fn new(config: &EventsConfig, clock: Arc<dyn Clock>) -> Self {
        let (sender, _) = broadcast::channel(config.subscriber_buffer.max(1));
        let instance: [u8; 6] = rand::rng().random();
        let history_capacity = config.history_size;
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
        let delivery = Delivery::new(Arc::clone(event));
        history.push_back(Arc::clone(&delivery));
        self.total.fetch_add(1, Ordering::Relaxed);
        // No receivers is not an error: events still go to history.
        let _ = self.sender.send(delivery);
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
                    .filter(|delivery| filter.matches(&delivery.event))
                    .cloned()
                    .collect()
            }
        };
        drop(history);
        Subscription {
            replay,
            receiver,
            filter,
            ended: false,
        }
    }

    /// A copy of the history, oldest first.
    pub fn history(&self) -> Vec<Arc<Event>> {
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|delivery| Arc::clone(&delivery.event))
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
        let config = EventsConfig {
            history_size: capacity,
            ..EventsConfig::default()
        };
        EventBus::new(&config, Arc::new(SystemClock))
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

    /// One subscriber stalls while another keeps up: the stalled one is told it overflowed
    /// once it falls a ring behind, and ends; the other gets every event; a resume from the
    /// last event the stalled one got replays the rest from history.
    #[tokio::test]
    async fn a_stalled_subscriber_overflows_alone_and_can_resume() {
        let config = EventsConfig {
            history_size: 100,
            subscriber_buffer: 8,
        };
        let bus = EventBus::new(&config, Arc::new(SystemClock));
        let mut stalled = bus.subscribe(EventFilter::default(), None);
        let mut live = bus.subscribe(EventFilter::default(), None);
        let mut seen_live = Vec::new();
        bus.publish_raw(EventType::SandboxCreated, None, Some(&id(0)), None);
        let last_seen = stalled.recv().await.unwrap().id.clone();
        live.recv().await.unwrap();
        for n in 1..=20u8 {
            bus.publish_raw(EventType::SandboxCreated, None, Some(&id(n)), None);
            seen_live.push(live.recv().await.unwrap().sandbox_id.clone().unwrap());
        }
        assert_eq!(seen_live.len(), 20, "the live subscriber missed nothing");
        assert_eq!(
            stalled.recv().await.unwrap_err(),
            Ended::Overflow { missed: 12 },
            "20 behind with a ring of 8"
        );
        assert!(
            stalled.next().await.is_none(),
            "dropped: nothing after the overflow"
        );
        assert_eq!(
            bus.stats().subscribers,
            2,
            "until the subscription itself is dropped"
        );
        drop(stalled);
        assert_eq!(bus.stats().subscribers, 1);

        let mut resumed = bus.subscribe(EventFilter::default(), Some(&last_seen));
        let mut replayed = Vec::new();
        for _ in 0..20 {
            replayed.push(resumed.recv().await.unwrap().sandbox_id.clone().unwrap());
        }
        assert_eq!(
            replayed, seen_live,
            "the resume replays every event it missed"
        );
    }

    #[tokio::test]
    async fn live_events_are_filtered() {
        let bus = bus(10);
        let mut sub = bus.subscribe(
            EventFilter {
                types: [EventType::SandboxDestroyed].into(),
                sandbox_id: Some(id(2).to_string()),
                tenant_id: None,
                owner: None,
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
