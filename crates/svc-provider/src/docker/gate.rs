//! Keeps a container's pauses apart from its exec starts. On cgroup v1 engines (checked on
//! Engine 20.10, containerd 1.6, runc 1.1) a pause that lands while `runc exec` is still
//! putting an exec's process into the container freezes that half-started process: the shim
//! waits on it, every later call on the container (unpause, inspect, remove) waits on the shim,
//! and the freezer stays `FROZEN` for good. The engine answers an attached exec start before
//! that process runs, so "the start call returned" is not enough: a pause first waits, under
//! the gate, until every exec it knows of has a process (or ended), and no exec starts while a
//! pause or resume is under way or the container is paused.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bollard::Docker;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::errors::engine_error;
use crate::ProviderError;

/// How long a pause waits for an exec's process to appear.
const EXEC_START_WAIT: Duration = Duration::from_secs(10);

/// Every container's gate, by container name.
#[derive(Debug, Default)]
pub(super) struct Gates {
    by_container: Mutex<HashMap<String, Arc<Gate>>>,
}

/// One container's gate.
#[derive(Debug, Default)]
pub(super) struct Gate {
    /// Read: an exec start. Write: a pause or resume. The value: whether it is paused.
    paused: RwLock<bool>,
    /// Execs started and not yet seen with a process (or ended).
    starting: Mutex<HashSet<String>>,
}

impl Gates {
    pub(super) fn of(&self, container: &str) -> Arc<Gate> {
        let mut gates = self
            .by_container
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(gates.entry(container.to_owned()).or_default())
    }

    /// Forgets a removed container (or the old name of a renamed one).
    pub(super) fn forget(&self, container: &str) {
        self.by_container
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(container);
    }
}

impl Gate {
    /// Holds off pauses while an exec starts; refused while the container is paused.
    pub(super) async fn exec_start(&self) -> Result<RwLockReadGuard<'_, bool>, ProviderError> {
        let guard = self.paused.read().await;
        if *guard {
            return Err(ProviderError::InvalidRequest {
                message: "the sandbox is paused".to_owned(),
            });
        }
        Ok(guard)
    }

    /// Refused while the container is paused: a frozen agent would never answer.
    pub(super) async fn unpaused(&self) -> Result<(), ProviderError> {
        self.exec_start().await.map(drop)
    }

    /// An exec whose start was asked for.
    pub(super) fn started(&self, exec_id: &str) {
        self.starting_set().insert(exec_id.to_owned());
    }

    /// An exec seen with its process, or ended: past the danger.
    pub(super) fn settled(&self, exec_id: &str) {
        self.starting_set().remove(exec_id);
    }

    fn starting_set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.starting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the gate for a pause or resume: no exec start is in flight once it returns.
    pub(super) async fn change(&self) -> RwLockWriteGuard<'_, bool> {
        self.paused.write().await
    }

    /// Waits until every exec still starting has its process (or has ended), so a freeze
    /// cannot catch one half-started. Call with the gate taken by [`Gate::change`].
    pub(super) async fn settle_execs(&self, docker: &Docker) -> Result<(), ProviderError> {
        let starting: Vec<String> = self.starting_set().iter().cloned().collect();
        let deadline = tokio::time::Instant::now() + EXEC_START_WAIT;
        for exec_id in starting {
            let mut pause = Duration::from_millis(2);
            loop {
                let inspect = match docker.inspect_exec(&exec_id).await {
                    Ok(inspect) => inspect,
                    Err(err) if super::errors::status_of(&err) == Some(404) => {
                        self.settled(&exec_id);
                        break;
                    }
                    Err(err) => return Err(engine_error("inspecting an exec before pausing", err)),
                };
                let ended = inspect.exit_code.is_some() && inspect.running != Some(true);
                let running = inspect.running == Some(true) && inspect.pid.is_some_and(|p| p > 0);
                if ended || running {
                    self.settled(&exec_id);
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(ProviderError::failed(
                        "an exec was still starting; the sandbox was not paused (try again)",
                    ));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}
