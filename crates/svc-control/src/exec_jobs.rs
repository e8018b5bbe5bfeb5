//! Every exec of every running sandbox, by ID (decisions §8, "Exec jobs"): its record (status,
//! exit code, bytes per stream) as it runs, the last `exec.output_buffer_bytes` of each of its
//! streams (a [`Ring`], replayed by byte offset), and its control, so the exec routes can list,
//! inspect, replay, signal, feed and kill it. Running execs are always kept; of the ended ones,
//! the last [`KEPT_ENDED`] of each sandbox. A sandbox's execs are forgotten when it ends.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;

use svc_core::access::Action;
use svc_core::error::Resource;
use svc_core::exec::{ExecRecord, ExecStatus};
use svc_core::sandbox::Sandbox;
use svc_core::{Error, ExecId, SandboxId, Timestamp};
use svc_provider::{ExecControl, Signal, StdStream, TtySize};

use crate::paging::{Page, PageRequest, MAX_PAGE};
use crate::{ControlPlane, ExecControls, Principal};

/// Ended execs kept per sandbox.
pub(crate) const KEPT_ENDED: usize = 100;

/// The last bytes of one output stream, with their offsets in it.
#[derive(Debug)]
pub(crate) struct Ring {
    chunks: VecDeque<(u64, Bytes)>,
    kept: u64,
    total: u64,
    capacity: u64,
}

impl Ring {
    fn new(capacity: u64) -> Self {
        Ring {
            chunks: VecDeque::new(),
            kept: 0,
            total: 0,
            capacity: capacity.max(1),
        }
    }

    /// A ring of a recovered exec, none of whose first `total` bytes are kept.
    fn all_lost(capacity: u64, total: u64) -> Self {
        Ring {
            total,
            ..Ring::new(capacity)
        }
    }

    /// Appends, then drops from the front what exceeds `capacity` (the front chunk is cut
    /// where needed), so exactly the last `capacity` bytes stay replayable whatever the
    /// chunking.
    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        let len = data.len() as u64;
        self.chunks.push_back((self.total, data));
        self.total += len;
        self.kept += len;
        while let Some((_, front)) = self.chunks.front() {
            let front = front.len() as u64;
            if self.kept - front < self.capacity {
                break;
            }
            self.kept -= front;
            self.chunks.pop_front();
        }
        if self.kept > self.capacity {
            let excess = self.kept - self.capacity;
            if let Some((offset, front)) = self.chunks.front_mut() {
                let mut cut = usize::try_from(excess)
                    .unwrap_or(usize::MAX)
                    .min(front.len());
                // Start on a character, so the replay's first line renders as the output did.
                let limit = (cut + 3).min(front.len());
                while cut < limit && front[cut] & 0xC0 == 0x80 {
                    cut += 1;
                }
                *front = front.slice(cut..);
                *offset += cut as u64;
                self.kept -= cut as u64;
            }
        }
    }

    /// What is kept from offset `from` on: how many bytes before it were dropped, and the
    /// chunks with their offsets.
    fn since(&self, from: u64) -> (u64, Vec<(u64, Bytes)>) {
        let oldest = self.total - self.kept;
        let lost = oldest.saturating_sub(from);
        let start = from.max(oldest);
        let chunks = self
            .chunks
            .iter()
            .filter(|(offset, data)| offset + data.len() as u64 > start)
            .map(|(offset, data)| {
                if *offset < start {
                    let skip = usize::try_from(start - offset).unwrap_or(usize::MAX);
                    (start, data.slice(skip..))
                } else {
                    (*offset, data.clone())
                }
            })
            .collect();
        (lost, chunks)
    }
}

/// One item of an exec's output replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecReplay {
    /// Bytes of `stream` no longer kept between the offset asked for and the oldest kept.
    Lost {
        /// Which stream.
        stream: StdStream,
        /// How many bytes.
        bytes: u64,
    },
    /// Output bytes starting at `offset` of their stream.
    Data {
        /// Which stream.
        stream: StdStream,
        /// Offset of the first byte.
        offset: u64,
        /// The raw bytes.
        data: Bytes,
    },
    /// The exec has ended; nothing follows.
    Exit {
        /// Its exit code, when one is known.
        exit_code: Option<i32>,
        /// Its wall time.
        duration: Duration,
    },
}

