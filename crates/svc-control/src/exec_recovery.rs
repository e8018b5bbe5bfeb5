//! Exec records across restarts (decisions §8). Every record is saved to the store when its
//! exec starts and when it ends, by one background writer in order, so no exec waits on the
//! store. At start-up the records of this worker's running sandboxes come back: ended ones as
//! they were; running ones are looked up by the provider's handle on the command (a docker exec
//! ID), still running (and still signalled and killed through the exec routes, then followed
//! to their exit code) or ended with their exit code. What cannot be followed is marked in the
//! record's `detail`, never dropped. Output is not saved: a recovered exec's earlier output is
//! reported lost.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use svc_core::access::Action;
use svc_core::exec::{exit_code_on_wire, ExecRecord, ExecStatus};
use svc_core::sandbox::SandboxState;
use svc_core::{Capability, Error, SandboxId};
use svc_provider::{ExecState, Provider};
use svc_store::{SandboxFilter, StateFilter, Store, StoredExec};
use tokio::sync::mpsc;

use crate::exec_jobs::{Job, KEPT_ENDED};
use crate::{ControlPlane, Principal};

/// How often a recovered running exec is looked up until it ends.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Forgotten sandboxes remembered by the writer (so a late save cannot bring their records
/// back); IDs are never reused, and the set is cleared past this size.
const FORGOTTEN_REMEMBERED: usize = 10_000;

const STILL_RUNNING: &str = "svc restarted while this exec ran; it runs on, but its output \
     since the restart is not kept and its stdin is closed";
const ENDED_UNSEEN: &str = "this exec ended while svc was restarting; its last output and the \
     exact time it ended are not known";
const NOT_FOLLOWABLE: &str = "svc restarted while this exec ran; on this provider a command \
     does not outlive svc, so how it ended is not known";
const GONE: &str = "svc restarted while this exec ran and its provider no longer knows it; how \
     it ended is not known";

enum SaveOp {
    Save(StoredExec),
    Forget(SandboxId),
    /// Answered once everything sent before it is written.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Hands records to the writer.
#[derive(Clone)]
pub(crate) struct Saver(mpsc::UnboundedSender<SaveOp>);

impl Saver {
    /// Starts the writer on `store`.
    fn start(store: Arc<dyn Store>) -> Self {
        let (sender, mut receiver) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut forgotten = HashSet::new();
            while let Some(op) = receiver.recv().await {
                let (what, result) = match op {
                    SaveOp::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                    SaveOp::Save(exec) if forgotten.contains(&exec.sandbox_id) => continue,
                    SaveOp::Save(exec) => (
                        "saving an exec record",
                        store.save_exec(&exec, KEPT_ENDED as u32).await.map(drop),
                    ),
                    SaveOp::Forget(sandbox) => {
                        if forgotten.len() >= FORGOTTEN_REMEMBERED {
                            forgotten.clear();
                        }
                        let result = store.delete_execs(&sandbox).await.map(drop);
                        forgotten.insert(sandbox);
                        ("forgetting exec records", result)
                    }
                };
                if let Err(err) = result {
                    tracing::warn!(error = %err, "{what} failed");
                }
            }
        });
        Saver(sender)
    }

    pub(crate) fn save(&self, job: &Job) {
        let _ = self.0.send(SaveOp::Save(job.stored()));
    }

    pub(crate) fn forget(&self, sandbox: &SandboxId) {
        let _ = self.0.send(SaveOp::Forget(sandbox.clone()));
    }

    /// Waits until everything handed over so far is written.
    pub(crate) async fn flush(&self) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.0.send(SaveOp::Flush(done)).is_ok() {
            let _ = written.await;
        }
    }
}

