//! The QEMU driver: QEMU's `microvm` machine, its vsock through `vhost-device-vsock` (whose host
//! side is Firecracker's `CONNECT <port>` protocol), one backend process per VM.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::process::{Child, Command};

use super::vm::{
    spawn_error, BootFiles, VmSpec, Vmm, CONSOLE_LOG, GUEST_CID, VMM_LOG, VSOCK_SOCKET,
};
use crate::ProviderError;

/// The QEMU driver.
#[derive(Debug, Clone)]
pub struct QemuVmm {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// `vhost-device-vsock`.
    pub vsock_backend: PathBuf,
    /// `kvm` or `tcg`.
    pub accel: &'static str,
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

impl QemuVmm {
    fn command(
        &self,
        spec: &VmSpec,
        files: &BootFiles,
        vhost_socket: &Path,
        log: std::fs::File,
    ) -> Command {
        let memory = format!("{}M", spec.memory_mb.max(64));
        let mut command = Command::new(&self.qemu);
        command
            .arg("-M")
            .arg("microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem")
            .args(["-accel", self.accel, "-m", &memory])
            .args(["-smp", &spec.vcpus.max(1).to_string()])
            .args(["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"])
            .arg("-serial")
            .arg(format!("file:{}", spec.dir.join(CONSOLE_LOG).display()))
            .arg("-object")
            .arg(format!(
                "memory-backend-memfd,id=mem,size={memory},share=on"
            ))
            .arg("-kernel")
            .arg(&files.kernel)
            .arg("-initrd")
            .arg(&files.initramfs)
            .arg("-append")
            .arg(format!(
                "{} reboot=t tsc_early_khz={}",
                spec.kernel_args(),
                tsc_khz()
            ))
            .arg("-chardev")
            .arg(format!("socket,id=vsock,path={}", vhost_socket.display()))
            .args(["-device", "vhost-user-vsock-device,chardev=vsock"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // A file, not a pipe: QEMU outlives this process, and a pipe nobody reads would
            // end it on its next message.
            .stderr(Stdio::from(log));
        if let Some(disk) = &spec.root_disk {
            command
                .arg("-drive")
                .arg(format!(
                    "id=root,file={},format=raw,if=none,snapshot=on",
                    disk.display()
                ))
                .args(["-device", "virtio-blk-device,drive=root"]);
        }
        command
    }

    async fn start_backend(
        &self,
        spec: &VmSpec,
        vhost_socket: &Path,
    ) -> Result<Child, ProviderError> {
        let mut backend = Command::new(&self.vsock_backend)
            .arg("--guest-cid")
            .arg(GUEST_CID.to_string())
            .arg("--socket")
            .arg(vhost_socket)
            .arg("--uds-path")
            .arg(spec.dir.join(VSOCK_SOCKET))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| spawn_error(&self.vsock_backend, e))?;
        let deadline = Instant::now() + spec.boot_timeout;
        while !vhost_socket.exists() {
            if Instant::now() > deadline || backend.try_wait().ok().flatten().is_some() {
                let _ = backend.kill().await;
                return Err(ProviderError::failed(format!(
                    "{} did not open its socket",
                    self.vsock_backend.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(backend)
    }
}

#[async_trait]
impl Vmm for QemuVmm {
    async fn launch(&self, spec: &VmSpec, files: &BootFiles) -> Result<Vec<Child>, ProviderError> {
        let vhost_socket = spec.dir.join("vhost.sock");
        let mut backend = self.start_backend(spec, &vhost_socket).await?;
        let started = std::fs::File::create(spec.dir.join(VMM_LOG))
            .map_err(|e| ProviderError::io("creating the QEMU log", e))
            .and_then(|log| {
                self.command(spec, files, &vhost_socket, log)
                    .spawn()
                    .map_err(|e| spawn_error(&self.qemu, e))
            });
        match started {
            Ok(qemu) => Ok(vec![qemu, backend]),
            Err(err) => {
                let _ = backend.kill().await;
                Err(err)
            }
        }
    }
}