/// One exec.
pub(crate) struct Job {
    record: Mutex<ExecRecord>,
    /// Stdout and stderr.
    output: Mutex<[Ring; 2]>,
    /// Woken on new output and at the end.
    changed: tokio::sync::Notify,
    /// `None` for an exec that never started.
    control: Option<Arc<dyn ExecControl>>,
    /// Whether the command's stdin is a pipe svc writes.
    stdin: bool,
    /// Set when svc decided to end it (the kill route), so its end counts as `killed`.
    kill_requested: std::sync::atomic::AtomicBool,
    /// Where its record is saved at its start and end, once it is registered.
    saver: std::sync::OnceLock<crate::exec_recovery::Saver>,
    /// The tally its output joins when it ends, once it is registered.
    retained: std::sync::OnceLock<Arc<RetainedOutput>>,
    /// The bytes of its ended output counted in that tally (0: none).
    retained_bytes: AtomicU64,
}

impl Drop for Job {
    fn drop(&mut self) {
        let bytes = *self.retained_bytes.get_mut();
        if let (Some(retained), true) = (self.retained.get(), bytes > 0) {
            retained.forget(bytes);
        }
    }
}

/// The output kept for ended execs across every sandbox, at most `exec.retained_output_bytes`:
/// an exec's kept bytes join the tally when it ends, and the oldest ended execs' output goes
/// first when the tally is over (read back, it is reported lost, like output beyond the ring).
/// Without it, each sandbox's last 100 ended execs keep up to two rings each, however many
/// sandboxes there are.
#[derive(Default)]
pub(crate) struct RetainedOutput {
    state: Mutex<Retained>,
}

#[derive(Default)]
struct Retained {
    budget: u64,
    bytes: u64,
    /// Ended execs in the order they ended.
    ended: VecDeque<Weak<Job>>,
    /// The length at which handles of jobs gone are swept out of `ended`.
    sweep_at: usize,
}

impl RetainedOutput {
    fn lock(&self) -> MutexGuard<'_, Retained> {
        // Counters and handles, consistent after every statement.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the budget (the server does at start-up; 0, the default, keeps nothing).
    pub(crate) fn set_budget(&self, budget: u64) {
        self.lock().budget = budget;
    }

    /// Counts the output of `job`, which just ended, and drops the oldest until it fits.
    fn ended(&self, job: &Arc<Job>) {
        let bytes = job.kept_bytes();
        job.retained_bytes.store(bytes, Ordering::Relaxed);
        let mut released = Vec::new();
        {
            let mut state = self.lock();
            state.bytes += bytes;
            state.ended.push_back(Arc::downgrade(job));
            if state.ended.len() >= state.sweep_at {
                state.ended.retain(|job| job.strong_count() > 0);
                state.sweep_at = (2 * state.ended.len()).max(1024);
            }
            while state.bytes > state.budget {
                let Some(oldest) = state.ended.pop_front() else {
                    break;
                };
                // A job already gone took its bytes with it (`Drop`).
                if let Some(oldest) = oldest.upgrade() {
                    let bytes = oldest.retained_bytes.swap(0, Ordering::Relaxed);
                    state.bytes = state.bytes.saturating_sub(bytes);
                    released.push(oldest);
                }
            }
        }
        // Outside the lock: releasing takes each job's own lock, and the last handle of a job
        // may go here, whose `Drop` takes this one.
        for job in released {
            job.release_output();
        }
    }

    /// A counted job went: its bytes leave the tally.
    fn forget(&self, bytes: u64) {
        let mut state = self.lock();
        state.bytes = state.bytes.saturating_sub(bytes);
    }

    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.lock().bytes
    }
}

impl Job {
    pub(crate) fn new(
        record: ExecRecord,
        control: Option<Arc<dyn ExecControl>>,
        stdin: bool,
        ring_bytes: u64,
    ) -> Arc<Self> {
        Arc::new(Job {
            record: Mutex::new(record),
            output: Mutex::new([Ring::new(ring_bytes), Ring::new(ring_bytes)]),
            changed: tokio::sync::Notify::new(),
            control,
            stdin,
            kill_requested: std::sync::atomic::AtomicBool::new(false),
            saver: std::sync::OnceLock::new(),
            retained: std::sync::OnceLock::new(),
            retained_bytes: AtomicU64::new(0),
        })
    }

    /// The output bytes it keeps.
    fn kept_bytes(&self) -> u64 {
        self.rings().iter().map(|ring| ring.kept).sum()
    }

