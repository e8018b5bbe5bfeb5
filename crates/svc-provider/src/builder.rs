//! Building images from a Dockerfile (template builds, decisions §17). Builds always go through
//! the Docker engine, whatever provider a template spawns on; microVM providers then make root
//! filesystems from the built image like from any other.

use async_trait::async_trait;

use crate::{ByteStream, ProviderError};

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
    /// `tag`, calling `report` for each step, output and pull progress as it comes. A failing
    /// step is [`ProviderError::Failed`] with the engine's message. Dropping the future cancels
    /// the build.
    async fn build(
        &self,
        tag: &str,
        context: ByteStream,
        report: &(dyn Fn(BuildUpdate) + Send + Sync),
    ) -> Result<(), ProviderError>;

    /// Removes the tag `image`, unless a container (running or not) uses the image: then it
    /// stays and the answer is `false`. A tag that is already gone is `true`.
    async fn remove_image(&self, image: &str) -> Result<bool, ProviderError>;
}
