//! Template builds on the engine's build API (the classic builder, no CLI): the context streams
//! to the engine, and its progress messages become [`BuildUpdate`]s.

use async_trait::async_trait;
use bollard::query_parameters::{BuildImageOptions, RemoveImageOptions};
use futures::StreamExt;

use super::errors::{engine_error, status_of};
use super::DockerProvider;
use crate::builder::{BuildUpdate, ImageBuilder};
use crate::pull::PullTally;
use crate::{ByteStream, ProviderError};

/// `Step 2/5 : RUN make` → `(2, "RUN make")`.
fn step_line(line: &str) -> Option<(u32, String)> {
    let rest = line.strip_prefix("Step ")?;
    let (numbers, instruction) = rest.split_once(" : ")?;
    let step = numbers.split('/').next()?.parse().ok()?;
    Some((step, instruction.trim_end().to_owned()))
}

#[async_trait]
impl ImageBuilder for DockerProvider {
    async fn build(
        &self,
        tag: &str,
        context: ByteStream,
        report: &(dyn Fn(BuildUpdate) + Send + Sync),
    ) -> Result<(), ProviderError> {
        let docker = self.client().await?;
        let options = BuildImageOptions {
            dockerfile: "Dockerfile".to_owned(),
            t: Some(tag.to_owned()),
            rm: true,
            forcerm: true,
            ..Default::default()
        };
        // A context that fails to read (a refused entry) ends the upload with an error, which
        // fails the build instead of building what came before it.
        let body = context.map(|chunk| chunk.map_err(std::io::Error::other));
        let mut stream = docker.build_image(options, None, Some(bollard::body_try_stream(body)));
        let mut pulls = PullTally::default();
        while let Some(message) = stream.next().await {
            let message = message.map_err(|err| match err {
                bollard::errors::Error::DockerStreamError { error } => {
                    ProviderError::failed(error.trim_end().to_owned())
                }
                err => engine_error("building the image", err),
            })?;
            if let Some(text) = message.stream.filter(|t| !t.is_empty()) {
                match step_line(&text) {
                    Some((step, instruction)) => report(BuildUpdate::Step { step, instruction }),
                    None => report(BuildUpdate::Output(text)),
                }
            } else if let Some(status) = message.status {
                let detail = message.progress_detail.unwrap_or_default();
                if pulls.update(
                    message.id.as_deref(),
                    Some(&status),
                    detail.current,
                    detail.total,
                ) {
                    let (current_bytes, total_bytes) = pulls.totals();
                    report(BuildUpdate::Progress {
                        current_bytes,
                        total_bytes,
                    });
                } else if message.id.is_none() {
                    report(BuildUpdate::Output(format!("{status}\n")));
                }
            }
        }
        Ok(())
    }

    async fn remove_image(&self, image: &str) -> Result<bool, ProviderError> {
        let docker = self.client().await?;
        // Never forced: the engine refuses (409) while a container uses the image. Its untagged
        // parents stay (`noprune`): they are the classic builder's cache, and a build running
        // at this moment may have just taken one of them for a step of its own, which then
        // fails with "unable to find image" if they go. `docker image prune` reclaims them.
        let options = RemoveImageOptions {
            noprune: true,
            ..Default::default()
        };
        match docker.remove_image(image, Some(options), None).await {
            Ok(_) => Ok(true),
            Err(err) if status_of(&err) == Some(404) => Ok(true),
            Err(err) if status_of(&err) == Some(409) => Ok(false),
            Err(err) => Err(engine_error(&format!("removing image {image}"), err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_read_from_the_engines_lines() {
        assert_eq!(
            step_line("Step 2/5 : RUN echo hi && exit 3\n"),
            Some((2, "RUN echo hi && exit 3".to_owned()))
        );
        assert_eq!(step_line(" ---> Running in 1234\n"), None);
        assert_eq!(step_line("Step x/5 : RUN\n"), None);
    }
}