    /// Drops its kept output; reads report it lost.
    fn release_output(&self) {
        for ring in self.rings().iter_mut() {
            *ring = Ring::all_lost(ring.capacity, ring.total);
        }
    }

    /// A job recovered after a restart: its record as saved, no output kept (what it wrote is
    /// all reported lost), and the control its provider could still give.
    pub(crate) fn recovered(
        record: ExecRecord,
        control: Option<Arc<dyn ExecControl>>,
        ring_bytes: u64,
    ) -> Arc<Self> {
        let rings = [
            Ring::all_lost(ring_bytes, record.stdout_bytes),
            Ring::all_lost(ring_bytes, record.stderr_bytes),
        ];
        let job = Job::new(record, control, false, ring_bytes);
        *job.rings() = rings;
        job
    }

    /// Its record as the store keeps it.
    pub(crate) fn stored(&self) -> svc_store::StoredExec {
        let record = self.snapshot();
        svc_store::StoredExec {
            exec_id: record.exec_id.to_string(),
            sandbox_id: record.sandbox_id.clone(),
            started_at: record.started_at,
            ended: record.status != ExecStatus::Running,
            handle: self.control.as_ref().and_then(|c| c.handle()),
            record: serde_json::to_string(&record).unwrap_or_default(),
        }
    }

    fn save(&self) {
        if let Some(saver) = self.saver.get() {
            saver.save(self);
        }
    }

    /// Says what is not known of an exec svc lost sight of.
    pub(crate) fn set_detail(&self, detail: &str) {
        self.lock().detail = Some(detail.to_owned());
    }

    /// Ends a job that started before a restart and ended unseen.
    pub(crate) fn end_unseen(
        self: &Arc<Self>,
        status: ExecStatus,
        exit_code: Option<i32>,
        at: Timestamp,
        detail: &str,
    ) {
        self.set_detail(detail);
        self.end(status, exit_code, at);
    }

    fn lock(&self) -> MutexGuard<'_, ExecRecord> {
        // Plain values, consistent after every statement.
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rings(&self) -> MutexGuard<'_, [Ring; 2]> {
        // Plain buffers, consistent after every statement.
        self.output.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps output and counts it; followers wake.
    pub(crate) fn output(&self, stream: StdStream, data: &Bytes) {
        {
            let mut record = self.lock();
            let counter = match stream {
                StdStream::Stdout => &mut record.stdout_bytes,
                StdStream::Stderr => &mut record.stderr_bytes,
            };
            *counter += data.len() as u64;
        }
        self.rings()[index(stream)].push(data.clone());
        self.changed.notify_waiters();
    }

    /// Records the end. `status` is `Exited` unless svc or the deadline ended it; a kill the
    /// kill route asked for turns it into `Killed`.
    pub(crate) fn end(self: &Arc<Self>, status: ExecStatus, exit_code: Option<i32>, at: Timestamp) {
        let status = if status == ExecStatus::Exited
            && self
                .kill_requested
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            ExecStatus::Killed
        } else {
            status
        };
        {
            let mut record = self.lock();
            if record.status != ExecStatus::Running {
                return;
            }
            record.status = status;
            record.exit_code = exit_code;
            record.ended_at = Some(at);
        }
        self.changed.notify_waiters();
        self.save();
        if let Some(retained) = self.retained.get() {
            retained.ended(self);
        }
    }

    /// What a follower at `offsets` has not seen: lost bytes and data per stream, then the
    /// exit when the exec has ended. The status is read before the output, and output is
    /// always kept before the end is recorded, so an ended exec's replay is complete.
    fn replay(&self, offsets: &mut [u64; 2]) -> (Vec<ExecReplay>, bool) {
        // Only what the exit line needs: a follower wakes on every chunk.
        let (status, exit_code, started_at, ended_at) = {
            let record = self.lock();
            (
                record.status,
                record.exit_code,
                record.started_at,
                record.ended_at,
            )
        };
        let ended = status != ExecStatus::Running;
        let mut items = Vec::new();
        let rings = self.rings();
        for stream in [StdStream::Stdout, StdStream::Stderr] {
            let offset = &mut offsets[index(stream)];
            let (lost, chunks) = rings[index(stream)].since(*offset);
            if lost > 0 {
                items.push(ExecReplay::Lost {
                    stream,
                    bytes: lost,
                });
                *offset += lost;
            }
            for (at, data) in chunks {
                *offset = at + data.len() as u64;
                items.push(ExecReplay::Data {
                    stream,
                    offset: at,
                    data,
                });
            }
        }
        drop(rings);
        if ended {
            let duration = ended_at
                .map(|end| (end - started_at).to_std().unwrap_or_default())
                .unwrap_or_default();
            items.push(ExecReplay::Exit {
                exit_code,
                duration,
            });
        }
        (items, ended)
    }

    pub(crate) fn snapshot(&self) -> ExecRecord {
        self.lock().clone()
    }

    pub(crate) fn running(&self) -> bool {
        self.lock().status == ExecStatus::Running
    }
}

