//! Exec above the provider's single primitive: request validation and the deadline rule, the
//! `exec.*` events, and a [`RunningExec`] that yields output and then exactly one ending.
//! Buffered, NDJSON and WebSocket exec are all this, consumed differently. Dropping a
//! `RunningExec` before its end (a caller that went away) kills the command.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::StreamExt;
use svc_core::access::Action;
use svc_core::error::LimitReason;
use svc_core::event::{EventPayload, ExecEventData, ExecOperation};
use svc_core::exec::{exit_code_on_wire, ExecRecord, ExecResult, ExecStatus, TIMEOUT_EXIT_CODE};
use svc_core::path::SandboxPath;
use svc_core::{Capability, Error, ExecId, GoDuration, OwnerId, SandboxId};
use svc_provider::{
    ExecChunk, ExecControl, ExecSpec, ExitStatus, OutputStream, ProviderError, StdStream, TtySize,
};

use crate::door::Operation;
use crate::exec_jobs::Job;
use crate::ExecControls;
use crate::{ControlPlane, Principal};

const EXEC: Operation = Operation::new(Action::Exec, Capability::Exec, "exec");

/// Checks a command before anything runs; answers its working directory.
fn checked_workdir(command: &ExecCommand) -> Result<Option<SandboxPath>, Error> {
    if command.command.trim().is_empty() {
        return Err(Error::invalid("command", "must not be empty"));
    }
    let has_nul = |text: &str| text.contains('\0');
    if has_nul(&command.command) || command.args.iter().flatten().any(|a| has_nul(a)) {
        return Err(Error::invalid("command", "must not contain NUL characters"));
    }
    svc_core::sandbox::check_env(&command.env)?;
    command
        .workdir
        .as_deref()
        .map(|w| SandboxPath::parse(w).map_err(|e| Error::invalid("workdir", e.to_string())))
        .transpose()
}

/// How long a command killed at its deadline may take to end before the caller is answered.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Buffered exec keeps at most this much of each stream; streaming has no limit.
pub const BUFFERED_OUTPUT_LIMIT: usize = 64 * 1024 * 1024;

/// Which exec form, as named in event data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecForm {
    /// `POST /exec`.
    Buffered,
    /// `POST /exec` with `stream: true`.
    Stream,
    /// `GET /exec/ws`.
    Interactive,
}

impl ExecForm {
    /// The operation's name in metrics.
    fn metric(self) -> &'static str {
        match self {
            ExecForm::Buffered => "exec",
            ExecForm::Stream => "exec_stream",
            ExecForm::Interactive => "exec_interactive",
        }
    }

    fn operation(self) -> ExecOperation {
        match self {
            ExecForm::Buffered => ExecOperation::Exec,
            ExecForm::Stream => ExecOperation::ExecStream,
            ExecForm::Interactive => ExecOperation::ExecInteractive,
        }
    }
}

/// A command to run, in any form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecCommand {
    /// Shell command line, or the program when `args` is present.
    pub command: String,
    /// Arguments (no shell).
    pub args: Option<Vec<String>>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox.
    pub workdir: Option<String>,
    /// Requested deadline; `None` or zero = the default.
    pub timeout: Option<GoDuration>,
    /// Pseudo-terminal size, for `tty`.
    pub tty: Option<TtySize>,
    /// Whether stdin will be written.
    pub stdin: bool,
    /// The exec's ID when the caller must name it before the command starts (a WebSocket
    /// upgrade answers with it); otherwise one is made.
    pub exec_id: Option<ExecId>,
    /// A background exec: no default deadline, stdin open, runs on without a caller.
    pub background: bool,
    /// Keep running when the caller goes away (`on_disconnect: continue`).
    pub keep_on_disconnect: bool,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecEnding {
    /// Exit code (124 on timeout); `None` when the provider lost the status.
    pub exit_code: Option<i32>,
    /// True when the deadline killed it.
    pub timed_out: bool,
    /// Wall time.
    pub duration: Duration,
    /// The deadline that applied.
    pub timeout: Option<Duration>,
}

/// What a running command produces next.
#[derive(Debug)]
pub enum ExecOutput {
    /// Output bytes.
    Chunk(ExecChunk),
    /// The end; nothing follows.
    Ended(ExecEnding),
}

