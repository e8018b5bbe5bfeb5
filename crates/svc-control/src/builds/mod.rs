//! Template builds (decisions §17): a Dockerfile and its context become an image through the
//! Docker engine, in the background with bounded concurrency; on success the template points
//! at it. Each build is a store record plus its NDJSON log lines (appended in batches), so any
//! replica can list, follow and cancel it; the replica that runs it holds its cancel token.

mod context;
mod images;
mod run;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use svc_core::access::Action;
use svc_core::build::{BuildAccepted, BuildLogLine, BuildStatus, TemplateBuild};
use svc_core::error::Resource;
use svc_core::event::{BuildEventData, EventPayload};
use svc_core::template::Template;
use svc_core::{BuildId, Error};
use svc_store::BuildEnding;
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;

pub use context::BuildInput;

use crate::{ControlPlane, Principal};

/// Ended builds kept per template (older ones go with their logs).
const KEPT_BUILDS: u32 = 50;
/// Log lines read per store query while streaming.
const LOG_PAGE: u32 = 500;
/// How long a follower waits for more lines once the build has ended without a result line
/// (its runner died with its replica).
const ENDED_GRACE: Duration = Duration::from_secs(2);
/// How often a follower of a build running on another replica looks for new lines.
const REMOTE_POLL: Duration = Duration::from_millis(250);

/// The builds this replica runs.
pub(crate) struct Builds {
    slots: Arc<Semaphore>,
    running: Mutex<HashMap<BuildId, Arc<RunningBuild>>>,
    /// Set when a built image may have lost its last user: the next collection pass runs.
    collection_owed: std::sync::atomic::AtomicBool,
    /// The engine's image cache: a running build reads it (any image, unused or not, may be
    /// the cache of one of its steps), and a collection pass writes it (removing an image
    /// removes its untagged parents, which a build may just have taken as a step's cache,
    /// failing it with "unable to find image"). While builds run here a pass leaves the debt
    /// to the last build's end; a build that starts anyway waits for the pass, and so does a
    /// second pass.
    images: tokio::sync::RwLock<()>,
}

/// One build running here.
struct RunningBuild {
    cancel: CancellationToken,
    /// Bumped after each batch of log lines is stored, to wake local followers.
    appended: watch::Sender<u64>,
}

impl Builds {
    pub(crate) fn new(concurrency: u32) -> Self {
        Builds {
            slots: Arc::new(Semaphore::new(concurrency.max(1) as usize)),
            running: Mutex::default(),
            // Once at start-up: a restart may have left images behind.
            collection_owed: std::sync::atomic::AtomicBool::new(true),
            images: tokio::sync::RwLock::new(()),
        }
    }

    /// Held by a build from its start to its end.
    async fn using_images(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.images.read().await
    }

    /// Held by a collection pass; `None` while any build runs here (the last one's end runs
    /// the pass instead).
    async fn collecting_images(&self) -> Option<tokio::sync::RwLockWriteGuard<'_, ()>> {
        if self.any_running() {
            return None;
        }
        Some(self.images.write().await)
    }

    fn any_running(&self) -> bool {
        !self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    fn register(&self, id: &BuildId) -> Arc<RunningBuild> {
        let running = Arc::new(RunningBuild {
            cancel: CancellationToken::new(),
            appended: watch::channel(0).0,
        });
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), Arc::clone(&running));
        running
    }

    fn forget(&self, id: &BuildId) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    fn get(&self, id: &BuildId) -> Option<Arc<RunningBuild>> {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }
}

fn build_event(build: &TemplateBuild) -> BuildEventData {
    BuildEventData {
        template: build.template.clone(),
        build_id: build.build_id.to_string(),
        image: build.image.clone(),
        error: build.error.clone(),
    }
}

fn encode(line: &BuildLogLine) -> String {
    // Every line is a tagged struct of strings and numbers.
    serde_json::to_string(line).unwrap_or_default()
}

impl ControlPlane {
    /// `POST /templates/{name}/build`: checks the context, records the build (202) and runs it
    /// in the background.
    pub async fn start_build(
        &self,
        principal: &Principal,
        name: &str,
        input: BuildInput,
    ) -> Result<BuildAccepted, Error> {
        self.authorize(principal, Action::WriteTemplates)?;
        // A build repoints the template's image: a change like a replace.
        let template = self.writable_template(principal, name).await?;
        let builder = self
            .inner
            .builder
            .clone()
            .ok_or_else(|| Error::NotConfigured {
                what: "template builds (the Docker engine)".to_owned(),
                key: "providers.docker.socket",
            })?;
        let context = context::prepare(input, self.config().server.max_upload_bytes).await?;
        let build = TemplateBuild {
            build_id: BuildId::generate(),
            template: template.name,
            status: BuildStatus::Running,
            image: None,
            started_at: self.clock().now(),
            ended_at: None,
            error: None,
        };
        self.store().insert_build(&build, self.worker_id()).await?;
        self.events().publish(
            None,
            EventPayload::TemplateBuildStarted(build_event(&build)),
        );
        let running = self.inner.builds.register(&build.build_id);
        // The slot is taken here, in the order builds are accepted, not when the spawned task
        // happens to run: a build accepted later never overtakes one that waits, and one that
        // must wait says so from its first log line.
        let slot = Arc::clone(&self.inner.builds.slots)
            .try_acquire_owned()
            .ok();
        tokio::spawn(run::run(
            self.clone(),
            builder,
            build.clone(),
            context,
            running,
            slot,
        ));
        tracing::info!(template = %build.template, build_id = %build.build_id, "template build started");
        Ok(BuildAccepted {
            build_id: build.build_id,
            status: BuildStatus::Running,
        })
    }