/// What a cursor of a sandbox's execs holds: the last exec's start time in microseconds and
/// its ID.
fn exec_key(record: &ExecRecord) -> (i64, String) {
    (
        record.started_at.timestamp_micros(),
        record.exec_id.to_string(),
    )
}

/// Where the page after `after` starts in `execs` (newest first): just after that exec, or,
/// when it has been forgotten since, at the first exec that started before it.
fn resume_at(execs: &[ExecRecord], (micros, id): &(i64, String)) -> usize {
    match execs.iter().position(|e| e.exec_id.as_str() == id) {
        Some(index) => index + 1,
        None => execs
            .iter()
            .position(|e| e.started_at.timestamp_micros() < *micros)
            .unwrap_or(execs.len()),
    }
}

/// The execs of every sandbox.
#[derive(Default)]
pub(crate) struct ExecJobs {
    sandboxes: Mutex<HashMap<SandboxId, VecDeque<Arc<Job>>>>,
    /// Saves records once [`crate::exec_recovery`] started it (the server does, at start-up).
    saver: std::sync::OnceLock<crate::exec_recovery::Saver>,
    /// The output kept for ended execs, all sandboxes together.
    retained: Arc<RetainedOutput>,
}

impl ExecJobs {
    fn lock(&self) -> MutexGuard<'_, HashMap<SandboxId, VecDeque<Arc<Job>>>> {
        // Lists of handles: a panic cannot leave them half-changed.
        self.sandboxes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn saver(&self) -> Option<&crate::exec_recovery::Saver> {
        self.saver.get()
    }

    /// Starts saving records with `saver`; the first call wins.
    pub(crate) fn save_with(&self, saver: crate::exec_recovery::Saver) {
        let _ = self.saver.set(saver);
    }

    /// Adds an exec; the oldest ended ones beyond [`KEPT_ENDED`] go.
    /// Keeps at most `budget` bytes of ended execs' output (`exec.retained_output_bytes`).
    pub(crate) fn retain_output(&self, budget: u64) {
        self.retained.set_budget(budget);
    }

    pub(crate) fn add(&self, sandbox: &SandboxId, job: Arc<Job>) {
        let _ = job.retained.set(Arc::clone(&self.retained));
        if let Some(saver) = self.saver.get() {
            let _ = job.saver.set(saver.clone());
            job.save();
        }
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
        if let Some(saver) = self.saver.get() {
            saver.forget(sandbox);
        }
    }

    /// Newest first (the reverse of the order they started in).
    fn list(&self, sandbox: &SandboxId) -> Vec<ExecRecord> {
        let jobs: Vec<Arc<Job>> = self
            .lock()
            .get(sandbox)
            .map(|jobs| jobs.iter().rev().cloned().collect())
            .unwrap_or_default();
        jobs.iter().map(|job| job.snapshot()).collect()
    }

    pub(crate) fn get(&self, sandbox: &SandboxId, exec: &ExecId) -> Option<Arc<Job>> {
        self.lock()
            .get(sandbox)?
            .iter()
            .find(|job| job.lock().exec_id == *exec)
            .cloned()
    }
}

