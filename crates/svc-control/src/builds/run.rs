//! Running one build: wait for a slot, stream the context to the engine, store its progress as
//! log lines in batches, and end the record; on success the template points at the image.

use std::sync::Arc;
use std::time::Duration;

use svc_core::build::{build_image, BuildLogLine, BuildStatus, TemplateBuild};
use svc_provider::{BuildUpdate, ImageBuilder};
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use super::context::Context;
use super::{encode, RunningBuild};
use crate::ControlPlane;

/// Lines kept per build; output past it is dropped (steps and the result still come).
const MAX_LOG_LINES: u64 = 20_000;
/// Lines stored per batch at most.
const BATCH: usize = 256;
/// How often pending lines are stored.
const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// How often the record is checked for a cancel made on another replica (in flushes).
const CHECK_EVERY_FLUSHES: u32 = 5;
/// Output lines of the failing step quoted in the build's `error`.
const QUOTED_LINES: usize = 20;

/// How the build went.
enum Outcome {
    Built,
    Failed(String),
    Cancelled,
    /// The server is shutting down: the record stays `running`, and the next start on this
    /// worker marks it failed, as after a crash.
    Interrupted,
}

/// The log of one build, stored in batches.
struct Log {
    plane: ControlPlane,
    build: TemplateBuild,
    running: Arc<RunningBuild>,
    pending: Vec<String>,
    written: u64,
    truncated: bool,
}

impl Log {
    fn push(&mut self, line: &BuildLogLine) {
        let is_output = matches!(line, BuildLogLine::Output { .. });
        if is_output && self.written + self.pending.len() as u64 >= MAX_LOG_LINES {
            if !self.truncated {
                self.truncated = true;
                self.pending.push(encode(&BuildLogLine::Output {
                    data: format!("[svc: output past {MAX_LOG_LINES} lines is not kept]\n"),
                }));
            }
            return;
        }
        self.pending.push(encode(line));
    }

    async fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.pending);
        for batch in lines.chunks(BATCH) {
            if let Err(err) = self
                .plane
                .store()
                .append_build_log(&self.build.build_id, batch)
                .await
            {
                tracing::warn!(build_id = %self.build.build_id, error = %err, "storing build log lines failed; they are lost");
            }
        }
        self.written += lines.len() as u64;
        self.running.appended.send_modify(|n| *n += 1);
    }
}

/// The current step and its output, for saying which step failed and how.
#[derive(Default)]
struct Steps {
    current: Option<(u32, String)>,
    output: std::collections::VecDeque<String>,
}

impl Steps {
    fn see(&mut self, update: &BuildUpdate) {
        match update {
            BuildUpdate::Step { step, instruction } => {
                self.current = Some((*step, instruction.clone()));
                self.output.clear();
            }
            BuildUpdate::Output(text) => {
                // The engine's own bookkeeping is no help in an error message.
                for line in text.lines().filter(|l| {
                    !l.trim().is_empty()
                        && !l.starts_with(" ---> ")
                        && !l.starts_with("Removing intermediate container")
                }) {
                    if self.output.len() == QUOTED_LINES {
                        self.output.pop_front();
                    }
                    self.output.push_back(line.to_owned());
                }
            }
            BuildUpdate::Progress { .. } => {}
        }
    }

    /// `step 2 (RUN make) failed: <engine message>; output: <last lines>`.
    fn describe(&self, message: &str) -> String {
        let mut text = match &self.current {
            Some((step, instruction)) => format!("step {step} ({instruction}) failed: {message}"),
            None => format!("the build failed: {message}"),
        };
        if !self.output.is_empty() {
            let output: Vec<&str> = self.output.iter().map(String::as_str).collect();
            text.push_str("; output: ");
            text.push_str(&output.join("\n"));
        }
        text
    }
}

fn line_of(update: BuildUpdate) -> BuildLogLine {
    match update {
        BuildUpdate::Step { step, instruction } => BuildLogLine::Step { step, instruction },
        BuildUpdate::Output(data) => BuildLogLine::Output { data },
        BuildUpdate::Progress {
            current_bytes,
            total_bytes,
        } => BuildLogLine::Progress {
            current_bytes,
            total_bytes,
        },
    }
}