/// A command that is running.
pub struct RunningExec {
    exec_id: ExecId,
    job: Arc<Job>,
    plane: ControlPlane,
    sandbox_id: SandboxId,
    tenant_id: String,
    provider: &'static str,
    form: ExecForm,
    output: Option<OutputStream>,
    exit: Option<BoxFuture<'static, Result<ExitStatus, ProviderError>>>,
    status: Option<Result<ExitStatus, ProviderError>>,
    control: Arc<dyn ExecControl>,
    started: Instant,
    timeout: Option<Duration>,
    deadline: Option<tokio::time::Instant>,
    timed_out: bool,
    ended: bool,
    /// Dropped before its end, it runs on instead of being killed.
    keep_running: bool,
    /// The copy that drives a command that runs on. Dropped before the end, the runtime is
    /// going away (svc stops): the command is left as it is, to be found again after a
    /// restart where the provider allows.
    detached: bool,
}

fn event_data(exec_id: &ExecId, form: ExecForm, provider: &str) -> ExecEventData {
    ExecEventData {
        exec_id: Some(exec_id.clone()),
        operation: form.operation(),
        provider: provider.to_owned(),
        exit_code: None,
        duration: None,
        error: None,
        cancelled: false,
    }
}

impl RunningExec {
    /// The exec's ID.
    pub fn exec_id(&self) -> &ExecId {
        &self.exec_id
    }

    /// The command's controls (stdin, resize, signals).
    pub fn controls(&self) -> ExecControls {
        ExecControls::new(
            Arc::clone(&self.control),
            self.plane.clone(),
            self.sandbox_id.clone(),
            self.provider,
        )
    }

    fn publish(&self, payload: impl FnOnce(ExecEventData) -> EventPayload) {
        let data = event_data(&self.exec_id, self.form, self.provider);
        self.plane
            .events()
            .publish_in(&self.tenant_id, Some(&self.sandbox_id), payload(data));
    }

    /// The next output chunk, or the ending (once); `None` after the ending.
    pub async fn next(&mut self) -> Option<ExecOutput> {
        if self.ended {
            return None;
        }
        loop {
            if self.output.is_none() {
                if let Some(status) = self.status.take() {
                    return Some(self.finish(&status));
                }
            }
            // Before the deadline: wait for it. After it: wait a grace period for the killed
            // command to end, then answer anyway rather than hang on a kill that failed.
            let deadline = if self.timed_out {
                self.deadline.map(|d| d + KILL_GRACE)
            } else {
                self.deadline
            };
            let output = &mut self.output;
            let exit = &mut self.exit;
            let has_output = output.is_some();
            let has_exit = exit.is_some();
            let step = tokio::select! {
                chunk = async { output.as_mut()?.next().await }, if has_output => Step::Output(chunk),
                status = async { Some(exit.as_mut()?.await) }, if has_exit => Step::Exit(status),
                () = sleep_until(deadline), if deadline.is_some() => Step::Deadline,
            };
            match step {
                Step::Output(Some(Ok(chunk))) => {
                    self.job.output(chunk.stream, &chunk.data);
                    return Some(ExecOutput::Chunk(chunk));
                }
                Step::Output(Some(Err(err))) => {
                    tracing::warn!(sandbox_id = %self.sandbox_id, tenant_id = %self.tenant_id, error = %err, "reading command output failed");
                    self.output = None;
                }
                Step::Output(None) => self.output = None,
                Step::Exit(status) => {
                    self.exit = None;
                    self.status = status;
                }
                Step::Deadline if self.timed_out => {
                    tracing::warn!(sandbox_id = %self.sandbox_id, tenant_id = %self.tenant_id, "a timed-out command did not end after its kill; answering without it");
                    self.output = None;
                    self.exit = None;
                    self.status = Some(Ok(ExitStatus {
                        code: TIMEOUT_EXIT_CODE,
                    }));
                }
                Step::Deadline => {
                    self.timed_out = true;
                    if let Err(err) = self.control.kill().await {
                        tracing::warn!(sandbox_id = %self.sandbox_id, tenant_id = %self.tenant_id, error = %err, "killing a timed-out command failed");
                    }
                }
            }
        }
    }

