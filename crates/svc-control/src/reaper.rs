//! The reaper (decisions §7): every `defaults.reap_interval` it destroys running sandboxes
//! whose `expires_at` passed and forgets destroyed records older than `destroyed_retention`;
//! once a minute it removes built template images nothing uses any more.

use std::time::Duration;

use svc_core::clock::sub_duration;
use svc_core::sandbox::StateReason;
use tokio_util::sync::CancellationToken;

use crate::{ControlPlane, Principal};

/// How often built images nothing uses any more are looked for.
const IMAGE_COLLECTION_INTERVAL: Duration = Duration::from_secs(60);

/// Runs until `cancel` fires.
pub(crate) async fn run(plane: ControlPlane, cancel: CancellationToken) {
    let interval = plane
        .config()
        .defaults
        .reap_interval
        .as_std()
        .max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_collection: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = ticker.tick() => {
                reap_once(&plane).await;
                // Built images freed by ended sandboxes, at most once a minute.
                if last_collection.is_none_or(|at| at.elapsed() >= IMAGE_COLLECTION_INTERVAL) {
                    last_collection = Some(tokio::time::Instant::now());
                    plane.collect_built_images().await;
                }
            }
        }
    }
    tracing::debug!("reaper stopped");
}

/// One pass; errors are logged and retried on the next tick.
pub(crate) async fn reap_once(plane: &ControlPlane) {
    match plane
        .destroy_expired(&Principal::system(), StateReason::Expired)
        .await
    {
        Ok(0) => {}
        Ok(count) => tracing::info!(count, "reaper destroyed expired sandboxes"),
        Err(err) => tracing::warn!(error = %err, "reaper pass failed"),
    }
    let retention = plane.config().defaults.destroyed_retention.as_std();
    let cutoff = sub_duration(plane.clock().now(), retention);
    match plane.store().purge_destroyed_before(cutoff).await {
        Ok(0) => {}
        Ok(count) => tracing::info!(count, "reaper forgot old destroyed sandboxes"),
        Err(err) => tracing::warn!(error = %err, "purging destroyed sandboxes failed"),
    }
}
