//! Exec through the engine's exec API: stdout and stderr kept apart (multiplexed stream), TTY
//! with resize, stdin over the hijacked connection. The engine has no call to signal an exec,
//! so signals go to the exec's process on the host (its PID from `inspect_exec`), and a kill
//! takes the whole process tree, as a deadline must.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::Docker;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use rustix::process::Pid;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_stream::wrappers::ReceiverStream;

use super::errors::{container_error, engine_error, status_of};
use super::gate::Gate;
use crate::{
    ExecChunk, ExecControl, ExecSession, ExecSpec, ExecState, ExitStatus, ProviderError, Signal,
    StdStream, TtySize,
};

const CHANNEL_DEPTH: usize = 8;
const OUTPUT_CAPACITY: usize = 64 * 1024;
/// How often, and how far apart, an exec is created again when the engine still calls an
/// unpaused container paused (at most a second in all).
const STALE_PAUSE_RETRIES: u32 = 20;
const STALE_PAUSE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);
/// A TTY exec starts at 0x0 until resized; the command waits this long for its size.
const TTY_SIZE_WAIT: &str = "i=0; while [ $i -lt 300 ]; do case \"$(stty size 2>/dev/null)\" in ''|'0 0') i=$((i+1)); sleep 0.01;; *) break;; esac; done; exec \"$@\"";

struct DockerControl {
    docker: Docker,
    exec_id: String,
    input: Mutex<Option<std::pin::Pin<Box<dyn AsyncWrite + Send>>>>,
    tty: bool,
}