/// Runs `build` to its end.
pub(super) async fn run(
    plane: ControlPlane,
    builder: Arc<dyn ImageBuilder>,
    build: TemplateBuild,
    context: Context,
    running: Arc<RunningBuild>,
    mut slot: Option<OwnedSemaphorePermit>,
) {
    let mut log = Log {
        plane: plane.clone(),
        build: build.clone(),
        running: Arc::clone(&running),
        pending: Vec::new(),
        written: 0,
        truncated: false,
    };
    let tag = build_image(&build.template, &build.build_id);
    let using = plane.inner.builds.using_images().await;
    let outcome = build_in_slot(
        &plane,
        builder.as_ref(),
        &tag,
        context,
        &running,
        &mut slot,
        &mut log,
    )
    .await;
    log.flush().await;
    match outcome {
        Outcome::Built => {
            if plane
                .end_build_as(&build, BuildStatus::Succeeded, Some(tag.clone()), None)
                .await
                .is_some()
            {
                tracing::info!(template = %build.template, build_id = %build.build_id, image = %tag, "template build succeeded");
            }
        }
        Outcome::Failed(error) => {
            tracing::info!(template = %build.template, build_id = %build.build_id, error = %error, "template build failed");
            plane
                .end_build_as(&build, BuildStatus::Failed, None, Some(error))
                .await;
        }
        Outcome::Interrupted => {
            tracing::info!(template = %build.template, build_id = %build.build_id, "template build interrupted by shutdown");
            running.appended.send_modify(|n| *n += 1);
            plane.inner.builds.forget(&build.build_id);
            drop(using);
            return;
        }
        Outcome::Cancelled => {
            // The record ended with the cancel; the result line says so here.
            if let Err(err) = plane
                .store()
                .append_build_log(
                    &build.build_id,
                    &[encode(&BuildLogLine::Result {
                        status: BuildStatus::Cancelled,
                        image: None,
                        error: Some("cancelled".to_owned()),
                    })],
                )
                .await
            {
                tracing::warn!(build_id = %build.build_id, error = %err, "storing a build's result line failed");
            }
        }
    }
    running.appended.send_modify(|n| *n += 1);
    plane.inner.builds.forget(&build.build_id);
    // Held until the record has ended, so a waiting build starts only after this one is seen
    // to have ended.
    drop(slot);
    drop(using);
    plane.collect_built_images().await;
}

/// Waits for a build slot unless it was taken when the build was accepted (`slot`), then
/// builds; a cancel (here or, seen in the record, on another replica) stops either.
async fn build_in_slot(
    plane: &ControlPlane,
    builder: &dyn ImageBuilder,
    tag: &str,
    context: Context,
    running: &RunningBuild,
    slot: &mut Option<OwnedSemaphorePermit>,
    log: &mut Log,
) -> Outcome {
    if slot.is_none() {
        log.push(&BuildLogLine::Output {
            data: format!(
                "waiting for a build slot (defaults.max_concurrent_builds is {})\n",
                plane.config().defaults.max_concurrent_builds
            ),
        });
        log.flush().await;
        let slots = Arc::clone(&plane.inner.builds.slots);
        *slot = tokio::select! {
            taken = slots.acquire_owned() => match taken {
                Ok(taken) => Some(taken),
                Err(_) => return Outcome::Failed("the server is shutting down".to_owned()),
            },
            () = running.cancel.cancelled() => return Outcome::Cancelled,
            () = plane.shutdown_token().cancelled() => return Outcome::Interrupted,
        };
    }
    let timeout = plane.config().defaults.build_timeout;
    let (sender, mut updates) = mpsc::unbounded_channel::<BuildUpdate>();
    let report = move |update: BuildUpdate| {
        let _ = sender.send(update);
    };
    let building = tokio::time::timeout(
        timeout.as_std(),
        builder.build(tag, context.into_stream(), &report),
    );
    let mut building = std::pin::pin!(building);
    let mut steps = Steps::default();
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flushes = 0u32;
    let outcome = loop {
        tokio::select! {
            biased;
            () = running.cancel.cancelled() => break Outcome::Cancelled,
            () = plane.shutdown_token().cancelled() => break Outcome::Interrupted,
            Some(update) = updates.recv() => {
                steps.see(&update);
                log.push(&line_of(update));
            }
            finished = &mut building => {
                // Updates sent before the end are still queued.
                while let Ok(update) = updates.try_recv() {
                    steps.see(&update);
                    log.push(&line_of(update));
                }
                break match finished {
                    Ok(Ok(())) => Outcome::Built,
                    Ok(Err(err)) => Outcome::Failed(steps.describe(&err.to_string())),
                    Err(_) => Outcome::Failed(steps.describe(&format!(
                        "the build took longer than {timeout} (defaults.build_timeout)"
                    ))),
                };
            }
            _ = flush.tick() => {
                log.flush().await;
                flushes += 1;
                if flushes.is_multiple_of(CHECK_EVERY_FLUSHES) && ended_elsewhere(plane, &log.build).await {
                    break Outcome::Cancelled;
                }
            }
        }
    };
    if matches!(outcome, Outcome::Cancelled | Outcome::Interrupted) {
        // Dropping the engine's build (below, with `building`) cancels it there.
        log.pending.clear();
    }
    outcome
}

/// Whether the record ended while the build ran (a cancel on another replica).
async fn ended_elsewhere(plane: &ControlPlane, build: &TemplateBuild) -> bool {
    matches!(
        plane.store().get_build(&build.template, &build.build_id).await,
        Ok(Some(record)) if record.status != BuildStatus::Running
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_its_step_and_quotes_its_output() {
        let mut steps = Steps::default();
        steps.see(&BuildUpdate::Step {
            step: 1,
            instruction: "FROM busybox".into(),
        });
        steps.see(&BuildUpdate::Output(" ---> 1234\n".into()));
        steps.see(&BuildUpdate::Step {
            step: 2,
            instruction: "RUN echo boom && exit 3".into(),
        });
        steps.see(&BuildUpdate::Output(" ---> Running in 99\nboom\n".into()));
        let error = steps
            .describe("The command '/bin/sh -c echo boom && exit 3' returned a non-zero code: 3");
        assert_eq!(
            error,
            "step 2 (RUN echo boom && exit 3) failed: The command '/bin/sh -c echo boom && exit 3' returned a non-zero code: 3; output: boom"
        );
    }
}