impl ControlPlane {
    /// Starts saving exec records and brings back those of this worker's running sandboxes;
    /// call once at start-up, after [`ControlPlane::recover_interrupted_spawns`], as
    /// [`Principal::system`]. Answers how many came back.
    pub async fn recover_execs(&self, principal: &Principal) -> Result<usize, Error> {
        self.authorize(principal, Action::Reconcile)?;
        self.inner
            .exec_jobs
            .save_with(Saver::start(Arc::clone(self.store())));
        let stored = self.store().list_execs_on_worker(self.worker_id()).await?;
        if stored.is_empty() {
            return Ok(0);
        }
        let filter = SandboxFilter {
            state: StateFilter::Only(SandboxState::Running),
            worker_id: Some(self.worker_id().to_owned()),
            ..SandboxFilter::default()
        };
        let providers: HashMap<SandboxId, String> = self
            .store()
            .list_sandboxes(&filter)
            .await?
            .into_iter()
            .map(|sandbox| (sandbox.id, sandbox.provider))
            .collect();
        let mut recovered = 0;
        for exec in stored {
            let record: ExecRecord = match serde_json::from_str(&exec.record) {
                Ok(record) => record,
                Err(err) => {
                    tracing::warn!(exec_id = %exec.exec_id, error = %err, "an exec record could not be read");
                    continue;
                }
            };
            let Some(provider) = providers
                .get(&exec.sandbox_id)
                .and_then(|name| self.capable_provider(name, Capability::Exec).ok())
            else {
                continue;
            };
            let job = if record.status == ExecStatus::Running {
                self.reattach(record, exec.handle, provider).await
            } else {
                Job::recovered(record, None, self.config().exec.output_buffer_bytes)
            };
            self.inner.exec_jobs.add(&exec.sandbox_id, job);
            recovered += 1;
        }
        tracing::info!(recovered, "exec records recovered after a restart");
        Ok(recovered)
    }

    /// Writes the exec records still on their way to the store (at shutdown, before the store
    /// closes), waiting at most `within`.
    pub async fn flush_exec_records(&self, within: Duration) {
        if let Some(saver) = self.inner.exec_jobs.saver() {
            if tokio::time::timeout(within, saver.flush()).await.is_err() {
                tracing::warn!("exec records were still being saved at shutdown");
            }
        }
    }

    /// A record saved as running: what its provider says of it now.
    async fn reattach(
        &self,
        record: ExecRecord,
        handle: Option<String>,
        provider: Arc<dyn Provider>,
    ) -> Arc<Job> {
        let ring = self.config().exec.output_buffer_bytes;
        let now = self.clock().now();
        let sandbox = record.sandbox_id.clone();
        let Some(handle) = handle else {
            let job = Job::recovered(record, None, ring);
            job.end_unseen(ExecStatus::Killed, None, now, NOT_FOLLOWABLE);
            return job;
        };
        match provider.exec_state(&sandbox, &handle).await {
            Ok((ExecState::Running, control)) => {
                let job = Job::recovered(record, control, ring);
                job.set_detail(STILL_RUNNING);
                self.watch(Arc::clone(&job), provider, handle);
                job
            }
            Ok((ExecState::Exited(code), _)) => {
                let job = Job::recovered(record, None, ring);
                job.end_unseen(
                    ExecStatus::Exited,
                    Some(exit_code_on_wire(code)),
                    now,
                    ENDED_UNSEEN,
                );
                job
            }
            Ok((ExecState::Gone, _)) => {
                let job = Job::recovered(record, None, ring);
                job.end_unseen(ExecStatus::Killed, None, now, GONE);
                job
            }
            Err(err) => {
                tracing::warn!(error = %err, "looking up an exec after a restart failed");
                let job = Job::recovered(record, None, ring);
                job.end_unseen(ExecStatus::Killed, None, now, GONE);
                job
            }
        }
    }

    /// Follows a recovered running exec until its provider reports its end (or the sandbox,
    /// and with it the record, goes).
    fn watch(&self, job: Arc<Job>, provider: Arc<dyn Provider>, handle: String) {
        let plane = self.clone();
        tokio::spawn(async move {
            let record = job.snapshot();
            loop {
                tokio::time::sleep(WATCH_INTERVAL).await;
                let registered = plane
                    .inner
                    .exec_jobs
                    .get(&record.sandbox_id, &record.exec_id)
                    .is_some();
                if !registered || !job.running() {
                    return;
                }
                let now = plane.clock().now();
                match provider.exec_state(&record.sandbox_id, &handle).await {
                    Ok((ExecState::Running, _)) => {}
                    Ok((ExecState::Exited(code), _)) => {
                        job.end(ExecStatus::Exited, Some(exit_code_on_wire(code)), now);
                        return;
                    }
                    Ok((ExecState::Gone, _)) | Err(_) => {
                        job.end_unseen(ExecStatus::Killed, None, now, GONE);
                        return;
                    }
                }
            }
        });
    }
}
