//! Server-sent events (decisions §12): `id:` and a JSON `data:` line per event, `: ping`
//! comments every 15 s, a last `event: overflow` for a subscriber that fell too far behind,
//! and the end of the stream when the server shuts down.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive};
use futures::Stream;
use svc_control::events::Ended;
use svc_control::Subscription;
use tokio_util::sync::CancellationToken;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The keep-alive comment.
pub(crate) fn keep_alive() -> KeepAlive {
    KeepAlive::new().interval(KEEP_ALIVE).text(" ping")
}

/// The events of `subscription` as SSE frames until `shutdown` fires or the subscriber falls
/// too far behind.
pub(crate) fn event_stream(
    subscription: Subscription,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures::stream::unfold(Some(subscription), move |subscription| {
        let shutdown = shutdown.clone();
        async move {
            let mut subscription = subscription?;
            // Open streams end on shutdown so graceful shutdown does not wait for them.
            let received = tokio::select! {
                received = subscription.recv() => received,
                () = shutdown.cancelled() => return None,
            };
            match received {
                Ok(delivery) => {
                    let sse = SseEvent::default()
                        .id(delivery.id.as_str())
                        .data(delivery.json());
                    Some((Ok(sse), Some(subscription)))
                }
                // Told, then dropped: no `id:`, so a resume names the last event it did get.
                Err(Ended::Overflow { missed }) => Some((Ok(overflow(missed)), None)),
                Err(Ended::Closed) => None,
            }
        }
    })
}

/// The last message to a subscriber that fell behind.
fn overflow(missed: u64) -> SseEvent {
    let data = serde_json::json!({
        "missed": missed,
        "message": format!(
            "this subscriber fell more than events.subscriber_buffer events behind and missed \
             {missed}; reconnect with Last-Event-ID to replay what history still holds"
        ),
    });
    SseEvent::default().event("overflow").data(data.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use axum::response::{IntoResponse, Sse};
    use svc_control::{EventBus, EventFilter};
    use svc_core::config::EventsConfig;
    use svc_core::event::{EventPayload, QuotaEventData};

    use super::*;

    fn saved(bus: &EventBus, owner: &str) {
        let data = QuotaEventData {
            owner_id: owner.to_owned(),
        };
        bus.publish(None, EventPayload::QuotaSaved(data));
    }

    /// The whole body a subscription's stream makes, once it ends.
    async fn body(subscription: Subscription) -> String {
        let stream = event_stream(subscription, CancellationToken::new());
        let body = Sse::new(stream).into_response().into_body();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// A subscriber 11 events behind a ring of 4 gets one last `event: overflow` message,
    /// without an `id:` (a resume names the last event it did get), and its stream ends.
    #[tokio::test]
    async fn a_subscriber_that_fell_behind_is_told_and_its_stream_ends() {
        let config = EventsConfig {
            history_size: 100,
            subscriber_buffer: 4,
        };
        let bus = EventBus::new(&config, Arc::new(svc_core::SystemClock));
        let stalled = bus.subscribe(EventFilter::default(), None);
        for n in 0..11 {
            saved(&bus, &format!("owner-{n}"));
        }
        let text = tokio::time::timeout(Duration::from_secs(5), body(stalled))
            .await
            .expect("the stream ends");
        let (head, data) = text.split_once('\n').unwrap();
        assert_eq!(head, "event: overflow", "{text}");
        let data: serde_json::Value =
            serde_json::from_str(data.trim().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["missed"], 7, "{text}");
        assert!(data["message"].as_str().unwrap().contains("Last-Event-ID"));
        assert!(!text.contains("id:"), "{text}");
    }
}
