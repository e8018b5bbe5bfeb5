//! Building images from a Dockerfile (template builds, decisions §17). Builds always go through
//! the Docker engine, whatever provider a template spawns on; microVM providers then make root
//! filesystems from the built image like from any other.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::{ByteStream, ProviderError};

/// Label on a built image: the installation (database) that built it. Not a runtime label:
/// containers inherit their image's labels, and must not look like svc's runtimes for it.
pub const LABEL_BUILT_BY: &str = "dev.svc.built_by";
/// Label on a built image: the template it was built for.
pub const LABEL_BUILT_FOR: &str = "dev.svc.built_for";

/// What a build reports while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildUpdate {
    /// Instruction `step` (1-based) starts.
    Step {
        /// Its number.
        step: u32,
        /// The instruction as the engine prints it (`RUN make`).
        instruction: String,
    },
    /// Output of the current step.
    Output(String),
    /// Bytes pulled so far for a base image.
    Progress {
        /// Pulled.
        current_bytes: u64,
        /// Known total.
        total_bytes: u64,
    },
}

/// Builds and removes images.
#[async_trait]
pub trait ImageBuilder: Send + Sync + 'static {
    /// Builds the `Dockerfile` at the root of `context` (a tar stream) and tags the image
    /// `tag`, with `labels`, calling `report` for each step, output and pull progress as it comes. A failing
    /// step is [`ProviderError::Failed`] with the engine's message. Dropping the future cancels
    /// the build.
    async fn build(
        &self,
        tag: &str,
        labels: &BTreeMap<String, String>,
        context: ByteStream,
        report: &(dyn Fn(BuildUpdate) + Send + Sync),
    ) -> Result<(), ProviderError>;

    /// Every tag in a repository whose name starts with `prefix` (`svc-templates/`), of the
    /// images carrying label `key` = `value` (the installation that built them: other
    /// installations on the same engine keep theirs).
    async fn tagged_images(
        &self,
        prefix: &str,
        (key, value): (&str, &str),
    ) -> Result<Vec<String>, ProviderError>;

    /// Removes the tag `image`, unless a container (running or not) uses the image: then it
    /// stays and the answer is `false`. A tag that is already gone is `true`.
    async fn remove_image(&self, image: &str) -> Result<bool, ProviderError>;
}