    /// `GET /templates/{name}/builds`: newest first.
    pub async fn list_builds(
        &self,
        principal: &Principal,
        name: &str,
    ) -> Result<Vec<TemplateBuild>, Error> {
        self.authorize(principal, Action::ReadTemplates)?;
        let template = self.visible_template(principal, name).await?;
        // Ended builds are trimmed to KEPT_BUILDS; running ones are bounded by the slots.
        Ok(self
            .store()
            .list_builds(&template.name, KEPT_BUILDS * 2)
            .await?)
    }

    /// `GET /templates/{name}/builds/{build_id}`.
    pub async fn get_build(
        &self,
        principal: &Principal,
        name: &str,
        build_id: &BuildId,
    ) -> Result<TemplateBuild, Error> {
        self.authorize(principal, Action::ReadTemplates)?;
        let template = self.visible_template(principal, name).await?;
        self.build_of(&template, build_id).await
    }

    /// Build `build_id` of `template` (read as its caller may see or change it), or 404.
    async fn build_of(
        &self,
        template: &Template,
        build_id: &BuildId,
    ) -> Result<TemplateBuild, Error> {
        self.store()
            .get_build(&template.name, build_id)
            .await?
            .ok_or_else(|| Error::not_found(Resource::Build, build_id.as_str()))
    }

    /// `DELETE /templates/{name}/builds/{build_id}`: cancels a running build (the record
    /// ends at once; the replica running it stops the engine's build).
    pub async fn cancel_build(
        &self,
        principal: &Principal,
        name: &str,
        build_id: &BuildId,
    ) -> Result<TemplateBuild, Error> {
        self.authorize(principal, Action::WriteTemplates)?;
        let template = self.writable_template(principal, name).await?;
        let build = self.build_of(&template, build_id).await?;
        let ending = BuildEnding {
            status: BuildStatus::Cancelled,
            image: None,
            error: Some("cancelled".to_owned()),
            at: self.clock().now(),
        };
        let Some(cancelled) = self
            .store()
            .end_build(&build.build_id, &ending, KEPT_BUILDS)
            .await?
        else {
            let ended = self.build_of(&template, build_id).await?;
            return Err(Error::BuildEnded {
                id: build_id.to_string(),
                status: ended.status.as_str(),
            });
        };
        self.events().publish(
            None,
            EventPayload::TemplateBuildFailed(build_event(&cancelled)),
        );
        if let Some(running) = self.inner.builds.get(&build.build_id) {
            running.cancel.cancel();
        }
        tracing::info!(template = %cancelled.template, build_id = %cancelled.build_id, "template build cancelled");
        Ok(cancelled)
    }

    /// `GET /templates/{name}/builds/{build_id}/logs`: the log as NDJSON; with `follow`, new
    /// lines as they come until the result line.
    pub async fn build_logs(
        &self,
        principal: &Principal,
        name: &str,
        build_id: &BuildId,
        follow: bool,
    ) -> Result<impl Stream<Item = Bytes> + Send + 'static, Error> {
        self.authorize(principal, Action::ReadTemplates)?;
        let template = self.visible_template(principal, name).await?;
        let build = self.build_of(&template, build_id).await?;
        let plane = self.clone();
        Ok(log_stream(plane, build, follow))
    }

    /// Fails the builds this replica was running when it stopped: nothing runs them now.
    pub async fn recover_builds(&self) -> Result<usize, Error> {
        let running = self.store().list_running_builds(self.worker_id()).await?;
        let mut failed = 0;
        for build in running {
            let message = "svc restarted during the build".to_owned();
            if self
                .end_build_as(&build, BuildStatus::Failed, None, Some(message))
                .await
                .is_some()
            {
                failed += 1;
            }
        }
        if failed > 0 {
            tracing::warn!(
                count = failed,
                "template builds interrupted by a restart were marked failed"
            );
        }
        Ok(failed)
    }

    /// Ends `build` (one caller wins: `None` when it had already ended), points its template
    /// at the image on success, then stores the result line and publishes the event: whoever
    /// sees the result sees the template as it now is.
    async fn end_build_as(
        &self,
        build: &TemplateBuild,
        status: BuildStatus,
        image: Option<String>,
        error: Option<String>,
    ) -> Option<TemplateBuild> {
        let ending = BuildEnding {
            status,
            image: image.clone(),
            error: error.clone(),
            at: self.clock().now(),
        };
        let ended = match self
            .store()
            .end_build(&build.build_id, &ending, KEPT_BUILDS)
            .await
        {
            Ok(Some(ended)) => ended,
            Ok(None) => {
                // Cancelled at the last moment: the image it made is nobody's.
                if let (Some(image), Some(builder)) = (image, self.inner.builder.clone()) {
                    tokio::spawn(async move {
                        if let Err(err) = builder.remove_image(&image).await {
                            tracing::warn!(image = %image, error = %err, "removing the image of a cancelled build failed");
                        }
                    });
                }
                return None;
            }
            Err(err) => {
                tracing::error!(build_id = %build.build_id, error = %err, "ending a build failed; a restart marks it failed");
                return None;
            }
        };
        if let Some(image) = &image {
            match self.point_template_at(&ended.template, image).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(template = %ended.template, build_id = %ended.build_id, "the template was deleted during its build; its image is collected");
                }
                Err(err) => {
                    tracing::error!(template = %ended.template, build_id = %ended.build_id, error = %err, "pointing the template at its built image failed");
                }
            }
        }
        let line = encode(&BuildLogLine::Result {
            status,
            image,
            error,
        });
        if let Err(err) = self
            .store()
            .append_build_log(&build.build_id, &[line])
            .await
        {
            tracing::warn!(build_id = %build.build_id, error = %err, "storing a build's result line failed");
        }
        let payload = if status == BuildStatus::Succeeded {
            EventPayload::TemplateBuildSucceeded(build_event(&ended))
        } else {
            EventPayload::TemplateBuildFailed(build_event(&ended))
        };
        self.events().publish(None, payload);
        Some(ended)
    }
}

