//! `GET /events`: server-sent events (decisions §12). The subscription is taken before the
//! response is returned, so every event published after a client has its 200 reaches it.

use std::convert::Infallible;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, Sse};
use futures::Stream;
use serde::Deserialize;
use svc_control::{ControlPlane, EventFilter};
use svc_core::Error;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::extract::{ApiQuery, Caller};
use crate::{ApiError, ErrorBody};

/// `GET /events` query.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct EventsQuery {
    /// Comma-separated event types to deliver.
    types: Option<String>,
    /// Only this sandbox's events.
    sandbox_id: Option<String>,
    /// Replays history after this event ID (same as the `Last-Event-ID` header).
    last_event_id: Option<String>,
}

/// Lifecycle events as `text/event-stream`; each message is `id:` plus a JSON `data:` line.
#[utoipa::path(get, path = "/events", tag = "events", params(EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Replay events after this ID")),
    responses((status = 200, description = "Event stream", content_type = "text/event-stream", body = svc_core::event::Event),
        (status = 400, description = "Unknown event type", body = ErrorBody)))]
async fn events(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let types = match query.types.as_deref() {
        Some(list) => EventFilter::parse_types(list).map_err(|m| Error::invalid("types", m))?,
        None => Default::default(),
    };
    let filter = EventFilter {
        types,
        sandbox_id: query.sandbox_id.filter(|s| !s.is_empty()),
        // Set by the control plane from the caller.
        tenant_id: None,
        owner: None,
    };
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(query.last_event_id);
    let subscription = plane
        .subscribe_events(&principal, filter, last_event_id.as_deref())
        .await?;
    let stream = crate::stream::sse::event_stream(subscription, plane.shutdown_token().clone());
    Ok(Sse::new(stream).keep_alive(crate::stream::sse::keep_alive()))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new().routes(routes!(events))
}
