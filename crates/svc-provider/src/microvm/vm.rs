//! Booting one microVM, whichever VMM runs it: the VMM driver starts its processes, and this
//! core waits until the guest's agent answers, within a deadline. A boot that misses the
//! deadline is killed and tried once more; one whose VMM exits is not.
//!
//! Everything a VM owns lives in its own directory (sockets, serial console, VMM log, per-VM
//! disks), removed with it. A VM outlives the svc process that booted it, as a container
//! outlives it: svc restarting (or crashing) does not take its sandboxes down, and the next
//! process finds them by their records. While the booting process lives, a watcher waits on the
//! VMM and reports an exit nobody asked for at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};

use crate::agent::{AgentClient, VsockConnector};
use crate::{ProviderError, RuntimeFailure};
use svc_core::SandboxId;

/// The guest's vsock context ID; each VM has its own vsock device, so every guest can use it.
pub const GUEST_CID: u32 = 3;
/// The host side of the guest's vsock (`CONNECT <port>`), in the VM's directory.
pub const VSOCK_SOCKET: &str = "vsock.sock";
/// The serial console (the sandbox's logs), in the VM's directory.
pub const CONSOLE_LOG: &str = "console.log";
/// What the VMM itself says (its standard error), in the VM's directory.
pub const VMM_LOG: &str = "vmm.log";

/// What the guest kernel may skip: no legacy keyboard controller to probe, no crypto self-tests,
/// no timer and clocksource checks against a clock the VMM provides, and no speculative-execution
/// mitigations between the processes of one sandbox (the VMM is the isolation boundary).
pub const FAST_BOOT_ARGS: &str = "mitigations=off cryptomgr.notests no_timer_check tsc=reliable \
     i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd random.trust_cpu=on";

/// The boot files every VM of a provider shares.
#[derive(Debug, Clone)]
pub struct BootFiles {
    /// The ELF kernel.
    pub kernel: PathBuf,
    /// The initramfs holding the agent and its modules.
    pub initramfs: PathBuf,
}

/// One VM to boot.
#[derive(Debug, Clone)]
pub struct VmSpec {
    /// Its own directory (created; removed on shutdown).
    pub dir: PathBuf,
    /// The root disk image (ext4), which the guest's writes never reach; none boots the
    /// initramfs alone (the KVM probe).
    pub root_disk: Option<PathBuf>,
    /// Memory in MiB.
    pub memory_mb: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Until the agent must answer.
    pub boot_timeout: Duration,
    /// The guest's host name.
    pub hostname: String,
}

impl VmSpec {
    /// The kernel command line every VMM passes, before the driver's own additions: the agent
    /// as init reads `svc.root`, `svc.clock` and `svc.hostname`. [`FAST_BOOT_ARGS`] cut a
    /// third off a boot under emulation (docs/decisions.md, "Booting a microVM here").
    // The guest's clock starts at the host's real time, whatever clock svc's rules run on.
    #[allow(clippy::disallowed_methods)]
    pub fn kernel_args(&self) -> String {
        let mut args = format!(
            "console=ttyS0 panic=-1 quiet {FAST_BOOT_ARGS} svc.clock={} svc.hostname={}",
            chrono::Utc::now().timestamp(),
            self.hostname
        );
        if self.root_disk.is_some() {
            args.push_str(" svc.root=/dev/vda");
        }
        args
    }
}

/// A VMM: starts the processes that run one VM. The first process is the VMM itself, whose
/// exit ends the VM; the others serve it (a vsock backend) and end with it.
#[async_trait]
pub trait Vmm: Send + Sync + 'static {
    /// Starts `spec`'s VM from `files`; on error nothing it started is left running.
    async fn launch(&self, spec: &VmSpec, files: &BootFiles) -> Result<Vec<Child>, ProviderError>;
}

/// A booted VM whose agent answered.
pub struct RunningVm {
    pids: Vec<u32>,
    dir: PathBuf,
    stop: oneshot::Sender<()>,
    stopped: oneshot::Receiver<()>,
    /// From start to the agent's first answer (the boot that succeeded).
    pub boot_time: Duration,
}

impl RunningVm {
    /// The IDs of its processes, the VMM's first.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Stops the VM and its helpers and removes its directory.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.stopped.await;
        let _ = tokio::fs::remove_dir_all(&self.dir).await;
    }
}

/// The last lines of the console log, for error messages.
pub fn console_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join(CONSOLE_LOG)).unwrap_or_default();
    crate::process::last_lines(&text, 5).join(" | ")
}

/// A clear error for a program that could not be started.
pub fn spawn_error(program: &Path, err: std::io::Error) -> ProviderError {
    if err.kind() == std::io::ErrorKind::NotFound {
        ProviderError::Unavailable {
            message: format!("{} is not installed", program.display()),
            source: Some(std::sync::Arc::new(err)),
        }
    } else {
        ProviderError::io(format!("starting {}", program.display()), err)
    }
}

/// Whether the agent announced on the console that it accepts connections.
async fn console_says_serving(dir: &Path) -> bool {
    tokio::fs::read(dir.join(CONSOLE_LOG))
        .await
        .is_ok_and(|console| {
            let line = svc_agent_proto::SERVING_LINE.as_bytes();
            console.windows(line.len()).any(|w| w == line)
        })
}

async fn kill_all(processes: &mut [Child]) {
    for process in processes {
        let _ = process.kill().await;
    }
}

