//! Server-sent events (decisions §12): `id:` and a JSON `data:` line per event, `: ping`
//! comments every 15 s, and the end of the stream when the server shuts down.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive};
use futures::Stream;
use svc_control::Subscription;
use tokio_util::sync::CancellationToken;

const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The keep-alive comment.
pub(crate) fn keep_alive() -> KeepAlive {
    KeepAlive::new().interval(KEEP_ALIVE).text(" ping")
}

/// The events of `subscription` as SSE frames until `shutdown` fires.
pub(crate) fn event_stream(
    subscription: Subscription,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures::stream::unfold(subscription, move |mut subscription| {
        let shutdown = shutdown.clone();
        async move {
            // Open streams end on shutdown so graceful shutdown does not wait for them.
            let event = tokio::select! {
                event = subscription.next() => event?,
                () = shutdown.cancelled() => return None,
            };
            let json = serde_json::to_string(event.as_ref()).unwrap_or_default();
            let sse = SseEvent::default().id(event.id.clone()).data(json);
            Some((Ok(sse), subscription))
        }
    })
}