impl ControlPlane {
    /// A sandbox's execs, newest first (every one: for the E2B listener; the API pages with
    /// [`ControlPlane::list_execs_page`]).
    pub async fn list_execs(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<Vec<ExecRecord>, Error> {
        self.authorize(principal, Action::ReadSandboxes)?;
        let sandbox = self.find_sandbox(principal, id).await?;
        Ok(self.inner.exec_jobs.list(&sandbox.id))
    }

    /// `GET /sandboxes/{id}/execs`: a page, newest first.
    pub async fn list_execs_page(
        &self,
        principal: &Principal,
        id: &SandboxId,
        page: PageRequest,
    ) -> Result<Page<ExecRecord>, Error> {
        let paging =
            page.open::<(i64, String)>("/sandboxes/{id}/execs", id.to_string(), MAX_PAGE)?;
        let execs = self.list_execs(principal, id).await?;
        let start = paging
            .after
            .as_ref()
            .map_or(0, |after| resume_at(&execs, after));
        let fetched = execs
            .into_iter()
            .skip(start)
            .take(paging.fetch() as usize)
            .collect();
        Ok(paging.finish(fetched, exec_key))
    }

    /// `GET /sandboxes/{id}/execs/{exec_id}`.
    pub async fn get_exec(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
    ) -> Result<ExecRecord, Error> {
        self.authorize(principal, Action::ReadSandboxes)?;
        Ok(self.find_exec(principal, id, exec_id).await?.snapshot())
    }

    async fn find_exec(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
    ) -> Result<Arc<Job>, Error> {
        Ok(self.find_exec_in(principal, id, exec_id).await?.1)
    }

    async fn find_exec_in(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
    ) -> Result<(Sandbox, Arc<Job>), Error> {
        let sandbox = self.find_sandbox(principal, id).await?;
        let job = self
            .inner
            .exec_jobs
            .get(&sandbox.id, exec_id)
            .ok_or_else(|| Error::not_found(Resource::Exec, exec_id.as_str()))?;
        Ok((sandbox, job))
    }

    /// `GET /sandboxes/{id}/execs/{exec_id}/output`: the exec's output from the given byte
    /// offsets (what is no longer kept is reported as lost), then live output with `follow`,
    /// and the exit once it has ended.
    pub async fn exec_output(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
        offsets: [u64; 2],
        follow: bool,
    ) -> Result<BoxStream<'static, ExecReplay>, Error> {
        self.authorize(principal, Action::ReadLogs)?;
        let job = self.find_exec(principal, id, exec_id).await?;
        Ok(follow_job(job, offsets, follow))
    }

    /// A running exec's controls, for the routes that act on it; 409 once it has ended.
    async fn running_exec(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
    ) -> Result<(Arc<Job>, ExecControls), Error> {
        self.authorize(principal, Action::Exec)?;
        let (sandbox, job) = self.find_exec_in(principal, id, exec_id).await?;
        let record = job.snapshot();
        match (&job.control, record.status) {
            (Some(control), ExecStatus::Running) => {
                let controls = ExecControls::new(
                    Arc::clone(control),
                    self.clone(),
                    sandbox.id,
                    &sandbox.provider,
                );
                Ok((Arc::clone(&job), controls))
            }
            (_, status) => Err(Error::ExecEnded {
                id: exec_id.to_string(),
                status: status_text(status),
            }),
        }
    }

    /// `POST /sandboxes/{id}/execs/{exec_id}/stdin`.
    pub async fn exec_stdin(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
        data: &[u8],
        eof: bool,
    ) -> Result<(), Error> {
        let (job, controls) = self.running_exec(principal, id, exec_id).await?;
        if !job.stdin {
            return Err(Error::ExecEnded {
                id: exec_id.to_string(),
                status: "has no stdin (it was started without one)",
            });
        }
        if !data.is_empty() {
            controls
                .write_stdin(bytes::Bytes::copy_from_slice(data))
                .await?;
        }
        if eof {
            controls.close_stdin().await?;
        }
        Ok(())
    }

    /// `POST /sandboxes/{id}/execs/{exec_id}/signal`.
    pub async fn signal_exec(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
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
        let (_, controls) = self.running_exec(principal, id, exec_id).await?;
        controls.signal(signal).await
    }

    /// A running terminal exec's new size (E2B's process `Update`).
    pub async fn resize_exec(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
        size: TtySize,
    ) -> Result<(), Error> {
        let (_, controls) = self.running_exec(principal, id, exec_id).await?;
        controls.resize(size).await
    }

    /// `DELETE /sandboxes/{id}/execs/{exec_id}`: kills it; its status becomes `killed`.
    pub async fn kill_exec(
        &self,
        principal: &Principal,
        id: &SandboxId,
        exec_id: &ExecId,
    ) -> Result<(), Error> {
        let (job, controls) = self.running_exec(principal, id, exec_id).await?;
        job.kill_requested
            .store(true, std::sync::atomic::Ordering::Relaxed);
        controls.kill().await
    }
}

