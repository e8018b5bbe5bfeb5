//! The microVM providers (decisions §14), `qemu` and `firecracker`: one core, two VMM drivers.
//! Each sandbox is one guest booted from the shared kernel and initramfs (the agent as init)
//! and a root disk built per image, reached through its agent over vsock.
//!
//! Each VM lives in `data_dir/<sandbox id>/`: sockets, the serial console (the sandbox's logs),
//! `runtime.json` (image, labels, process IDs). The record is what makes a VM findable after svc
//! itself restarts or crashes: its status comes from the VMM process it names, its agent from
//! the socket beside it, and reconciliation lists these directories.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use svc_core::config::{
    FirecrackerProviderConfig, QemuAccel, QemuProviderConfig, PROVIDER_FIRECRACKER, PROVIDER_QEMU,
};
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::{Capability, SandboxId};
use tokio::sync::{mpsc, Mutex, OnceCell};

use super::firecracker::FirecrackerVmm;
use super::host::Kvm;
use super::images::RootfsCache;
use super::qemu::QemuVmm;
use super::vm::{self, BootFiles, RunningVm, VmSpec, Vmm, Watch, VSOCK_SOCKET};
use crate::agent::{AgentClient, VsockConnector};
use crate::{
    ByteStream, ExecSession, ExecSpec, FileInfo, Provider, ProviderError, RuntimeFailure,
    RuntimeInfo, RuntimeStatus, SnapshotInfo, SpawnSpec, Upload,
};

const CAPABILITIES: &[Capability] = &[
    Capability::Spawn,
    Capability::Exec,
    Capability::ExecStream,
    Capability::Files,
    Capability::Console,
    Capability::Health,
    Capability::RuntimeInventory,
    Capability::Snapshots,
    Capability::Microvm,
    Capability::VsockAgent,
    Capability::Pause,
];

/// What `runtime.json` records about a VM.
#[derive(Debug, Serialize, Deserialize)]
struct VmRecord {
    image: String,
    labels: BTreeMap<String, String>,
    /// The sandbox's environment, under every command's own.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The VMM's process ID, then its helpers' (a vsock backend).
    #[serde(default)]
    pids: Vec<u32>,
}

impl VmRecord {
    fn vmm_pid(&self) -> Option<u32> {
        self.pids.first().copied()
    }
}

/// Which accelerator QEMU uses, and why.
#[derive(Debug, Clone)]
struct Accel {
    accel: &'static str,
    why: String,
}

/// The VMM-specific half of a provider.
enum Driver {
    Qemu {
        config: QemuProviderConfig,
        /// `auto`'s probe result, decided once.
        probed: Arc<OnceCell<Accel>>,
    },
    Firecracker {
        config: FirecrackerProviderConfig,
    },
}

/// The paths and limits both drivers share.
struct Common {
    kernel_path: PathBuf,
    agent_path: PathBuf,
    data_dir: PathBuf,
    rootfs_dir: PathBuf,
    boot_timeout: Duration,
}

/// A microVM provider: `qemu` or `firecracker`.
pub struct MicrovmProvider {
    driver: Driver,
    kernel_path: PathBuf,
    agent_path: PathBuf,
    data_dir: PathBuf,
    boot_timeout: Duration,
    images: RootfsCache,
    initramfs: OnceCell<PathBuf>,
    /// The VMs this process booted, whose processes it watches.
    vms: Mutex<HashMap<SandboxId, RunningVm>>,
    failures: mpsc::UnboundedSender<RuntimeFailure>,
    failures_rx: std::sync::Mutex<Option<mpsc::UnboundedReceiver<RuntimeFailure>>>,
    kvm: Kvm,
    /// The VMM's `--version`, once a health check ran it.
    vmm_version: OnceLock<String>,
}

/// Whether the process with this ID runs (a zombie does not) and is one of `dir`'s VM: its
/// command line names the VM's directory, so a recycled process ID is never taken for it.
fn runs_vm(pid: u32, dir: &Path) -> bool {
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    });
    // QEMU and its backend name files in the directory in their arguments; Firecracker runs
    // in it.
    let inside = [dir.as_os_str().as_encoded_bytes(), b"/"].concat();
    running
        && (std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.windows(inside.len()).any(|w| w == inside.as_slice()))
            || std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
}

