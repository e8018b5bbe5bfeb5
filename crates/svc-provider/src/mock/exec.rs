//! Exec on the mock provider: a host process (`svc-process`) in the sandbox directory, with
//! the sandbox directory as `HOME`.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{FutureExt, TryFutureExt};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use crate::{ExecControl, ExecSession, ExecSpec, ProviderError, Signal, TtySize};

struct MockControl(Arc<svc_process::Control>);

#[async_trait]
impl ExecControl for MockControl {
    async fn write_stdin(&self, data: Bytes) -> Result<(), ProviderError> {
        Ok(self.0.write_stdin(&data).await?)
    }

    async fn close_stdin(&self) -> Result<(), ProviderError> {
        self.0.close_stdin().await;
        Ok(())
    }

    async fn resize(&self, size: TtySize) -> Result<(), ProviderError> {
        Ok(self.0.resize(size).await?)
    }

    async fn signal(&self, signal: Signal) -> Result<(), ProviderError> {
        Ok(self.0.signal(signal)?)
    }

    async fn kill(&self) -> Result<(), ProviderError> {
        Ok(self.0.kill()?)
    }
}

/// Starts `spec` with `workdir` (a host directory inside the sandbox) as working directory and
/// `home` as `HOME`; also hands back the process's control, which pause and resume signal.
pub(super) fn start(
    home: &Path,
    workdir: &Path,
    spec: &ExecSpec,
) -> Result<(ExecSession, Arc<svc_process::Control>), ProviderError> {
    let process = svc_process::spawn(&svc_process::Command {
        argv: spec.argv.clone(),
        env: svc_process::environment(
            home,
            spec.tty.is_some(),
            spec.env.iter().map(|(k, v)| (k.clone(), v.clone())),
        ),
        workdir: workdir.to_path_buf(),
        tty: spec.tty,
        stdin: spec.stdin,
        user: spec.user.as_ref().map(|user| (user.uid, user.gid)),
    })?;
    let session = ExecSession {
        output: Box::pin(ReceiverStream::new(process.output).map(Ok)),
        control: Arc::new(MockControl(Arc::clone(&process.control))),
        exit: process.exit.map_err(ProviderError::from).boxed(),
    };
    Ok((session, process.control))
}