fn index(stream: StdStream) -> usize {
    match stream {
        StdStream::Stdout => 0,
        StdStream::Stderr => 1,
    }
}

/// Follows a job from `offsets`: what it has, then (with `follow`) what comes, to its end.
fn follow_job(job: Arc<Job>, offsets: [u64; 2], follow: bool) -> BoxStream<'static, ExecReplay> {
    let state = (job, offsets, VecDeque::<ExecReplay>::new(), false);
    Box::pin(futures::stream::unfold(
        state,
        move |(job, mut offsets, mut pending, mut done)| async move {
            loop {
                if let Some(item) = pending.pop_front() {
                    return Some((item, (job, offsets, pending, done)));
                }
                if done {
                    return None;
                }
                // Registered before looking, so output that lands in between still wakes us.
                let changed = job.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let (items, ended) = job.replay(&mut offsets);
                pending.extend(items);
                done = ended || !follow;
                if pending.is_empty() && !done {
                    changed.await;
                }
            }
        },
    ))
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
        started_at: svc_core::Clock::now(&svc_core::clock::SystemClock),
        ended_at: None,
        stdout_bytes: 0,
        stderr_bytes: 0,
        detail: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sandbox: &SandboxId) -> ExecRecord {
        running_record(sandbox)
    }

    /// A page resumes just after its cursor's exec, or, when that one is gone, at the first
    /// exec older than it; never at an exec seen before.
    #[test]
    fn pages_resume_after_the_cursor_even_when_its_exec_is_gone() {
        let sandbox = SandboxId::generate();
        let base = svc_core::Clock::now(&svc_core::clock::SystemClock);
        // Newest first, two of them started in the same microsecond.
        let execs: Vec<ExecRecord> = [3, 2, 2, 1]
            .into_iter()
            .map(|second| ExecRecord {
                started_at: base + chrono::Duration::seconds(second),
                ..record(&sandbox)
            })
            .collect();
        let key = |i: usize| exec_key(&execs[i]);
        assert_eq!(resume_at(&execs, &key(1)), 2, "after the cursor's exec");
        assert_eq!(resume_at(&execs, &key(3)), 4, "after the last: nothing");
        let gone = (key(1).0, ExecId::generate().to_string());
        assert_eq!(
            resume_at(&execs, &gone),
            3,
            "the first older than a forgotten cursor"
        );
    }

    /// Ended output beyond `exec.retained_output_bytes` goes oldest first, read back as lost;
    /// a job that goes takes its bytes out of the tally.
    #[test]
    fn ended_output_is_kept_within_the_budget_oldest_dropped_first() {
        let jobs = ExecJobs::default();
        jobs.retain_output(100);
        let sandbox = SandboxId::generate();
        let ended_with = |bytes: usize| {
            let job = Job::new(record(&sandbox), None, false, 64);
            jobs.add(&sandbox, Arc::clone(&job));
            job.output(StdStream::Stdout, &Bytes::from(vec![b'x'; bytes]));
            job.end(
                ExecStatus::Exited,
                Some(0),
                svc_core::Clock::now(&svc_core::clock::SystemClock),
            );
            job
        };
        let first = ended_with(60);
        assert_eq!(jobs.retained.bytes(), 60);
        let second = ended_with(60);
        assert_eq!(jobs.retained.bytes(), 60, "the first went to make room");
        let (items, _) = first.replay(&mut [0, 0]);
        assert_eq!(
            items[0],
            ExecReplay::Lost {
                stream: StdStream::Stdout,
                bytes: 60
            }
        );
        assert_eq!(second.replay(&mut [0, 0]).0.len(), 2, "data, then the exit");
        jobs.forget(&sandbox);
        drop(second);
        assert_eq!(jobs.retained.bytes(), 0, "a job gone leaves the tally");
        drop(first);
    }

    #[test]
    fn keeps_running_execs_and_the_last_hundred_ended() {
        let jobs = ExecJobs::default();
        let sandbox = SandboxId::generate();
        let running = Job::new(record(&sandbox), None, false, 64);
        jobs.add(&sandbox, Arc::clone(&running));
        let mut first_ended = None;
        for _ in 0..KEPT_ENDED + 5 {
            let job = Job::new(record(&sandbox), None, false, 64);
            job.end(
                ExecStatus::Exited,
                Some(0),
                svc_core::Clock::now(&svc_core::clock::SystemClock),
            );
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
        let job = Job::new(record(&sandbox), None, false, 64);
        job.output(StdStream::Stdout, &Bytes::from_static(b"hello"));
        job.output(StdStream::Stderr, &Bytes::from_static(b"no"));
        job.kill_requested
            .store(true, std::sync::atomic::Ordering::Relaxed);
        job.end(
            ExecStatus::Exited,
            Some(137),
            svc_core::Clock::now(&svc_core::clock::SystemClock),
        );
        job.end(
            ExecStatus::TimedOut,
            Some(124),
            svc_core::Clock::now(&svc_core::clock::SystemClock),
        );
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

    #[test]
    fn a_ring_keeps_exactly_its_capacity_and_reports_what_it_dropped() {
        let mut ring = Ring::new(10);
        for chunk in ["abcd", "efgh", "ijkl", "mnop"] {
            ring.push(Bytes::from(chunk));
        }
        // 16 bytes pushed; the last 10 stay, the front chunk cut: "gh" on is kept.
        let (lost, chunks) = ring.since(0);
        assert_eq!(lost, 6);
        assert_eq!(chunks[0], (6, Bytes::from("gh")));
        let (lost, chunks) = ring.since(7);
        assert_eq!(lost, 0);
        assert_eq!(
            chunks[0],
            (7, Bytes::from("h")),
            "a chunk cut at the offset"
        );
        // A cut inside a character moves to its end.
        let mut text = Ring::new(4);
        text.push(Bytes::from("aé€"));
        assert_eq!(text.since(0), (3, vec![(3, Bytes::from("€"))]));
        // One chunk larger than the whole ring keeps only its tail.
        let mut big = Ring::new(4);
        big.push(Bytes::from("0123456789"));
        assert_eq!(big.since(0), (6, vec![(6, Bytes::from("6789"))]));
        let (lost, chunks) = ring.since(6);
        assert_eq!(lost, 0);
        assert_eq!(
            chunks[0],
            (6, Bytes::from("gh")),
            "a chunk cut at the offset"
        );
        assert_eq!(chunks.len(), 3);
        assert_eq!(ring.since(16), (0, Vec::new()));
        assert_eq!(ring.since(99), (0, Vec::new()));
    }

    #[tokio::test]
    async fn a_follower_gets_every_byte_once_then_the_exit() {
        use futures::StreamExt;
        let sandbox = SandboxId::generate();
        let job = Job::new(record(&sandbox), None, false, 1024);
        job.output(StdStream::Stdout, &Bytes::from_static(b"one "));
        let mut follower = follow_job(Arc::clone(&job), [0, 0], true);
        let feeder = {
            let job = Arc::clone(&job);
            tokio::spawn(async move {
                for word in ["two ", "three"] {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    job.output(StdStream::Stdout, &Bytes::from(word));
                }
                job.output(StdStream::Stderr, &Bytes::from_static(b"err"));
                job.end(
                    ExecStatus::Exited,
                    Some(0),
                    svc_core::Clock::now(&svc_core::clock::SystemClock),
                );
            })
        };
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut exit = None;
        while let Some(item) = follower.next().await {
            match item {
                ExecReplay::Data {
                    stream: StdStream::Stdout,
                    offset,
                    data,
                } => {
                    assert_eq!(offset as usize, stdout.len());
                    stdout.extend_from_slice(&data);
                }
                ExecReplay::Data { data, .. } => stderr.extend_from_slice(&data),
                ExecReplay::Lost { .. } => panic!("nothing is lost"),
                ExecReplay::Exit { exit_code, .. } => exit = exit_code,
            }
        }
        feeder.await.unwrap();
        assert_eq!(
            (stdout.as_slice(), stderr.as_slice(), exit),
            (&b"one two three"[..], &b"err"[..], Some(0))
        );
        // A late follower from an offset, without follow, ends at once.
        let late: Vec<ExecReplay> = follow_job(job, [4, 3], false).collect().await;
        assert_eq!(
            late[0],
            ExecReplay::Data {
                stream: StdStream::Stdout,
                offset: 4,
                data: Bytes::from("two ")
            }
        );
        assert!(matches!(
            late.last(),
            Some(ExecReplay::Exit {
                exit_code: Some(0),
                ..
            })
        ));
    }
}
