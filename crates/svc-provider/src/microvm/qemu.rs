//! One QEMU `microvm` guest: its vsock backend (`vhost-device-vsock`, whose host side is
//! Firecracker's `CONNECT <port>` protocol), the QEMU process, and the deadline within which the
//! guest's agent must answer. A boot that misses the deadline is killed and tried once more.
//!
//! Everything a VM owns lives in its own directory (sockets, console log), removed with it.
//! A VM outlives the svc process that booted it, as a container outlives it: svc restarting
//! (or crashing) does not take its sandboxes down, and the next process finds them by their
//! records.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::agent::{AgentClient, VsockConnector};
use crate::ProviderError;

/// The guest's vsock context ID; each VM has its own backend, so every guest can use the same.
const GUEST_CID: u32 = 3;

/// The binaries and boot files every VM of a provider shares.
#[derive(Debug, Clone)]
pub struct QemuHost {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// `vhost-device-vsock`.
    pub vsock_backend: PathBuf,
    /// The ELF kernel.
    pub kernel: PathBuf,
    /// The initramfs holding the agent and its modules.
    pub initramfs: PathBuf,
    /// `kvm` or `tcg`.
    pub accel: String,
}

/// One VM to boot.
#[derive(Debug, Clone)]
pub struct VmSpec {
    /// Its own directory (created; removed on shutdown).
    pub dir: PathBuf,
    /// The root disk image (ext4); the guest's writes never reach it.
    pub root_disk: PathBuf,
    /// Memory in MiB.
    pub memory_mb: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Until the agent must answer.
    pub boot_timeout: Duration,
    /// The guest's host name.
    pub hostname: String,
}

/// A booted VM whose agent answers.
pub struct RunningVm {
    qemu: Child,
    backend: Child,
    dir: PathBuf,
    client: AgentClient,
    /// From start to the agent's first answer (the boot that succeeded).
    pub boot_time: Duration,
}

impl RunningVm {
    /// The agent inside.
    pub fn agent(&self) -> &AgentClient {
        &self.client
    }

    /// The QEMU process's ID.
    pub fn pid(&self) -> Option<u32> {
        self.qemu.id()
    }

    /// The vsock backend's process ID.
    pub fn backend_pid(&self) -> Option<u32> {
        self.backend.id()
    }

    /// Stops the VM and its backend and removes its directory.
    pub async fn shutdown(mut self) {
        stop(&mut self.qemu, &mut self.backend).await;
        let _ = tokio::fs::remove_dir_all(&self.dir).await;
    }
}

async fn stop(qemu: &mut Child, backend: &mut Child) {
    let _ = qemu.kill().await;
    let _ = backend.kill().await;
}

/// The TSC frequency the guest is told, so it does not calibrate it: calibration under
/// emulation hangs now and then (decisions, "Booting a microVM here").
fn tsc_khz() -> u64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map_or(2_000_000, |mhz| (mhz * 1000.0) as u64)
}

/// The last lines of the console log, for error messages.
fn console_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("console.log")).unwrap_or_default();
    crate::process::last_lines(&text, 5).join(" | ")
}

fn spawn_error(program: &Path, err: &std::io::Error) -> ProviderError {
    if err.kind() == std::io::ErrorKind::NotFound {
        ProviderError::Unavailable {
            message: format!("{} is not installed", program.display()),
        }
    } else {
        ProviderError::failed(format!("starting {}: {err}", program.display()))
    }
}

impl QemuHost {
    /// Boots `spec`, trying once more when the first boot misses its deadline.
    pub async fn boot(&self, spec: &VmSpec) -> Result<RunningVm, ProviderError> {
        match self.boot_once(spec).await {
            Err(BootError::Deadline(first)) => {
                tracing::warn!(dir = %spec.dir.display(), error = %first, "a microVM boot missed its deadline; booting again");
                self.boot_once(spec).await.map_err(BootError::into_provider)
            }
            other => other.map_err(BootError::into_provider),
        }
    }

