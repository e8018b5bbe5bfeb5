//! Pull progress of spawns (decisions §17): while a spawn pulls its image, the sandbox stays
//! `creating` with a `state_message` saying how far the pull is, and `image.pulling` events
//! carry the figures, at most twice a second per pull.

use std::time::Duration;

use svc_core::event::{EventPayload, PullEventData};
use svc_core::sandbox::Sandbox;
use svc_provider::{ProgressSink, PullProgress};

use tokio::sync::watch;

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
    /// Where the spawn of `sandbox` reports its pull. The newest figure wins; a task, started
    /// at the first report (most spawns pull nothing), writes it to the record and the event
    /// stream at most every [`REPORT_EVERY`], and ends when the spawn drops the sink.
    pub(crate) fn pull_progress(&self, sandbox: &Sandbox) -> ProgressSink {
        let plane = self.clone();
        let (id, tenant) = (sandbox.id.clone(), sandbox.tenant_id.clone());
        let reporter = std::sync::OnceLock::<watch::Sender<PullProgress>>::new();
        ProgressSink::new(move |progress| {
            let sender = reporter.get_or_init(|| {
                let (sender, latest) = watch::channel(progress.clone());
                tokio::spawn(report(plane.clone(), id.clone(), tenant.clone(), latest));
                sender
            });
            sender.send_replace(progress);
        })
    }
}

/// Writes the newest figure of `latest` until the spawn drops its sender or ends.
async fn report(
    plane: ControlPlane,
    id: svc_core::SandboxId,
    tenant: String,
    mut latest: watch::Receiver<PullProgress>,
) {
    // The first figure is already there, unseen by `changed`.
    latest.mark_changed();
    while latest.changed().await.is_ok() {
        let progress = latest.borrow_and_update().clone();
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