    fn finish(&mut self, status: &Result<ExitStatus, ProviderError>) -> ExecOutput {
        self.ended = true;
        let duration = self.started.elapsed();
        self.plane.operations().record(
            self.form.metric(),
            self.provider,
            status.is_ok() && !self.timed_out,
            duration,
        );
        let exit_code = match (status, self.timed_out) {
            (_, true) => Some(TIMEOUT_EXIT_CODE),
            (Ok(status), false) => Some(status.code),
            (Err(_), false) => None,
        };
        let ended_as = if self.timed_out {
            ExecStatus::TimedOut
        } else {
            ExecStatus::Exited
        };
        self.job.end(
            ended_as,
            Some(exit_code_on_wire(exit_code)),
            self.plane.clock().now(),
        );
        if self.timed_out {
            let timeout = GoDuration::new(self.timeout.unwrap_or_default());
            self.publish(|data| {
                EventPayload::ExecTimeout(ExecEventData {
                    error: Some(format!("command timed out after {timeout}")),
                    ..data
                })
            });
        } else if let Err(err) = status {
            self.publish(|data| {
                EventPayload::ExecFailed(ExecEventData {
                    error: Some(err.to_string()),
                    ..data
                })
            });
        } else {
            self.publish(|data| {
                EventPayload::ExecCompleted(ExecEventData {
                    exit_code,
                    duration: Some(GoDuration::new(duration).to_string()),
                    ..data
                })
            });
        }
        ExecOutput::Ended(ExecEnding {
            exit_code,
            timed_out: self.timed_out,
            duration,
            timeout: self.timeout,
        })
    }
}

/// One turn of [`RunningExec::next`].
enum Step {
    Output(Option<Result<ExecChunk, ProviderError>>),
    Exit(Option<Result<ExitStatus, ProviderError>>),
    Deadline,
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

impl Drop for RunningExec {
    fn drop(&mut self) {
        if self.ended || self.detached {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.keep_running {
            // The caller went away from a command that runs on: it is driven to its end here,
            // its output kept for replay.
            let mut detached = RunningExec {
                exec_id: self.exec_id.clone(),
                job: Arc::clone(&self.job),
                plane: self.plane.clone(),
                sandbox_id: self.sandbox_id.clone(),
                tenant_id: self.tenant_id.clone(),
                provider: self.provider,
                form: self.form,
                output: self.output.take(),
                exit: self.exit.take(),
                status: self.status.take(),
                control: Arc::clone(&self.control),
                started: self.started,
                timeout: self.timeout,
                deadline: self.deadline,
                timed_out: self.timed_out,
                ended: false,
                keep_running: true,
                detached: true,
            };
            self.ended = true;
            runtime.spawn(async move { while detached.next().await.is_some() {} });
            return;
        }
        // The caller went away: end the command, and record how it ended (no exec.timeout).
        let control = Arc::clone(&self.control);
        let exit = self.exit.take();
        let plane = self.plane.clone();
        let sandbox_id = self.sandbox_id.clone();
        let tenant_id = self.tenant_id.clone();
        let data = event_data(&self.exec_id, self.form, self.provider);
        let job = Arc::clone(&self.job);
        let started = self.started;
        let (operation, provider) = (self.form.metric(), self.provider);
        runtime.spawn(async move {
            let _ = control.kill().await;
            let exit_code = match exit {
                Some(exit) => exit.await.ok().map(|s| s.code),
                None => None,
            };
            job.end(ExecStatus::Killed, exit_code, plane.clock().now());
            // The command ran as asked; its caller left.
            plane
                .operations()
                .record(operation, provider, true, started.elapsed());
            let data = ExecEventData {
                exit_code,
                duration: Some(GoDuration::new(started.elapsed()).to_string()),
                cancelled: true,
                ..data
            };
            plane.events().publish_in(
                &tenant_id,
                Some(&sandbox_id),
                EventPayload::ExecCompleted(data),
            );
        });
    }
}

impl ControlPlane {
    /// The deadline for a command of `owner`: requested or default, capped by the owner's
    /// effective maximum (429 when the request exceeds it).
    async fn exec_deadline(
        &self,
        owner: Option<&OwnerId>,
        requested: Option<GoDuration>,
    ) -> Result<Option<Duration>, Error> {
        let defaults = &self.config().defaults;
        let limit = self.effective_limits(owner).await?.max_exec_timeout;
        let max = limit.as_std();
        let requested = requested.filter(|t| !t.is_zero());
        if let Some(requested) = requested {
            if !max.is_zero() && requested.as_std() > max {
                return Err(Error::ResourceLimit {
                    reason: LimitReason::MaxExecTimeout,
                    message: format!(
                        "exec timeout {requested} exceeds the maximum {limit} (max_exec_timeout)"
                    ),
                });
            }
        }
        let chosen = requested.unwrap_or(defaults.default_exec_timeout).as_std();
        Ok(match (chosen.is_zero(), max.is_zero()) {
            (false, _) => Some(if max.is_zero() {
                chosen
            } else {
                chosen.min(max)
            }),
            (true, false) => Some(max),
            (true, true) => None,
        })
    }