/// The log of `build` as NDJSON chunks, following it while it runs when `follow`.
fn log_stream(
    plane: ControlPlane,
    build: TemplateBuild,
    follow: bool,
) -> impl Stream<Item = Bytes> + Send + 'static {
    struct Reader {
        plane: ControlPlane,
        build: TemplateBuild,
        follow: bool,
        after: i64,
        done: bool,
        /// When the record was first seen ended with no result line yet.
        ended_at: Option<tokio::time::Instant>,
        wake: Option<watch::Receiver<u64>>,
    }
    let wake = plane
        .inner
        .builds
        .get(&build.build_id)
        .map(|running| running.appended.subscribe());
    let reader = Reader {
        plane,
        build,
        follow,
        after: 0,
        done: false,
        ended_at: None,
        wake,
    };
    futures::stream::unfold(reader, |mut r| async move {
        loop {
            if r.done {
                return None;
            }
            let lines = match r
                .plane
                .store()
                .build_log_after(&r.build.build_id, r.after, LOG_PAGE)
                .await
            {
                Ok(lines) => lines,
                Err(err) => {
                    tracing::warn!(build_id = %r.build.build_id, error = %err, "reading a build's log failed");
                    return None;
                }
            };
            if !lines.is_empty() {
                let mut chunk = String::new();
                for (seq, line) in &lines {
                    r.after = *seq;
                    chunk.push_str(line);
                    chunk.push('\n');
                    if line.starts_with(r#"{"type":"result""#) {
                        r.done = true;
                        break;
                    }
                }
                return Some((Bytes::from(chunk), r));
            }
            if !r.follow {
                return None;
            }
            // Nothing new: has it ended?
            let status = r
                .plane
                .store()
                .get_build(&r.build.template, &r.build.build_id)
                .await
                .ok()
                .flatten()
                .map(|b| b.status);
            if status != Some(BuildStatus::Running) {
                let since = *r.ended_at.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= ENDED_GRACE {
                    return None;
                }
            }
            let closed = match &mut r.wake {
                Some(wake) => tokio::time::timeout(REMOTE_POLL * 4, wake.changed())
                    .await
                    .is_ok_and(|changed| changed.is_err()),
                None => {
                    tokio::time::sleep(REMOTE_POLL).await;
                    false
                }
            };
            if closed {
                // The runner is done; its last lines are stored.
                r.wake = None;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_collection_runs_while_a_build_uses_the_image_cache() {
        use futures::FutureExt as _;
        let builds = Builds::new(2);
        let (one, two) = (BuildId::generate(), BuildId::generate());
        builds.register(&one);
        builds.register(&two);
        assert!(builds.collecting_images().await.is_none(), "two builds run");
        builds.forget(&one);
        assert!(builds.collecting_images().await.is_none(), "one build runs");
        builds.forget(&two);
        let pass = builds.collecting_images().await;
        assert!(pass.is_some(), "no build runs");
        // A build that starts during a pass, and a second pass, wait for its end.
        assert!(builds.using_images().now_or_never().is_none());
        assert!(builds.collecting_images().now_or_never().is_none());
        drop(pass);
        let using = builds.using_images().now_or_never();
        assert!(using.is_some(), "the pass is over");
        assert!(
            builds.collecting_images().now_or_never().is_none(),
            "a build holds the cache"
        );
    }
}
