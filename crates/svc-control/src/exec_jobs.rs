//! Every exec of every running sandbox, by ID (decisions §8, "Exec jobs"): its record (status,
//! exit code, bytes per stream) as it runs, and its control, so the exec routes can list,
//! inspect, signal, feed and kill it. Running execs are always kept; of the ended ones, the last
//! [`KEPT_ENDED`] of each sandbox. A sandbox's execs are forgotten when it ends.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use svc_core::access::Action;
use svc_core::error::Resource;
use svc_core::exec::{ExecRecord, ExecStatus};
use svc_core::{Error, ExecId, SandboxId, Timestamp};
use svc_provider::{ExecControl, Signal, StdStream};

use crate::{ControlPlane, Principal};

/// Ended execs kept per sandbox.
const KEPT_ENDED: usize = 100;

/// One exec.
pub(crate) struct Job {
    record: Mutex<ExecRecord>,
    /// `None` for an exec that never started.
    control: Option<Arc<dyn ExecControl>>,
    /// Whether the command's stdin is a pipe svc writes.
    stdin: bool,
    /// Set when svc decided to end it (the kill route), so its end counts as `killed`.
    kill_requested: std::sync::atomic::AtomicBool,
}

impl Job {
    pub(crate) fn new(
        record: ExecRecord,
        control: Option<Arc<dyn ExecControl>>,
        stdin: bool,
    ) -> Arc<Self> {
        Arc::new(Job {
            record: Mutex::new(record),
            control,
            stdin,
            kill_requested: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn lock(&self) -> MutexGuard<'_, ExecRecord> {
        // Plain values, consistent after every statement.
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts output.
    pub(crate) fn count(&self, stream: StdStream, bytes: usize) {
        let mut record = self.lock();
        let counter = match stream {
            StdStream::Stdout => &mut record.stdout_bytes,
            StdStream::Stderr => &mut record.stderr_bytes,
        };
        *counter += bytes as u64;
    }

    /// Records the end. `status` is `Exited` unless svc or the deadline ended it; a kill the
    /// kill route asked for turns it into `Killed`.
    pub(crate) fn end(&self, status: ExecStatus, exit_code: Option<i32>, at: Timestamp) {
        let status = if status == ExecStatus::Exited
            && self
                .kill_requested
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            ExecStatus::Killed
        } else {
            status
        };
        let mut record = self.lock();
        if record.status == ExecStatus::Running {
            record.status = status;
            record.exit_code = exit_code;
            record.ended_at = Some(at);
        }
    }

    pub(crate) fn snapshot(&self) -> ExecRecord {
        self.lock().clone()
    }

    fn running(&self) -> bool {
        self.lock().status == ExecStatus::Running
    }
}

/// The execs of every sandbox.
#[derive(Default)]
pub(crate) struct ExecJobs {
    sandboxes: Mutex<HashMap<SandboxId, VecDeque<Arc<Job>>>>,
}

impl ExecJobs {
    fn lock(&self) -> MutexGuard<'_, HashMap<SandboxId, VecDeque<Arc<Job>>>> {
        // Lists of handles: a panic cannot leave them half-changed.
        self.sandboxes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an exec; the oldest ended ones beyond [`KEPT_ENDED`] go.
    pub(crate) fn add(&self, sandbox: &SandboxId, job: Arc<Job>) {
        let mut sandboxes = self.lock();
        let jobs = sandboxes.entry(sandbox.clone()).or_default();
        jobs.push_back(job);
        let ended = jobs.iter().filter(|job| !job.running()).count();
        let mut surplus = ended.saturating_sub(KEPT_ENDED);
        jobs.retain(|job| {
            if surplus > 0 && !job.running() {
                surplus -= 1;
                false
            } else {
                true
            }
        });
    }

    /// The sandbox ended: its execs with it.
    pub(crate) fn forget(&self, sandbox: &SandboxId) {
        self.lock().remove(sandbox);
    }

    fn list(&self, sandbox: &SandboxId) -> Vec<ExecRecord> {
        let jobs: Vec<Arc<Job>> = self
            .lock()
            .get(sandbox)
            .map(|jobs| jobs.iter().rev().cloned().collect())
            .unwrap_or_default();
        jobs.iter().map(|job| job.snapshot()).collect()
    }

    fn get(&self, sandbox: &SandboxId, exec: &ExecId) -> Option<Arc<Job>> {
        self.lock()
            .get(sandbox)?
            .iter()
            .find(|job| job.lock().exec_id == *exec)
            .cloned()
    }
}

impl ControlPlane {
    /// `GET /sandboxes/{id}/execs`: newest first.
    pub async fn list_execs(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Vec<ExecRecord>, Error> {
        self.authorize(principal, Action::ReadSandboxes)?;
        let sandbox = self.find_sandbox(principal, id).await?;
        Ok(self.inner.exec_jobs.list(&sandbox.id))
    }

    /// `GET /sandboxes/{id}/execs/{exec_id}`.
    pub async fn get_exec(
        &self,
        principal: &Principal,
        id: &str,
        exec_id: &str,
    ) -> Result<ExecRecord, Error> {
        self.authorize(principal, Action::ReadSandboxes)?;
        Ok(self.find_exec(principal, id, exec_id).await?.snapshot())
    }

    async fn find_exec(
        &self,
        principal: &Principal,
        id: &str,
        exec_id: &str,
    ) -> Result<Arc<Job>, Error> {
        let sandbox = self.find_sandbox(principal, id).await?;
        ExecId::parse(exec_id)
            .ok()
            .and_then(|exec| self.inner.exec_jobs.get(&sandbox.id, &exec))
            .ok_or_else(|| Error::not_found(Resource::Exec, exec_id))
    }

    /// A running exec's control, for the routes that act on it; 409 once it has ended.
    async fn running_exec(
        &self,
        principal: &Principal,
        id: &str,
        exec_id: &str,
    ) -> Result<(Arc<Job>, Arc<dyn ExecControl>), Error> {
        self.authorize(principal, Action::Exec)?;
        let job = self.find_exec(principal, id, exec_id).await?;
        let record = job.snapshot();
        match (&job.control, record.status) {
            (Some(control), ExecStatus::Running) => Ok((Arc::clone(&job), Arc::clone(control))),
            (_, status) => Err(Error::ExecEnded {
                id: exec_id.to_owned(),
                status: status_text(status),
            }),
        }
    }

    /// `POST /sandboxes/{id}/execs/{exec_id}/stdin`.
    pub async fn exec_stdin(
        &self,
        principal: &Principal,
        id: &str,
        exec_id: &str,
        data: &str,
        eof: bool,
    ) -> Result<(), Error> {
        let (job, control) = self.running_exec(principal, id, exec_id).await?;
        if !job.stdin {
            return Err(Error::ExecEnded {
                id: exec_id.to_owned(),
                status: "has no stdin (it was started without one)",
            });
        }
        let failed = |e| Error::provider("exec", "write stdin", e);
        if !data.is_empty() {
            control
                .write_stdin(bytes::Bytes::copy_from_slice(data.as_bytes()))
                .await
                .map_err(failed)?;
        }
        if eof {
            control.close_stdin().await.map_err(failed)?;
        }
        Ok(())
    }

    /// `POST /sandboxes/{id}/execs/{exec_id}/signal`.
    pub async fn signal_exec(
        &self,
        principal: &Principal,
        id: &str,
        exec_id: &str,
        signal: &str,
    ) -> Result<(), Error> {
        let signal = Signal::parse(signal).ok_or_else(|| {
            Error::invalid(
                "signal",
                format!(
                    "unknown signal {} (allowed: SIGINT, SIGTERM, SIGKILL, SIGHUP)",
                    svc_core::error::echo(signal)
                ),
            )
        })?;
        let (_, control) = self.running_exec(principal, id, exec_id).await?;
        control
            .signal(signal)
            .await
            .map_err(|e| Error::provider("exec", "signal", e))
    }

    /// `DELETE /sandboxes/{id}/execs/{exec_id}`: kills it; its status becomes `killed`.
    pub async fn kill_exec(
        &self,
        principal: &Principal,
        id: &str,
        exec_id: &str,
    ) -> Result<(), Error> {
        let (job, control) = self.running_exec(principal, id, exec_id).await?;
        job.kill_requested
            .store(true, std::sync::atomic::Ordering::Relaxed);
        control
            .kill()
            .await
            .map_err(|e| Error::provider("exec", "kill", e))
    }
}

fn status_text(status: ExecStatus) -> &'static str {
    match status {
        ExecStatus::Running => "is running",
        ExecStatus::Exited => "has exited",
        ExecStatus::TimedOut => "timed out",
        ExecStatus::Killed => "was killed",
        ExecStatus::Failed => "failed to start",
    }
}

/// A fresh running exec's record, for tests.
#[cfg(test)]
pub(crate) fn running_record(sandbox: &SandboxId) -> ExecRecord {
    ExecRecord {
        exec_id: ExecId::generate(),
        sandbox_id: sandbox.clone(),
        command: "true".into(),
        args: None,
        background: false,
        status: ExecStatus::Running,
        exit_code: None,
        started_at: chrono::Utc::now(),
        ended_at: None,
        stdout_bytes: 0,
        stderr_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sandbox: &SandboxId) -> ExecRecord {
        running_record(sandbox)
    }

    #[test]
    fn keeps_running_execs_and_the_last_hundred_ended() {
        let jobs = ExecJobs::default();
        let sandbox = SandboxId::generate();
        let running = Job::new(record(&sandbox), None, false);
        jobs.add(&sandbox, Arc::clone(&running));
        let mut first_ended = None;
        for _ in 0..KEPT_ENDED + 5 {
            let job = Job::new(record(&sandbox), None, false);
            job.end(ExecStatus::Exited, Some(0), chrono::Utc::now());
            first_ended.get_or_insert_with(|| job.snapshot().exec_id);
            jobs.add(&sandbox, job);
        }
        let listed = jobs.list(&sandbox);
        assert_eq!(listed.len(), KEPT_ENDED + 1);
        assert_eq!(
            listed.last().unwrap().exec_id,
            running.snapshot().exec_id,
            "newest first"
        );
        assert!(
            jobs.get(&sandbox, &first_ended.unwrap()).is_none(),
            "the oldest went"
        );
        jobs.forget(&sandbox);
        assert!(jobs.list(&sandbox).is_empty());
    }

    #[test]
    fn an_end_is_recorded_once_and_a_requested_kill_shows() {
        let sandbox = SandboxId::generate();
        let job = Job::new(record(&sandbox), None, false);
        job.count(StdStream::Stdout, 5);
        job.count(StdStream::Stderr, 2);
        job.kill_requested
            .store(true, std::sync::atomic::Ordering::Relaxed);
        job.end(ExecStatus::Exited, Some(137), chrono::Utc::now());
        job.end(ExecStatus::TimedOut, Some(124), chrono::Utc::now());
        let record = job.snapshot();
        assert_eq!(
            (
                record.status,
                record.exit_code,
                record.stdout_bytes,
                record.stderr_bytes
            ),
            (ExecStatus::Killed, Some(137), 5, 2)
        );
        assert!(record.ended_at.is_some());
    }
}