    /// Validates, then starts a command in a sandbox. Every limit error comes before anything
    /// runs, the same for every form.
    pub async fn start_exec(
        &self,
        principal: &Principal,
        id: &SandboxId,
        command: ExecCommand,
        form: ExecForm,
    ) -> Result<RunningExec, Error> {
        let (on, workdir) = self
            .enter(principal, id, EXEC, checked_workdir(&command))
            .await?;
        let (sandbox, provider) = (&on.sandbox, &on.provider);
        let timeout = if command.background && command.timeout.is_none_or(|t| t.is_zero()) {
            // A background exec has no default deadline; an explicit one is still capped.
            None
        } else {
            self.exec_deadline(sandbox.owner_id.as_ref(), command.timeout)
                .await
                .inspect_err(|err| self.publish_limit(err, sandbox.owner_id.as_ref()))?
        };
        let exec_id = command.exec_id.clone().unwrap_or_else(ExecId::generate);
        let record = ExecRecord {
            exec_id: exec_id.clone(),
            sandbox_id: sandbox.id.clone(),
            command: command.command.clone(),
            args: command.args.clone(),
            background: command.background,
            status: ExecStatus::Running,
            exit_code: None,
            started_at: self.clock().now(),
            ended_at: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            detail: None,
        };
        let stdin = command.stdin || command.background;
        let keep_running = command.background || command.keep_on_disconnect;
        let argv = match command.args {
            Some(args) => std::iter::once(command.command).chain(args).collect(),
            None => vec!["/bin/sh".to_owned(), "-c".to_owned(), command.command],
        };
        let mut env = sandbox.env.clone();
        env.extend(command.env);
        let spec = ExecSpec {
            argv,
            env,
            workdir,
            tty: command.tty,
            stdin,
            user: None,
        };
        let data = event_data(&exec_id, form, provider.name());
        self.events().publish_in(
            &sandbox.tenant_id,
            Some(&sandbox.id),
            EventPayload::ExecStarted(data.clone()),
        );
        let starting = Instant::now();
        let session = match provider.exec(&sandbox.id, spec).await {
            Ok(session) => session,
            Err(err) => {
                self.operations()
                    .record(form.metric(), provider.name(), false, starting.elapsed());
                let err = on.failure(err);
                let job = Job::new(record, None, false, self.config().exec.output_buffer_bytes);
                job.end(ExecStatus::Failed, None, self.clock().now());
                self.inner.exec_jobs.add(&sandbox.id, job);
                let data = ExecEventData {
                    error: Some(err.public_message()),
                    ..data
                };
                self.events().publish_in(
                    &sandbox.tenant_id,
                    Some(&sandbox.id),
                    EventPayload::ExecFailed(data),
                );
                return Err(err);
            }
        };
        let started = Instant::now();
        let job = Job::new(
            record,
            Some(Arc::clone(&session.control)),
            stdin,
            self.config().exec.output_buffer_bytes,
        );
        self.inner.exec_jobs.add(&sandbox.id, Arc::clone(&job));
        Ok(RunningExec {
            exec_id,
            job,
            plane: self.clone(),
            sandbox_id: sandbox.id.clone(),
            tenant_id: sandbox.tenant_id.clone(),
            provider: provider.name(),
            form,
            output: Some(session.output),
            exit: Some(session.exit),
            status: None,
            control: session.control,
            started,
            timeout,
            deadline: timeout.map(|t| tokio::time::Instant::now() + t),
            timed_out: false,
            ended: false,
            keep_running,
            detached: false,
        })
    }

    /// `POST /exec` with `background: true`: starts the command and answers at once; it runs
    /// until it exits, its own deadline, a kill or the end of the sandbox.
    pub async fn exec_background(
        &self,
        principal: &Principal,
        id: &SandboxId,
        command: ExecCommand,
    ) -> Result<ExecId, Error> {
        let command = ExecCommand {
            background: true,
            ..command
        };
        let mut running = self
            .start_exec(principal, id, command, ExecForm::Buffered)
            .await?;
        let exec_id = running.exec_id.clone();
        tokio::spawn(async move { while running.next().await.is_some() {} });
        Ok(exec_id)
    }

