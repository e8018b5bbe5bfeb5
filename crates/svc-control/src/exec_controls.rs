//! The controls of a running command (stdin, terminal size, signals, kill) as the API and the
//! E2B listener use them: through the control plane, so that a provider's failure is classified
//! like that of any other call on the sandbox (a refused input is 400, a failing backend 500
//! with `operation.failed`).

use std::sync::Arc;

use bytes::Bytes;
use svc_core::{Error, SandboxId};
use svc_provider::{ExecControl, ProviderError, Signal, TtySize};

use crate::ControlPlane;

/// A running command's controls.
#[derive(Clone)]
pub struct ExecControls {
    control: Arc<dyn ExecControl>,
    plane: ControlPlane,
    sandbox_id: SandboxId,
    provider: String,
}

impl ExecControls {
    pub(crate) fn new(
        control: Arc<dyn ExecControl>,
        plane: ControlPlane,
        sandbox_id: SandboxId,
        provider: &str,
    ) -> Self {
        ExecControls {
            control,
            plane,
            sandbox_id,
            provider: provider.to_owned(),
        }
    }

    fn classified(&self, operation: &str, result: Result<(), ProviderError>) -> Result<(), Error> {
        result.map_err(|err| {
            self.plane
                .provider_failure(Some(&self.sandbox_id), &self.provider, operation, err)
        })
    }

    /// Writes to the command's stdin.
    pub async fn write_stdin(&self, data: Bytes) -> Result<(), Error> {
        let result = self.control.write_stdin(data).await;
        self.classified("write stdin", result)
    }

    /// Closes the command's stdin.
    pub async fn close_stdin(&self) -> Result<(), Error> {
        let result = self.control.close_stdin().await;
        self.classified("close stdin", result)
    }

    /// Changes the terminal's size.
    pub async fn resize(&self, size: TtySize) -> Result<(), Error> {
        let result = self.control.resize(size).await;
        self.classified("resize", result)
    }

    /// Sends a signal.
    pub async fn signal(&self, signal: Signal) -> Result<(), Error> {
        let result = self.control.signal(signal).await;
        self.classified("signal", result)
    }

    /// Kills the command.
    pub async fn kill(&self) -> Result<(), Error> {
        let result = self.control.kill().await;
        self.classified("kill", result)
    }
}