impl DockerControl {
    /// The exec's process ID on this host.
    async fn host_pid(&self) -> Result<Option<Pid>, ProviderError> {
        // The engine marks an exec running, and then records its PID, only after its start
        // call returns, which can be after the process already wrote output; until then it
        // reports neither a PID nor an exit code.
        let mut inspect = self
            .docker
            .inspect_exec(&self.exec_id)
            .await
            .map_err(|e| engine_error("inspecting the exec", e))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut pause = Duration::from_millis(2);
        let started = |i: &bollard::models::ExecInspectResponse| {
            i.running == Some(true) && i.pid.is_some_and(|p| p > 0)
        };
        while !started(&inspect) && inspect.exit_code.is_none() {
            if tokio::time::Instant::now() >= deadline {
                return Err(ProviderError::failed(
                    "the engine never reported the exec as started",
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
            inspect = self
                .docker
                .inspect_exec(&self.exec_id)
                .await
                .map_err(|e| engine_error("inspecting the exec", e))?;
        }
        if inspect.running != Some(true) {
            return Ok(None);
        }
        let pid = inspect
            .pid
            .and_then(|p| i32::try_from(p).ok())
            .and_then(Pid::from_raw);
        let visible = match pid {
            Some(pid) => tokio::fs::try_exists(format!("/proc/{}", pid.as_raw_nonzero()))
                .await
                .unwrap_or(false),
            None => false,
        };
        match pid {
            Some(pid) if visible => Ok(Some(pid)),
            Some(_) => Err(ProviderError::failed(
                "signals need svc to run on the Docker host (the exec's process is not visible here)",
            )),
            None => Ok(None),
        }
    }
}

/// An exec started before svc restarted: its state, and a control that can still signal and
/// kill it (its stdin went with the old connection).
pub(super) async fn reattach(
    docker: &Docker,
    exec_id: &str,
) -> Result<(ExecState, Option<Arc<dyn ExecControl>>), ProviderError> {
    let inspect = match docker.inspect_exec(exec_id).await {
        Ok(inspect) => inspect,
        Err(err) if status_of(&err) == Some(404) => return Ok((ExecState::Gone, None)),
        Err(err) => return Err(engine_error("inspecting the exec", err)),
    };
    let state = match (inspect.running, inspect.exit_code) {
        (Some(true), _) => ExecState::Running,
        (_, Some(code)) => ExecState::Exited(i32::try_from(code).ok()),
        _ => ExecState::Gone,
    };
    let control: Arc<dyn ExecControl> = Arc::new(DockerControl {
        docker: docker.clone(),
        exec_id: exec_id.to_owned(),
        input: Mutex::new(None),
        tty: false,
    });
    Ok((state, (state == ExecState::Running).then_some(control)))
}

/// Every process below `root` on this host, deepest last, found through `/proc`.
fn process_tree(root: Pid) -> Vec<Pid> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // The command name may hold spaces and parentheses; fields resume after the last ')'.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = rest
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<i32>().ok())
            {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut tree = vec![root.as_raw_nonzero().get()];
    let mut index = 0;
    while index < tree.len() {
        if let Some(kids) = children.get(&tree[index]) {
            tree.extend(kids);
        }
        index += 1;
    }
    tree.into_iter().filter_map(Pid::from_raw).collect()
}

#[async_trait]
impl ExecControl for DockerControl {
    async fn write_stdin(&self, data: Bytes) -> Result<(), ProviderError> {
        let mut input = self.input.lock().await;
        let writer = input
            .as_mut()
            .ok_or_else(|| ProviderError::InvalidRequest {
                message: "stdin is closed".into(),
            })?;
        writer.write_all(&data).await?;
        writer.flush().await?;
        Ok(())
    }

    async fn close_stdin(&self) -> Result<(), ProviderError> {
        let mut input = self.input.lock().await;
        if self.tty {
            if let Some(writer) = input.as_mut() {
                let _ = writer.write_all(&[0x04]).await;
                let _ = writer.flush().await;
            }
            return Ok(());
        }
        if let Some(mut writer) = input.take() {
            let _ = writer.shutdown().await;
        }
        Ok(())
    }

    async fn resize(&self, size: TtySize) -> Result<(), ProviderError> {
        if !self.tty {
            return Err(ProviderError::InvalidRequest {
                message: "resize needs a command started with tty: true".into(),
            });
        }
        resize(&self.docker, &self.exec_id, size).await
    }

    async fn signal(&self, signal: Signal) -> Result<(), ProviderError> {
        // The runtime starts every exec as a session and process-group leader, so the group is
        // the command and everything it started.
        match self.host_pid().await? {
            Some(pid) => crate::process::signal_group(pid, signal),
            None => Ok(()),
        }
    }

    async fn kill(&self) -> Result<(), ProviderError> {
        let Some(pid) = self.host_pid().await? else {
            return Ok(());
        };
        // Descendants that left the group (setsid) are still found through their parents.
        // /proc is walked on the blocking pool, not on the async runtime.
        let tree = tokio::task::spawn_blocking(move || process_tree(pid))
            .await
            .unwrap_or_default();
        crate::process::signal_group(pid, Signal::Kill)?;
        for process in tree {
            crate::process::signal_process(process, Signal::Kill)?;
        }
        Ok(())
    }

    fn handle(&self) -> Option<String> {
        Some(self.exec_id.clone())
    }
}

/// Resizes an exec's terminal. Right after start the engine may not have the process yet and
/// refuses; like the docker CLI, retry briefly.
async fn resize(docker: &Docker, exec_id: &str, size: TtySize) -> Result<(), ProviderError> {
    let options = ResizeExecOptions {
        height: size.rows,
        width: size.cols,
    };
    let mut last = None;
    for _ in 0..20 {
        match docker.resize_exec(exec_id, options).await {
            Ok(()) => return Ok(()),
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match last {
        Some(err) => Err(engine_error("resizing the terminal", err)),
        None => Ok(()),
    }
}

/// Waits until the engine reports the exec finished, then returns its exit code.
async fn exit_code(docker: &Docker, exec_id: &str) -> Result<ExitStatus, ProviderError> {
    for attempt in 0..500u32 {
        let inspect = docker
            .inspect_exec(exec_id)
            .await
            .map_err(|e| engine_error("inspecting the exec", e))?;
        if inspect.running != Some(true) {
            // Without a code the exec's end is not known: the control plane reports it so.
            let code = inspect.exit_code.and_then(|code| i32::try_from(code).ok());
            return code.map(|code| ExitStatus { code }).ok_or_else(|| {
                ProviderError::failed("the engine reported the exec ended without an exit code")
            });
        }
        tokio::time::sleep(Duration::from_millis(if attempt < 20 { 2 } else { 20 })).await;
    }
    Err(ProviderError::failed(
        "the engine never reported the exec as finished",
    ))
}

/// Starts `spec` in `container`.
pub(super) async fn start(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
    user: Option<&str>,
    spec: &ExecSpec,
    gate: &Arc<Gate>,
) -> Result<ExecSession, ProviderError> {
    let tty = spec.tty.is_some();
    let exec_id = create(docker, container, sandbox_id, exec_options(user, spec)).await?;
    // Known to pauses from before its start: the start may still be under way when the
    // engine answers.
    gate.started(&exec_id);
    let started = docker
        .start_exec(
            &exec_id,
            Some(StartExecOptions {
                detach: false,
                tty,
                output_capacity: Some(OUTPUT_CAPACITY),
            }),
        )
        .await;
    let Ok(StartExecResults::Attached { output, input }) = started else {
        gate.settled(&exec_id);
        return Err(match started {
            Err(e) => engine_error("starting the exec", e),
            Ok(_) => ProviderError::failed("the engine detached the exec"),
        });
    };
    if let Some(size) = spec.tty {
        if let Err(err) = resize(docker, &exec_id, size).await {
            // A command that already ended has no terminal to size.
            tracing::debug!(error = %err, "initial terminal size not applied");
        }
    }
    // The engine starts the process even when the program does not exist; it reports 126/127
    // with the runtime's message, which the caller sees as the command's own output.
    let (sender, receiver) = mpsc::channel(CHANNEL_DEPTH);
    let (exit_tx, exit_rx) = oneshot::channel();
    tokio::spawn(drive(
        output,
        sender,
        docker.clone(),
        exec_id.clone(),
        Arc::clone(gate),
        exit_tx,
    ));
    let control = Arc::new(DockerControl {
        docker: docker.clone(),
        exec_id,
        input: Mutex::new(Some(input)),
        tty,
    });
    let exit = async move {
        exit_rx
            .await
            .unwrap_or_else(|_| Err(ProviderError::failed("the exec driver stopped")))
    }
    .boxed();
    Ok(ExecSession {
        output: Box::pin(ReceiverStream::new(receiver)),
        control,
        exit,
    })
}

/// The engine's exec for `spec`: a terminal's command waits for its size first, and runs with
/// `TERM`; a spec's user brings its `HOME`.
fn exec_options(user: Option<&str>, spec: &ExecSpec) -> CreateExecOptions<String> {
    let tty = spec.tty.is_some();
    let mut cmd = spec.argv.clone();
    if tty {
        let mut wrapped = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            TTY_SIZE_WAIT.to_owned(),
            "sh".to_owned(),
        ];
        wrapped.append(&mut cmd);
        cmd = wrapped;
    }
    let mut env: Vec<String> = Vec::new();
    let mut user = user.map(str::to_owned);
    if let Some(as_user) = &spec.user {
        // The spec's own environment may still name another HOME.
        env.push(format!("HOME={}", as_user.home));
        user = Some(format!("{}:{}", as_user.uid, as_user.gid));
    }
    env.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
    if tty {
        env.push("TERM=xterm-256color".to_owned());
    }
    CreateExecOptions {
        attach_stdin: Some(spec.stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(tty),
        env: Some(env),
        cmd: Some(cmd),
        working_dir: spec.workdir.as_ref().map(|p| p.as_str().to_owned()),
        user,
        ..Default::default()
    }
}

/// Creates the exec in `container`; its engine ID.
async fn create(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
    options: CreateExecOptions<String>,
) -> Result<String, ProviderError> {
    let mut tries = 0;
    loop {
        match docker.create_exec(container, options.clone()).await {
            Ok(created) => return Ok(created.id),
            // The gate (held by the caller) knows the container is not paused; the engine may
            // still say so just after an unpause, when containerd's late "paused" event has
            // set its state back for a moment (Engine 20.10). Asked again, it has caught up.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message,
            }) if message.contains("is paused") && tries < STALE_PAUSE_RETRIES => {
                tries += 1;
                tokio::time::sleep(STALE_PAUSE_WAIT).await;
            }
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message,
            }) => {
                return Err(ProviderError::InvalidRequest {
                    message: format!("cannot run commands: {message}"),
                })
            }
            Err(other) => return Err(container_error(sandbox_id, "creating the exec", other)),
        }
    }
}

/// Forwards the exec's output until it closes, then learns its exit code and lets pauses
/// know it has settled.
async fn drive(
    mut output: futures::stream::BoxStream<'static, Result<LogOutput, bollard::errors::Error>>,
    sender: mpsc::Sender<Result<ExecChunk, ProviderError>>,
    docker: Docker,
    exec_id: String,
    gate: Arc<Gate>,
    exit_tx: oneshot::Sender<Result<ExitStatus, ProviderError>>,
) {
    while let Some(item) = output.next().await {
        let chunk = match item {
            Ok(LogOutput::StdErr { message }) => ExecChunk {
                stream: StdStream::Stderr,
                data: message,
            },
            Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => ExecChunk {
                stream: StdStream::Stdout,
                data: message,
            },
            Ok(LogOutput::StdIn { .. }) => continue,
            Err(err) => {
                let _ = sender
                    .send(Err(engine_error("reading exec output", err)))
                    .await;
                break;
            }
        };
        if chunk.data.is_empty() {
            continue;
        }
        if sender.send(Ok(chunk)).await.is_err() {
            break;
        }
    }
    drop(sender);
    let exit = exit_code(&docker, &exec_id).await;
    gate.settled(&exec_id);
    let _ = exit_tx.send(exit);
}
