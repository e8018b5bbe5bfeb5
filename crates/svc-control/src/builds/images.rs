//! Built images after their build: the template points at the newest, and older ones are
//! removed once nothing uses them (no template, no sandbox holding a runtime, no container:
//! the engine itself refuses to remove an image a container, a warm runtime say, still uses).
//! The store records which images this worker's builds made (`built_images`), so only those are
//! ever removed, from the engine that holds them.
//! A pass runs when a built image loses a user, and from the reaper while one is still used.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use svc_core::build::BUILT_IMAGE_PREFIX;
use svc_core::Error;
use svc_store::KeyPage;

use crate::ControlPlane;

impl ControlPlane {
    /// Points template `name` at `image` (its warm runtimes are replaced). False when the
    /// template is gone.
    pub(crate) async fn point_template_at(&self, name: &str, image: &str) -> Result<bool, Error> {
        let Some(mut template) = self.store().get_template(name).await? else {
            return Ok(false);
        };
        let previous = std::mem::replace(&mut template.image, image.to_owned());
        template.updated_at = self.clock().now();
        let updated = self.store().update_template(&template).await?.is_some();
        if updated {
            self.inner.warm.templates_changed();
            self.built_image_released(&previous);
        } else {
            self.built_image_released(image);
        }
        Ok(updated)
    }

    /// `image` lost a user (a template moved on or went, a sandbox ended): when it is a built
    /// image, a collection pass runs in the background.
    pub(crate) fn built_image_released(&self, image: &str) {
        if !image.starts_with(BUILT_IMAGE_PREFIX) {
            return;
        }
        self.owe_image_collection();
        let plane = self.clone();
        tokio::spawn(async move { plane.collect_built_images().await });
    }

    /// A built image may have lost its last user: the next collection pass runs.
    fn owe_image_collection(&self) {
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
        let Some(_collecting) = self.inner.builds.collecting_images().await else {
            // A build runs: the pass is owed to its end (run::run collects then).
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
        let built = match self.store().list_built_images(self.worker_id()).await {
            Ok(built) => built,
            Err(err) => {
                tracing::debug!(error = %err, "collecting built images: the store did not answer");
                self.owe_image_collection();
                return;
            }
        };
        if built.is_empty() {
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
        let mut in_use = false;
        for image in built.into_iter().filter(|image| !kept.contains(image)) {
            match builder.remove_image(&image).await {
                Ok(true) => {
                    tracing::info!(image = %image, "removed a built image nothing uses");
                    if let Err(err) = self.store().forget_built_image(&image).await {
                        tracing::warn!(image = %image, error = %err, "forgetting a removed built image failed");
                    }
                }
                Ok(false) => in_use = true,
                Err(err) => {
                    tracing::debug!(image = %image, error = %err, "removing a built image failed; retried later");
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
                .list_templates(&KeyPage::ALL, None)
                .await?
                .into_iter()
                .map(|t| t.image),
        );
        Ok(kept)
    }
}