/// Every running process of `dir`'s VM (see [`runs_vm`]).
fn processes_of(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id() && runs_vm(*pid, dir))
        .collect()
}

/// Decides `auto`: KVM when a probe boot under it answers within the boot timeout.
async fn probe_accel(
    kvm: Kvm,
    vmm: QemuVmm,
    files: BootFiles,
    dir: PathBuf,
    timeout: Duration,
) -> Accel {
    if !kvm.present() {
        return Accel {
            accel: "tcg",
            why: format!("KVM is {}", kvm.describe()),
        };
    }
    let spec = VmSpec {
        dir,
        root_disk: None,
        memory_mb: 128,
        vcpus: 1,
        boot_timeout: timeout,
        hostname: "kvm-probe".to_owned(),
    };
    let vmm = QemuVmm {
        accel: "kvm",
        ..vmm
    };
    let accel = match vm::probe(&vmm, &files, &spec).await {
        Ok(took) => Accel {
            accel: "kvm",
            why: format!("a probe boot under KVM answered in {} ms", took.as_millis()),
        },
        Err(err) => Accel {
            accel: "tcg",
            why: format!("a probe boot under KVM failed: {err}"),
        },
    };
    tracing::info!(accel = accel.accel, why = %accel.why, "qemu: accelerator chosen");
    accel
}

/// The shared keys, which both configurations spell alike.
macro_rules! common_keys {
    ($config:expr) => {
        Common {
            kernel_path: $config.kernel_path.clone(),
            agent_path: $config.agent_path.clone(),
            data_dir: $config.data_dir.clone(),
            rootfs_dir: $config.rootfs_dir.clone(),
            boot_timeout: $config.boot_timeout.as_std(),
        }
    };
}

impl MicrovmProvider {
    /// The `qemu` provider on `config` (paths are checked by [`Provider::health`], not here),
    /// exporting images through `docker`.
    pub fn qemu(
        config: QemuProviderConfig,
        docker: Option<Arc<crate::docker::DockerProvider>>,
    ) -> Self {
        let common = common_keys!(config);
        let driver = Driver::Qemu {
            config,
            probed: Arc::new(OnceCell::new()),
        };
        Self::new(driver, common, docker)
    }

    /// The `firecracker` provider on `config`, exporting images through `docker`.
    pub fn firecracker(
        config: FirecrackerProviderConfig,
        docker: Option<Arc<crate::docker::DockerProvider>>,
    ) -> Self {
        let common = common_keys!(config);
        Self::new(Driver::Firecracker { config }, common, docker)
    }

    fn new(
        driver: Driver,
        common: Common,
        docker: Option<Arc<crate::docker::DockerProvider>>,
    ) -> Self {
        let name = match &driver {
            Driver::Qemu { .. } => PROVIDER_QEMU,
            Driver::Firecracker { .. } => PROVIDER_FIRECRACKER,
        };
        let data_dir = if common.data_dir.as_os_str().is_empty() {
            std::env::temp_dir().join(format!("svc-{name}"))
        } else {
            common.data_dir
        };
        let rootfs_dir = if common.rootfs_dir.as_os_str().is_empty() {
            data_dir.join("rootfs")
        } else {
            common.rootfs_dir
        };
        let kernel = common
            .kernel_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (failures, failures_rx) = mpsc::unbounded_channel();
        MicrovmProvider {
            driver,
            images: RootfsCache::new(rootfs_dir, kernel, docker),
            kernel_path: common.kernel_path,
            agent_path: common.agent_path,
            boot_timeout: common.boot_timeout,
            data_dir,
            initramfs: OnceCell::new(),
            vms: Mutex::new(HashMap::new()),
            failures,
            failures_rx: std::sync::Mutex::new(Some(failures_rx)),
            kvm: Kvm::detect(),
            vmm_version: OnceLock::new(),
        }
    }

    fn vm_dir(&self, id: &SandboxId) -> PathBuf {
        self.data_dir.join(id.as_str())
    }

