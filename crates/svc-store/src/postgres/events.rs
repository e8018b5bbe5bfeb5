//! The shared event log of the replicas (see [`EventLog`]): rows in `events`, and a LISTEN
//! connection of its own that wakes the reader on `NOTIFY svc_events`. The listener reconnects
//! by itself; every (re)connection wakes the reader too, so whatever was appended while it was
//! away is read from the table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use svc_core::Timestamp;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use super::codec::{execute, query, query_one};
use super::{pool, PgStore};
use crate::rows::micros;
use crate::{EventLog, StoreResult};

/// The notification channel (database-wide; payload: the publishing instance).
const CHANNEL: &str = "svc_events";
/// Subscribes a connection to it.
const LISTEN: &str = "LISTEN svc_events";
/// Pause before reconnecting a listener that lost its connection.
const RECONNECT: Duration = Duration::from_millis(500);

impl PgStore {
    /// The reader's wake-up, starting the listener the first time.
    fn listener(&self, instance: &str) -> Arc<Notify> {
        Arc::clone(self.listener.get_or_init(|| {
            let wake = Arc::new(Notify::new());
            tokio::spawn(listen(
                self.settings.clone(),
                instance.to_owned(),
                Arc::clone(&wake),
            ));
            wake
        }))
    }
}

/// Listens until the process ends: wakes `wake` for every other instance's notification and
/// after every (re)connection.
async fn listen(settings: tokio_postgres::Config, instance: String, wake: Arc<Notify>) {
    loop {
        if let Err(err) = listen_once(&settings, &instance, &wake).await {
            // tokio-postgres errors name the failure, never the connection string.
            tracing::warn!(error = %err, "the event listener lost its connection; reconnecting");
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// One connection's life: LISTEN, wake once (to catch up), then wake per notification.
async fn listen_once(
    settings: &tokio_postgres::Config,
    instance: &str,
    wake: &Notify,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = pool::connect_one(settings).await?;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx)).boxed();
    // The connection only moves while its messages are polled.
    let listening = client.batch_execute(LISTEN);
    tokio::pin!(listening);
    loop {
        tokio::select! {
            result = &mut listening => { result?; break; }
            message = messages.next() => match message {
                None => return Ok(()),
                Some(Err(err)) => return Err(err),
                Some(Ok(_)) => {}
            },
        }
    }
    wake.notify_one();
    while let Some(message) = messages.next().await {
        if let AsyncMessage::Notification(n) = message? {
            if n.payload() != instance {
                wake.notify_one();
            }
        }
    }
    Ok(())
}

#[async_trait]
impl EventLog for PgStore {
    async fn append_events(
        &self,
        instance: &str,
        events: &[(String, String)],
        at: Timestamp,
    ) -> StoreResult<()> {
        const OP: &str = "append_events";
        if events.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = events.iter().map(|(id, _)| id.as_str()).collect();
        let payloads: Vec<&str> = events.iter().map(|(_, p)| p.as_str()).collect();
        let now = micros(at);
        let client = self.client(OP).await?;
        // One statement, so one round trip: the rows, the notification (sent at its commit)
        // and, for this statement's transaction only, a commit that does not wait for the
        // disk: events are also delivered locally at once, the log only carries them to the
        // other replicas.
        execute(
            &client,
            OP,
            "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true)), \
             appended AS (INSERT INTO events (instance, id, payload, created_at) \
             SELECT $1, e.id, e.payload, $4 FROM unnest($2::text[], $3::text[]) \
             WITH ORDINALITY AS e(id, payload, n) ORDER BY e.n \
             ON CONFLICT (id) DO NOTHING) \
             SELECT pg_notify($5, $1) FROM relaxed",
            &[&instance, &ids, &payloads, &now, &CHANNEL],
        )
        .await?;
        Ok(())
    }

    async fn events_after(
        &self,
        instance: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<(i64, Option<String>)>> {
        const OP: &str = "events_after";
        let client = self.client(OP).await?;
        let rows = query(
            &client,
            OP,
            "SELECT seq, CASE WHEN instance = $2 THEN NULL ELSE payload END FROM events \
             WHERE seq > $1 ORDER BY seq LIMIT $3",
            &[&after, &instance, &limit],
        )
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get(0).map_err(super::codec::backend(OP))?,
                    row.try_get(1).map_err(super::codec::backend(OP))?,
                ))
            })
            .collect()
    }

    async fn last_event_seq(&self) -> StoreResult<i64> {
        const OP: &str = "last_event_seq";
        let client = self.client(OP).await?;
        let row = query_one(&client, OP, "SELECT COALESCE(MAX(seq), 0) FROM events", &[]).await?;
        row.try_get(0).map_err(super::codec::backend(OP))
    }

    async fn wait_for_events(&self, instance: &str, timeout: Duration) {
        let wake = self.listener(instance);
        let _ = tokio::time::timeout(timeout, wake.notified()).await;
    }

    async fn prune_events(&self, before: Timestamp) -> StoreResult<u64> {
        const OP: &str = "prune_events";
        let client = self.client(OP).await?;
        execute(
            &client,
            OP,
            "DELETE FROM events WHERE created_at < $1",
            &[&micros(before)],
        )
        .await
    }
}