    fn qemu_command(&self, spec: &VmSpec, vhost_socket: &Path, log: std::fs::File) -> Command {
        let memory = format!("{}M", spec.memory_mb.max(64));
        let mut command = Command::new(&self.qemu);
        command
            .arg("-M")
            .arg("microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem")
            .args(["-accel", &self.accel, "-m", &memory])
            .args(["-smp", &spec.vcpus.max(1).to_string()])
            .args(["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"])
            .arg("-serial")
            .arg(format!("file:{}", spec.dir.join("console.log").display()))
            .arg("-object")
            .arg(format!(
                "memory-backend-memfd,id=mem,size={memory},share=on"
            ))
            .arg("-kernel")
            .arg(&self.kernel)
            .arg("-initrd")
            .arg(&self.initramfs)
            .arg("-append")
            .arg(format!(
                "console=ttyS0 reboot=t panic=-1 quiet tsc_early_khz={} svc.root=/dev/vda \
                 svc.clock={} svc.hostname={}",
                tsc_khz(),
                chrono::Utc::now().timestamp(),
                spec.hostname
            ))
            .arg("-drive")
            .arg(format!(
                "id=root,file={},format=raw,if=none,snapshot=on",
                spec.root_disk.display()
            ))
            .args(["-device", "virtio-blk-device,drive=root"])
            .arg("-chardev")
            .arg(format!("socket,id=vsock,path={}", vhost_socket.display()))
            .args(["-device", "vhost-user-vsock-device,chardev=vsock"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // A file, not a pipe: QEMU outlives this process, and a pipe nobody reads would
            // end it on its next message.
            .stderr(Stdio::from(log));
        command
    }

    async fn boot_once(&self, spec: &VmSpec) -> Result<RunningVm, BootError> {
        let started = Instant::now();
        let _ = tokio::fs::remove_dir_all(&spec.dir).await;
        tokio::fs::create_dir_all(&spec.dir).await.map_err(|e| {
            BootError::Failed(ProviderError::failed(format!(
                "creating {}: {e}",
                spec.dir.display()
            )))
        })?;
        let vhost_socket = spec.dir.join("vhost.sock");
        let vsock_socket = spec.dir.join("vsock.sock");
        let mut backend = Command::new(&self.vsock_backend)
            .arg("--guest-cid")
            .arg(GUEST_CID.to_string())
            .arg("--socket")
            .arg(&vhost_socket)
            .arg("--uds-path")
            .arg(&vsock_socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BootError::Failed(spawn_error(&self.vsock_backend, &e)))?;
        let deadline = started + spec.boot_timeout;
        while !vhost_socket.exists() {
            if Instant::now() > deadline || backend.try_wait().ok().flatten().is_some() {
                let _ = backend.kill().await;
                return Err(BootError::Failed(ProviderError::failed(format!(
                    "{} did not open its socket",
                    self.vsock_backend.display()
                ))));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let log = match std::fs::File::create(spec.dir.join("qemu.log")) {
            Ok(log) => log,
            Err(err) => {
                let _ = backend.kill().await;
                return Err(BootError::Failed(ProviderError::failed(format!(
                    "creating the QEMU log: {err}"
                ))));
            }
        };
        let mut qemu = match self.qemu_command(spec, &vhost_socket, log).spawn() {
            Ok(qemu) => qemu,
            Err(err) => {
                let _ = backend.kill().await;
                return Err(BootError::Failed(spawn_error(&self.qemu, &err)));
            }
        };
        let client = AgentClient::new(Arc::new(VsockConnector::new(
            &vsock_socket,
            svc_agent_proto::AGENT_PORT,
        )));
        loop {
            if let Ok(Some(status)) = qemu.try_wait() {
                let stderr = std::fs::read_to_string(spec.dir.join("qemu.log")).unwrap_or_default();
                let _ = backend.kill().await;
                return Err(BootError::Failed(ProviderError::failed(format!(
                    "qemu exited during boot ({status}): {} {}",
                    stderr.trim(),
                    console_tail(&spec.dir)
                ))));
            }
            if client.hello().await.is_ok() {
                return Ok(RunningVm {
                    qemu,
                    backend,
                    dir: spec.dir.clone(),
                    client,
                    boot_time: started.elapsed(),
                });
            }
            if Instant::now() > deadline {
                stop(&mut qemu, &mut backend).await;
                return Err(BootError::Deadline(format!(
                    "the guest agent did not answer within {:?}; console: {}",
                    spec.boot_timeout,
                    console_tail(&spec.dir)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
