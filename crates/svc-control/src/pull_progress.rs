//! Pull progress of spawns (decisions §17): while a spawn pulls its image, the sandbox stays
//! `creating` with a `state_message` saying how far the pull is, and `image.pulling` events
//! carry the figures, at most twice a second per pull.

use std::time::Duration;

use svc_core::event::{EventPayload, PullEventData};
use svc_core::sandbox::Sandbox;
use svc_provider::{ProgressSink, PullProgress};

use crate::ControlPlane;

/// The shortest time between two reports of one pull.
const REPORT_EVERY: Duration = Duration::from_millis(500);

/// `12.3 MB`.
fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// The `state_message` of a sandbox whose image is being pulled.
fn describe(progress: &PullProgress) -> String {
    let mut text = format!(
        "pulling image {}: {}",
        progress.image,
        megabytes(progress.current_bytes)
    );
    let done = progress.current_bytes.min(progress.total_bytes) * 100;
    if let Some(percent) = done.checked_div(progress.total_bytes) {
        text.push_str(&format!(
            " of {} ({percent}%)",
            megabytes(progress.total_bytes)
        ));
    }
    text
}

impl ControlPlane {
    /// Where the spawn of `sandbox` reports its pull. The newest figure wins; a task writes it
    /// to the record and the event stream at most every [`REPORT_EVERY`], and ends when the
    /// spawn drops the sink.
    pub(crate) fn pull_progress(&self, sandbox: &Sandbox) -> ProgressSink {
        let (sender, mut latest) = tokio::sync::watch::channel(None::<PullProgress>);
        let plane = self.clone();
        let (id, tenant) = (sandbox.id.clone(), sandbox.tenant_id.clone());
        tokio::spawn(async move {
            while latest.changed().await.is_ok() {
                let Some(progress) = latest.borrow_and_update().clone() else {
                    continue;
                };
                match plane
                    .store()
                    .set_creating_message(&id, &describe(&progress))
                    .await
                {
                    // The spawn ended meanwhile.
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(err) => {
                        tracing::debug!(sandbox_id = %id, error = %err, "recording pull progress failed");
                    }
                }
                plane.events().publish_in(
                    &tenant,
                    Some(&id),
                    EventPayload::ImagePulling(PullEventData {
                        image: progress.image,
                        current_bytes: progress.current_bytes,
                        total_bytes: progress.total_bytes,
                    }),
                );
                tokio::time::sleep(REPORT_EVERY).await;
            }
        });
        ProgressSink::new(move |progress| {
            sender.send_replace(Some(progress));
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_how_far_the_pull_is() {
        let progress = |current_bytes, total_bytes| PullProgress {
            image: "python:3.12".into(),
            current_bytes,
            total_bytes,
        };
        assert_eq!(
            describe(&progress(12_345_678, 49_000_000)),
            "pulling image python:3.12: 12.3 MB of 49.0 MB (25%)"
        );
        assert_eq!(
            describe(&progress(1_000_000, 0)),
            "pulling image python:3.12: 1.0 MB"
        );
    }
}
