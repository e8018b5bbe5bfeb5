//! Pause and resume on the mock provider (decisions §7): its sandboxes are host processes, so a
//! pause stops (`SIGSTOP`) the process group of every command running in the sandbox and resume
//! continues them (`SIGCONT`); a command that starts while the sandbox is paused starts stopped.
//! Processes that left their command's group (a daemon that called `setsid`) are not reached:
//! the mock is for development, not isolation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use svc_core::SandboxId;
use svc_process::Control;

use crate::ProviderError;

/// The running commands of each sandbox, and which sandboxes are paused.
#[derive(Debug, Default)]
pub(super) struct Freezer {
    sandboxes: Mutex<BTreeMap<SandboxId, Sandbox>>,
}

#[derive(Debug, Default)]
struct Sandbox {
    paused: bool,
    commands: Vec<Weak<Control>>,
}

impl Freezer {
    /// Remembers a command started in `id`, stopping it at once when `id` is paused.
    pub(super) fn track(
        &self,
        id: &SandboxId,
        command: &Arc<Control>,
    ) -> Result<(), ProviderError> {
        let mut sandboxes = self
            .sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let sandbox = sandboxes.entry(id.clone()).or_default();
        sandbox.commands.retain(|c| c.strong_count() > 0);
        sandbox.commands.push(Arc::downgrade(command));
        if sandbox.paused {
            command.freeze(true)?;
        }
        Ok(())
    }

    /// Pauses (`true`) or resumes every command of `id`; either is idempotent.
    pub(super) fn set(&self, id: &SandboxId, paused: bool) -> Result<(), ProviderError> {
        let mut sandboxes = self
            .sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let sandbox = sandboxes.entry(id.clone()).or_default();
        sandbox.paused = paused;
        sandbox.commands.retain(|c| c.strong_count() > 0);
        for command in sandbox.commands.iter().filter_map(Weak::upgrade) {
            command.freeze(paused)?;
        }
        Ok(())
    }

    /// Forgets a destroyed sandbox; its commands are killed by whoever destroys it, and a
    /// stopped process dies of `SIGKILL` all the same.
    pub(super) fn forget(&self, id: &SandboxId) {
        self.sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }
}