/// Who hears of a VM whose VMM exited on its own.
#[derive(Clone)]
pub struct Watch {
    /// The sandbox the VM runs.
    pub sandbox_id: SandboxId,
    /// Where failures go.
    pub failures: mpsc::UnboundedSender<RuntimeFailure>,
    /// The VMM's name, for the message.
    pub vmm: &'static str,
}

/// Boots `spec` on `vmm`, trying once more when the first boot misses its deadline; once the
/// agent answers, a watcher owns the VM's processes.
pub async fn boot(
    vmm: &dyn Vmm,
    files: &BootFiles,
    spec: &VmSpec,
    watch: Watch,
) -> Result<RunningVm, ProviderError> {
    let (processes, boot_time) = match boot_once(vmm, files, spec).await {
        Err(BootError::Deadline(first)) => {
            tracing::warn!(dir = %spec.dir.display(), error = %first, "a microVM boot missed its deadline; booting again");
            boot_once(vmm, files, spec)
                .await
                .map_err(BootError::into_provider)?
        }
        other => other.map_err(BootError::into_provider)?,
    };
    let pids = processes.iter().filter_map(Child::id).collect();
    let (stop, stop_rx) = oneshot::channel();
    let (stopped_tx, stopped) = oneshot::channel();
    tokio::spawn(supervise(
        processes,
        spec.dir.clone(),
        stop_rx,
        stopped_tx,
        watch,
    ));
    Ok(RunningVm {
        pids,
        dir: spec.dir.clone(),
        stop,
        stopped,
        boot_time,
    })
}

/// Waits for the VMM to exit or to be told to stop; either way its helpers end with it.
async fn supervise(
    mut processes: Vec<Child>,
    dir: PathBuf,
    stop: oneshot::Receiver<()>,
    stopped: oneshot::Sender<()>,
    watch: Watch,
) {
    let Some(vmm) = processes.first_mut() else {
        return;
    };
    tokio::select! {
        status = vmm.wait() => {
            kill_all(&mut processes).await;
            let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
            let message = format!(
                "the {} process of sandbox {} exited unexpectedly ({status}); console: {}",
                watch.vmm,
                watch.sandbox_id,
                console_tail(&dir)
            );
            tracing::warn!(sandbox_id = %watch.sandbox_id, %message, "a microVM ended on its own");
            let _ = watch.failures.send(RuntimeFailure {
                sandbox_id: watch.sandbox_id,
                message,
                provider_wide: true,
            });
        }
        asked = stop => {
            if asked.is_ok() {
                kill_all(&mut processes).await;
            }
            // Otherwise the provider itself is gone (svc shutting down): the VM outlives it,
            // and the next process finds it by its record.
        }
    }
    let _ = stopped.send(());
}

async fn boot_once(
    vmm: &dyn Vmm,
    files: &BootFiles,
    spec: &VmSpec,
) -> Result<(Vec<Child>, Duration), BootError> {
    let started = Instant::now();
    let _ = tokio::fs::remove_dir_all(&spec.dir).await;
    tokio::fs::create_dir_all(&spec.dir).await.map_err(|e| {
        BootError::Failed(ProviderError::io(
            format!("creating {}", spec.dir.display()),
            e,
        ))
    })?;
    let mut processes = vmm.launch(spec, files).await.map_err(BootError::Failed)?;
    let client = AgentClient::new(Arc::new(VsockConnector::new(
        spec.dir.join(VSOCK_SOCKET),
        svc_agent_proto::AGENT_PORT,
    )));
    let deadline = started + spec.boot_timeout;
    let mut serving = false;
    loop {
        if let Some(Ok(Some(status))) = processes.first_mut().map(Child::try_wait) {
            kill_all(&mut processes).await;
            let log = std::fs::read_to_string(spec.dir.join(VMM_LOG)).unwrap_or_default();
            return Err(BootError::Failed(ProviderError::failed(format!(
                "the VMM exited during boot ({status}): {} {}",
                log.trim(),
                console_tail(&spec.dir)
            ))));
        }
        serving = serving || console_says_serving(&spec.dir).await;
        if serving && client.hello().await.is_ok() {
            return Ok((processes, started.elapsed()));
        }
        if Instant::now() > deadline {
            kill_all(&mut processes).await;
            return Err(BootError::Deadline(format!(
                "the guest agent did not answer within {:?}; console: {}",
                spec.boot_timeout,
                console_tail(&spec.dir)
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

enum BootError {
    /// The agent did not answer in time (worth one more try).
    Deadline(String),
    /// Anything else (not worth another).
    Failed(ProviderError),
}

impl BootError {
    fn into_provider(self) -> ProviderError {
        match self {
            BootError::Deadline(message) => ProviderError::failed(message),
            BootError::Failed(err) => err,
        }
    }
}

/// Boots `spec` once, without a retry, and stops it again: how long its agent took to answer.
pub async fn probe(
    vmm: &dyn Vmm,
    files: &BootFiles,
    spec: &VmSpec,
) -> Result<Duration, ProviderError> {
    let mut result = boot_once(vmm, files, spec).await;
    if let Ok((processes, _)) = &mut result {
        kill_all(processes).await;
    }
    let _ = tokio::fs::remove_dir_all(&spec.dir).await;
    result
        .map(|(_, took)| took)
        .map_err(BootError::into_provider)
}
