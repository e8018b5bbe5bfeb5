//! Built images after their build: the template points at the newest, and older ones are
//! removed once nothing uses them (no template, no sandbox holding a runtime, no container:
//! the engine itself refuses to remove an image a container, a warm runtime say, still uses).

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use svc_core::Error;
use svc_store::KeyPage;

use crate::ControlPlane;

/// The prefix of every built image's repository.
const BUILT: &str = "svc-templates/";

impl ControlPlane {
    /// Points template `name` at `image` (its warm runtimes are replaced). False when the
    /// template is gone.
    pub(crate) async fn point_template_at(&self, name: &str, image: &str) -> Result<bool, Error> {
        let Some(mut template) = self.store().get_template(name).await? else {
            return Ok(false);
        };
        template.image = image.to_owned();
        template.updated_at = self.clock().now();
        let updated = self.store().update_template(&template).await?.is_some();
        if updated {
            self.inner.warm.templates_changed();
        }
        self.owe_image_collection();
        Ok(updated)
    }

    /// A built image may have lost its last user (its template moved on or went).
    pub(crate) fn owe_image_collection(&self) {
        self.inner
            .builds
            .collection_owed
            .store(true, Ordering::Relaxed);
    }

    /// Removes built images nothing uses, when a change may have freed one; images still in
    /// use keep the debt, so a later pass (the reaper's) tries again.
    pub(crate) async fn collect_built_images(&self) {
        let Some(builder) = self.inner.builder.clone() else {
            return;
        };
        if !self
            .inner
            .builds
            .collection_owed
            .swap(false, Ordering::Relaxed)
        {
            return;
        }
        let kept = match self.images_in_use().await {
            Ok(kept) => kept,
            Err(err) => {
                tracing::debug!(error = %err, "collecting built images: the store did not answer");
                self.owe_image_collection();
                return;
            }
        };
        let tags = match builder.tagged_images(BUILT).await {
            Ok(tags) => tags,
            Err(err) => {
                tracing::debug!(error = %err, "collecting built images: the engine did not answer");
                return;
            }
        };
        let mut in_use = false;
        for tag in tags {
            let build_id = tag.rsplit(':').next().unwrap_or_default();
            // A build that just tagged its image has not pointed its template yet.
            if kept.contains(&tag) || self.inner.builds.is_running(build_id) {
                continue;
            }
            match builder.remove_image(&tag).await {
                Ok(true) => tracing::info!(image = %tag, "removed a built image nothing uses"),
                Ok(false) => in_use = true,
                Err(err) => {
                    tracing::warn!(image = %tag, error = %err, "removing a built image failed");
                    in_use = true;
                }
            }
        }
        if in_use {
            self.owe_image_collection();
        }
    }

    /// Images templates point at and sandboxes run.
    async fn images_in_use(&self) -> Result<HashSet<String>, Error> {
        let mut kept: HashSet<String> = self.store().active_images().await?.into_iter().collect();
        kept.extend(
            self.store()
                .list_templates(&KeyPage::ALL)
                .await?
                .into_iter()
                .map(|t| t.image),
        );
        Ok(kept)
    }
}