    fn agent(&self, id: &SandboxId) -> AgentClient {
        AgentClient::new(Arc::new(VsockConnector::new(
            self.vm_dir(id).join(VSOCK_SOCKET),
            svc_agent_proto::AGENT_PORT,
        )))
    }

    /// The record of a sandbox whose VM exists.
    async fn existing(&self, id: &SandboxId) -> Result<VmRecord, ProviderError> {
        self.record(id)
            .await
            .ok_or_else(|| ProviderError::RuntimeNotFound { id: id.to_string() })
    }

    /// The agent of a sandbox whose VM exists.
    async fn existing_agent(&self, id: &SandboxId) -> Result<AgentClient, ProviderError> {
        self.existing(id).await?;
        Ok(self.agent(id))
    }

    /// The kernel and the initramfs (agent and modules), built once per process from the
    /// configured agent and the `modules/` directory beside the kernel.
    async fn boot_files(&self) -> Result<BootFiles, ProviderError> {
        let initramfs =
            self.initramfs
                .get_or_try_init(|| async {
                    let modules = self
                        .kernel_path
                        .parent()
                        .unwrap_or(Path::new("/"))
                        .join("modules");
                    let (agent, path) = (
                        self.agent_path.clone(),
                        self.data_dir.join("initramfs.cpio"),
                    );
                    tokio::fs::create_dir_all(&self.data_dir).await?;
                    let image = tokio::task::spawn_blocking(move || {
                        super::initramfs::build(&agent, &modules)
                    })
                    .await
                    .map_err(|e| ProviderError::caused("building the initramfs", e))?
                    .map_err(|e| {
                        ProviderError::io(
                            format!("building the initramfs from {}", self.agent_path.display()),
                            e,
                        )
                    })?;
                    tokio::fs::write(&path, image).await?;
                    Ok::<_, ProviderError>(path)
                })
                .await?;
        Ok(BootFiles {
            kernel: self.kernel_path.clone(),
            initramfs: initramfs.clone(),
        })
    }