    /// Buffered exec: runs to the end and returns everything captured (up to
    /// [`BUFFERED_OUTPUT_LIMIT`] per stream).
    pub async fn exec_buffered(
        &self,
        principal: &Principal,
        id: &SandboxId,
        command: ExecCommand,
    ) -> Result<ExecResult, Error> {
        let mut running = self
            .start_exec(principal, id, command, ExecForm::Buffered)
            .await?;
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut held = self.inner.buffered_output.holder();
        let mut truncated = false;
        while let Some(output) = running.next().await {
            match output {
                ExecOutput::Chunk(chunk) => {
                    let buffer = match chunk.stream {
                        StdStream::Stdout => &mut stdout,
                        StdStream::Stderr => &mut stderr,
                    };
                    let room = BUFFERED_OUTPUT_LIMIT.saturating_sub(buffer.len());
                    let kept = held.take(chunk.data.len().min(room));
                    truncated |= kept < chunk.data.len();
                    buffer.extend_from_slice(&chunk.data[..kept]);
                }
                ExecOutput::Ended(ending) => {
                    return Ok(ExecResult {
                        exec_id: running.exec_id.clone(),
                        exit_code: exit_code_on_wire(ending.exit_code),
                        stdout: String::from_utf8_lossy(&stdout).into_owned(),
                        stderr: String::from_utf8_lossy(&stderr).into_owned(),
                        duration: GoDuration::new(ending.duration),
                        timed_out: ending.timed_out,
                        truncated,
                    });
                }
            }
        }
        Err(Error::internal(
            "running a command",
            std::io::Error::other("exec ended without a status"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use bytes::Bytes;
    use svc_provider::{Signal, TtySize};

    /// A command whose kill fails and which never ends by itself.
    struct Unkillable;

    #[async_trait]
    impl ExecControl for Unkillable {
        async fn write_stdin(&self, _: Bytes) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn close_stdin(&self) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn resize(&self, _: TtySize) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn signal(&self, _: Signal) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn kill(&self) -> Result<(), ProviderError> {
            Err(ProviderError::failed("cannot reach the process"))
        }
    }

    /// A buffered command of the test provider, ending as `exit` says, after `output`.
    async fn running(
        output: OutputStream,
        exit: BoxFuture<'static, Result<ExitStatus, ProviderError>>,
        timeout: Option<Duration>,
    ) -> (RunningExec, Arc<Job>) {
        let record = crate::exec_jobs::running_record(&SandboxId::generate());
        let job = Job::new(record.clone(), None, false, 1024);
        let running = RunningExec {
            exec_id: record.exec_id,
            job: Arc::clone(&job),
            plane: ControlPlane::for_tests().await,
            sandbox_id: record.sandbox_id,
            tenant_id: "default".to_owned(),
            provider: "test",
            form: ExecForm::Buffered,
            output: Some(output),
            exit: Some(exit),
            status: None,
            control: Arc::new(Unkillable),
            started: Instant::now(),
            timeout,
            deadline: timeout.map(|timeout| tokio::time::Instant::now() + timeout),
            timed_out: false,
            ended: false,
            keep_running: false,
            detached: false,
        };
        (running, job)
    }

    /// A provider that lost a command's status: no code inside svc, and answers and records
    /// carry the wire's -1.
    #[tokio::test]
    async fn a_lost_exit_status_is_no_code_and_minus_one_on_the_wire() {
        let lost = Box::pin(async { Err(ProviderError::failed("the agent went away")) });
        let (mut running, job) = running(Box::pin(futures::stream::empty()), lost, None).await;
        match running.next().await {
            Some(ExecOutput::Ended(ending)) => {
                assert_eq!((ending.exit_code, ending.timed_out), (None, false));
                assert_eq!(exit_code_on_wire(ending.exit_code), -1);
            }
            other => panic!("expected the ending, got {other:?}"),
        }
        assert_eq!(
            (job.snapshot().status, job.snapshot().exit_code),
            (ExecStatus::Exited, Some(-1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_kill_still_answers_after_the_grace_period() {
        let timeout = Duration::from_millis(50);
        let (mut running, job) = running(
            Box::pin(futures::stream::pending()),
            Box::pin(futures::future::pending()),
            Some(timeout),
        )
        .await;
        let begun = tokio::time::Instant::now();
        match running.next().await {
            Some(ExecOutput::Ended(ending)) => {
                assert!(ending.timed_out);
                assert_eq!(ending.exit_code, Some(TIMEOUT_EXIT_CODE));
            }
            other => panic!("expected the ending, got {other:?}"),
        }
        assert!(begun.elapsed() >= timeout + KILL_GRACE);
        assert_eq!(
            (job.snapshot().status, job.snapshot().exit_code),
            (ExecStatus::TimedOut, Some(TIMEOUT_EXIT_CODE))
        );
        assert!(running.next().await.is_none());
    }
}