    /// The probe of `auto`, run once: by [`Provider::warm_up`] at start-up, or by the first
    /// spawn, whichever comes first (the other waits for its result).
    fn probe(
        &self,
        files: &BootFiles,
    ) -> Option<impl std::future::Future<Output = Accel> + Send + 'static> {
        let Driver::Qemu { config, probed } = &self.driver else {
            return None;
        };
        if config.accel != QemuAccel::Auto {
            return None;
        }
        let (probed, files) = (Arc::clone(probed), files.clone());
        let vmm = self.qemu_vmm(config, "kvm");
        let (dir, timeout) = (self.data_dir.join("kvm-probe"), self.boot_timeout);
        let kvm = self.kvm.clone();
        Some(async move {
            probed
                .get_or_init(|| probe_accel(kvm, vmm, files, dir, timeout))
                .await
                .clone()
        })
    }

    fn qemu_vmm(&self, config: &QemuProviderConfig, accel: &'static str) -> QemuVmm {
        QemuVmm {
            qemu: config.qemu_path.clone(),
            vsock_backend: config.vsock_backend_path.clone(),
            accel,
        }
    }

    /// The driver that boots the next VM.
    async fn vmm(&self, files: &BootFiles) -> Box<dyn Vmm> {
        match &self.driver {
            Driver::Qemu { config, .. } => {
                let accel = match (config.accel.as_qemu(), self.probe(files)) {
                    (Some(accel), _) => accel,
                    (None, Some(probe)) => probe.await.accel,
                    (None, None) => "tcg",
                };
                Box::new(self.qemu_vmm(config, accel))
            }
            Driver::Firecracker { config } => Box::new(FirecrackerVmm {
                firecracker: config.firecracker_path.clone(),
            }),
        }
    }

    async fn spawn_inner(&self, spec: &SpawnSpec) -> Result<(), ProviderError> {
        let disk = self.images.root_disk(&spec.image, &spec.progress).await?;
        let files = self.boot_files().await?;
        let vmm = self.vmm(&files).await;
        let dir = self.vm_dir(&spec.id);
        let watch = Watch {
            sandbox_id: spec.id.clone(),
            failures: self.failures.clone(),
            vmm: self.name(),
        };
        let vm_spec = VmSpec {
            dir: dir.clone(),
            root_disk: Some(disk),
            memory_mb: spec.memory_mb,
            vcpus: spec.vcpus,
            boot_timeout: self.boot_timeout,
            hostname: spec.id.as_str().to_owned(),
        };
        let vm = vm::boot(vmm.as_ref(), &files, &vm_spec, watch).await?;
        let record = VmRecord {
            image: spec.image.clone(),
            labels: spec.labels.clone(),
            env: spec.env.clone(),
            pids: vm.pids().to_vec(),
        };
        let json = serde_json::to_vec(&record)
            .map_err(|e| ProviderError::caused("encoding the runtime record", e))?;
        if let Err(err) = tokio::fs::write(dir.join("runtime.json"), json).await {
            vm.shutdown().await;
            return Err(ProviderError::io("recording the VM", err));
        }
        tracing::info!(sandbox_id = %spec.id, provider = self.name(), boot_ms = vm.boot_time.as_millis() as u64, "microVM booted");
        self.vms.lock().await.insert(spec.id.clone(), vm);
        Ok(())
    }

    /// Pauses (`SIGSTOP`) or resumes (`SIGCONT`) the VM's VMM process: every vCPU and device
    /// thread stops with it, which is what the VMM's own pause does to the guest. The vsock
    /// backend is left running; nothing reaches the agent while the sandbox is paused.
    async fn freeze(&self, id: &SandboxId, frozen: bool) -> Result<(), ProviderError> {
        let dir = self.vm_dir(id);
        let pid = self
            .record(id)
            .await
            .and_then(|record| record.vmm_pid())
            .filter(|pid| runs_vm(*pid, &dir))
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| ProviderError::RuntimeNotFound { id: id.to_string() })?;
        let signal = if frozen {
            rustix::process::Signal::STOP
        } else {
            rustix::process::Signal::CONT
        };
        rustix::process::kill_process(pid, signal)
            .map_err(|e| ProviderError::caused(format!("signalling the VMM of {id}"), e))
    }

    async fn record(&self, id: &SandboxId) -> Option<VmRecord> {
        let bytes = tokio::fs::read(self.vm_dir(id).join("runtime.json"))
            .await
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Checks the binaries a driver runs, keeping the VMM's version for the provider detail.
    async fn check_binaries(&self) -> Result<(), ProviderError> {
        let (key, vmm, helper) = match &self.driver {
            Driver::Qemu { config, .. } => (
                "qemu_path",
                &config.qemu_path,
                Some(&config.vsock_backend_path),
            ),
            Driver::Firecracker { config } => ("firecracker_path", &config.firecracker_path, None),
        };
        let unavailable = |key: &str, err: String| {
            ProviderError::unavailable(format!("providers.{}.{key}: {err}", self.name()))
        };
        let version = super::host::version(vmm)
            .await
            .map_err(|e| unavailable(key, e))?;
        let _ = self.vmm_version.set(version);
        if let Some(helper) = helper {
            super::host::version(helper)
                .await
                .map_err(|e| unavailable("vsock_backend_path", e))?;
        }
        if matches!(self.driver, Driver::Firecracker { .. }) && !self.kvm.present() {
            return Err(ProviderError::unavailable(format!(
                "Firecracker needs KVM, which is {}",
                self.kvm.describe()
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl Provider for MicrovmProvider {
    fn name(&self) -> &'static str {
        match self.driver {
            Driver::Qemu { .. } => PROVIDER_QEMU,
            Driver::Firecracker { .. } => PROVIDER_FIRECRACKER,
        }
    }

    fn capabilities(&self) -> &'static [Capability] {
        CAPABILITIES
    }

    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut config = serde_json::Map::new();
        let path = |p: &Path| serde_json::Value::from(p.display().to_string());
        let vmm_path = match &self.driver {
            Driver::Qemu {
                config: qemu,
                probed,
            } => {
                config.insert("qemu_path".into(), path(&qemu.qemu_path));
                config.insert("vsock_backend_path".into(), path(&qemu.vsock_backend_path));
                config.insert("vsock_backend".into(), path(&qemu.vsock_backend_path));
                let accel = match (qemu.accel, probed.get()) {
                    (QemuAccel::Auto, Some(probed)) => {
                        format!("auto: {} ({})", probed.accel, probed.why)
                    }
                    (QemuAccel::Auto, None) => "auto (the KVM probe has not finished)".to_owned(),
                    (QemuAccel::Kvm, _) => "kvm".to_owned(),
                    (QemuAccel::Tcg, _) => "tcg".to_owned(),
                };
                config.insert("accel".into(), accel.into());
                &qemu.qemu_path
            }
            Driver::Firecracker {
                config: firecracker,
            } => {
                config.insert(
                    "firecracker_path".into(),
                    path(&firecracker.firecracker_path),
                );
                config.insert(
                    "vsock_backend".into(),
                    "firecracker's own (Unix socket per VM)".into(),
                );
                &firecracker.firecracker_path
            }
        };
        let vmm = match self.vmm_version.get() {
            Some(version) => format!("{} ({version})", vmm_path.display()),
            None => vmm_path.display().to_string(),
        };
        config.insert("vmm".into(), vmm.into());
        config.insert("kernel_path".into(), path(&self.kernel_path));
        config.insert("kernel".into(), path(&self.kernel_path));
        config.insert("kvm".into(), self.kvm.describe().into());
        config.insert("agent_path".into(), path(&self.agent_path));
        config.insert("data_dir".into(), path(&self.data_dir));
        config.insert("rootfs_dir".into(), path(self.images.dir()));
        config.insert(
            "boot_timeout".into(),
            svc_core::GoDuration::new(self.boot_timeout)
                .to_string()
                .into(),
        );
        config
    }

    fn default_network(&self) -> String {
        "none".to_owned()
    }

    async fn health(&self) -> Result<(), ProviderError> {
        for (path, key) in [
            (&self.kernel_path, "kernel_path"),
            (&self.agent_path, "agent_path"),
        ] {
            if tokio::fs::metadata(path).await.is_err() {
                return Err(ProviderError::unavailable(format!(
                    "providers.{}.{key} {} does not exist",
                    self.name(),
                    path.display()
                )));
            }
        }
        self.check_binaries().await
    }

    async fn warm_up(&self) {
        // The start-up health check, logged; then `auto` decides on KVM once (a spawn that
        // comes first waits for it).
        if let Err(err) = self.health().await {
            tracing::warn!(provider = self.name(), error = %err, "a microVM provider is unhealthy");
        }
        match self.boot_files().await {
            Ok(files) => {
                if let Some(probe) = self.probe(&files) {
                    probe.await;
                }
            }
            Err(err) => {
                tracing::warn!(provider = self.name(), error = %err, "preparing the boot files failed");
            }
        }
    }

    fn take_failures(&self) -> Option<mpsc::UnboundedReceiver<RuntimeFailure>> {
        self.failures_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError> {
        if let Err(err) = self.spawn_inner(spec).await {
            // Nothing is left behind: no processes, no sockets, no directory.
            let _ = self.destroy(&spec.id).await;
            return Err(err);
        }
        Ok(RuntimeInfo::started(spec, false))
    }

    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError> {
        let booted = self.vms.lock().await.remove(id);
        if let Some(vm) = booted {
            vm.shutdown().await;
        } else {
            // A VM of an earlier svc process (its processes are not our children), or one whose
            // boot that process never finished recording: every process naming the directory.
            let dir = self.vm_dir(id);
            let pids = tokio::task::spawn_blocking(move || processes_of(&dir))
                .await
                .unwrap_or_default();
            for pid in pids {
                if let Some(pid) = i32::try_from(pid)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = crate::process::signal_process(pid, crate::Signal::Kill);
                }
            }
        }
        match tokio::fs::remove_dir_all(self.vm_dir(id)).await {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(ProviderError::io(
                format!("removing the VM directory of {id}"),
                err,
            )),
        }
    }

    async fn pause(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.freeze(id, true).await
    }

    async fn resume(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.freeze(id, false).await
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        let dir = self.vm_dir(id);
        Ok(match self.record(id).await {
            Some(record) if record.vmm_pid().is_some_and(|pid| runs_vm(pid, &dir)) => {
                RuntimeStatus::Running
            }
            Some(_) => RuntimeStatus::Stopped,
            None if tokio::fs::metadata(&dir).await.is_ok() => RuntimeStatus::Stopped,
            None => RuntimeStatus::Missing,
        })
    }

    async fn inventory(&self) -> Result<Vec<RuntimeInfo>, ProviderError> {
        let mut entries = match tokio::fs::read_dir(&self.data_dir).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        let mut runtimes = Vec::new();
        while let Some(entry) = entries.next_entry().await? {
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| SandboxId::parse(n).ok())
            else {
                continue;
            };
            let Some(record) = self.record(&id).await else {
                continue;
            };
            let running = record
                .vmm_pid()
                .is_some_and(|pid| runs_vm(pid, &self.vm_dir(&id)));
            runtimes.push(RuntimeInfo {
                sandbox_id: id,
                running,
                image: record.image,
                labels: record.labels,
                image_pulled: false,
            });
        }
        Ok(runtimes)
    }

    async fn logs(&self, id: &SandboxId, lines: usize) -> Result<Vec<String>, ProviderError> {
        let dir = self.vm_dir(id);
        if tokio::fs::metadata(&dir).await.is_err() {
            return Err(ProviderError::RuntimeNotFound { id: id.to_string() });
        }
        let bytes = tokio::fs::read(dir.join(super::vm::CONSOLE_LOG))
            .await
            .unwrap_or_default();
        Ok(crate::process::last_lines(
            &String::from_utf8_lossy(&bytes),
            lines,
        ))
    }

    fn runs_exec_as_user(&self) -> bool {
        // The agent runs as root inside the guest.
        true
    }

    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> Result<ExecSession, ProviderError> {
        // One read of the record: it says the VM exists and holds the sandbox's environment.
        let mut env = self.existing(id).await?.env;
        env.extend(spec.env);
        self.agent(id).exec(ExecSpec { env, ..spec }).await
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        mode: u32,
        content: Upload,
    ) -> Result<(), ProviderError> {
        self.existing_agent(id)
            .await?
            .write_file(path, mode, content.stream)
            .await
    }

    async fn read_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        // The guest agent moves files, not trees: the guest's own `tar` packs them.
        crate::shell_files::ShellFiles::new(self, id, None)
            .archive(dir)
            .await
    }

    async fn write_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
        archive: ByteStream,
    ) -> Result<(), ProviderError> {
        crate::shell_files::ShellFiles::new(self, id, None)
            .extract(dir, archive)
            .await
    }

    async fn read_file(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        self.existing_agent(id).await?.read_file(path).await
    }

    async fn delete_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        self.existing_agent(id)
            .await?
            .delete_file(path, recursive)
            .await
    }

    async fn list_dir(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<Vec<FileInfo>, ProviderError> {
        self.existing_agent(id).await?.list_dir(path).await
    }

    async fn move_path(
        &self,
        id: &SandboxId,
        from: &NonRootPath,
        to: &NonRootPath,
    ) -> Result<(), ProviderError> {
        self.existing_agent(id).await?.move_path(from, to).await
    }

    async fn chmod(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
        mode: u32,
    ) -> Result<(), ProviderError> {
        self.existing_agent(id).await?.chmod(path, mode).await
    }

    async fn stat(&self, id: &SandboxId, path: &SandboxPath) -> Result<FileInfo, ProviderError> {
        self.existing_agent(id).await?.stat(path).await
    }

    async fn glob(
        &self,
        id: &SandboxId,
        pattern: &SandboxGlob,
    ) -> Result<Vec<String>, ProviderError> {
        self.existing_agent(id).await?.glob(pattern).await
    }

    async fn connect(&self, id: &SandboxId, port: u16) -> Result<crate::PortStream, ProviderError> {
        self.existing_agent(id).await?.connect_port(port).await
    }

    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>, ProviderError> {
        self.images.list().await
    }
}
