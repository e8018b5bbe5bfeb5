//! The `qemu` provider (decisions §14): one QEMU `microvm` guest per sandbox, booted from the
//! shared kernel and initramfs (the agent as init) and a root disk built per image, reached
//! through its agent over vsock.
//!
//! Each VM lives in `data_dir/<sandbox id>/`: sockets, the serial console (the sandbox's logs),
//! `runtime.json` (image, labels, process IDs). The record is what makes a VM findable after svc
//! itself restarts or crashes: its status comes from the QEMU process it names, its agent from
//! the socket beside it, and reconciliation lists these directories.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use svc_core::config::{QemuAccel, QemuProviderConfig, PROVIDER_QEMU};
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::{Capability, SandboxId};
use tokio::sync::{Mutex, OnceCell};

use super::images::RootfsCache;
use super::qemu::{QemuHost, RunningVm, VmSpec};
use crate::agent::{AgentClient, VsockConnector};
use crate::{
    ByteStream, ExecSession, ExecSpec, FileInfo, Provider, ProviderError, RuntimeInfo,
    RuntimeStatus, SnapshotInfo, SpawnSpec,
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
];

/// What `runtime.json` records about a VM.
#[derive(Debug, Serialize, Deserialize)]
struct VmRecord {
    image: String,
    labels: BTreeMap<String, String>,
    /// The sandbox's environment, under every command's own.
    #[serde(default)]
    env: BTreeMap<String, String>,
    qemu_pid: Option<u32>,
    /// Its vsock backend's.
    #[serde(default)]
    backend_pid: Option<u32>,
}

/// The QEMU microVM provider.
pub struct QemuProvider {
    config: QemuProviderConfig,
    data_dir: PathBuf,
    images: RootfsCache,
    initramfs: OnceCell<PathBuf>,
    /// The VMs this process booted (their processes end with it).
    vms: Mutex<HashMap<SandboxId, RunningVm>>,
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
    let dir = dir.as_os_str().as_encoded_bytes();
    running
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| cmdline.windows(dir.len()).any(|w| w == dir))
}

impl QemuProvider {
    /// A provider on `config` (paths are checked by [`Provider::health`], not here), exporting
    /// images through `docker`.
    pub fn new(
        config: QemuProviderConfig,
        docker: Option<Arc<crate::docker::DockerProvider>>,
    ) -> Self {
        let data_dir = if config.data_dir.as_os_str().is_empty() {
            std::env::temp_dir().join("svc-qemu")
        } else {
            config.data_dir.clone()
        };
        let rootfs_dir = if config.rootfs_dir.as_os_str().is_empty() {
            data_dir.join("rootfs")
        } else {
            config.rootfs_dir.clone()
        };
        let kernel = config
            .kernel_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        QemuProvider {
            images: RootfsCache::new(rootfs_dir, kernel, docker),
            config,
            data_dir,
            initramfs: OnceCell::new(),
            vms: Mutex::new(HashMap::new()),
        }
    }

    fn vm_dir(&self, id: &SandboxId) -> PathBuf {
        self.data_dir.join(id.as_str())
    }

    fn agent(&self, id: &SandboxId) -> AgentClient {
        AgentClient::new(Arc::new(VsockConnector::new(
            self.vm_dir(id).join("vsock.sock"),
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

    /// The initramfs (agent and modules), built once per process from the configured agent
    /// and the `modules/` directory beside the kernel.
    async fn initramfs(&self) -> Result<PathBuf, ProviderError> {
        self.initramfs
            .get_or_try_init(|| async {
                let modules = self
                    .config
                    .kernel_path
                    .parent()
                    .unwrap_or(Path::new("/"))
                    .join("modules");
                let (agent, path) = (
                    self.config.agent_path.clone(),
                    self.data_dir.join("initramfs.cpio"),
                );
                tokio::fs::create_dir_all(&self.data_dir).await?;
                let image =
                    tokio::task::spawn_blocking(move || super::initramfs::build(&agent, &modules))
                        .await
                        .map_err(|e| ProviderError::failed(format!("building the initramfs: {e}")))?
                        .map_err(|e| {
                            ProviderError::failed(format!(
                                "building the initramfs from {}: {e}",
                                self.config.agent_path.display()
                            ))
                        })?;
                tokio::fs::write(&path, image).await?;
                Ok(path)
            })
            .await
            .cloned()
    }

    fn host(&self, initramfs: PathBuf) -> QemuHost {
        QemuHost {
            qemu: self.config.qemu_path.clone(),
            vsock_backend: self.config.vsock_backend_path.clone(),
            kernel: self.config.kernel_path.clone(),
            initramfs,
            // `auto` stays on emulation until the KVM probe boot exists.
            accel: self.config.accel.as_qemu().unwrap_or("tcg").to_owned(),
        }
    }

    async fn spawn_inner(&self, spec: &SpawnSpec) -> Result<(), ProviderError> {
        let disk = self.images.root_disk(&spec.image).await?;
        let host = self.host(self.initramfs().await?);
        let dir = self.vm_dir(&spec.id);
        let vm = host
            .boot(&VmSpec {
                dir: dir.clone(),
                root_disk: disk,
                memory_mb: spec.memory_mb,
                vcpus: spec.vcpus,
                boot_timeout: self.config.boot_timeout.as_std(),
                hostname: spec.id.as_str().to_owned(),
            })
            .await?;
        let record = VmRecord {
            image: spec.image.clone(),
            labels: spec.labels.clone(),
            env: spec.env.clone(),
            qemu_pid: vm.pid(),
            backend_pid: vm.backend_pid(),
        };
        let json = serde_json::to_vec(&record).map_err(|e| ProviderError::failed(e.to_string()))?;
        if let Err(err) = tokio::fs::write(dir.join("runtime.json"), json).await {
            vm.shutdown().await;
            return Err(ProviderError::failed(format!("recording the VM: {err}")));
        }
        tracing::info!(sandbox_id = %spec.id, boot_ms = vm.boot_time.as_millis() as u64, "microVM booted");
        self.vms.lock().await.insert(spec.id.clone(), vm);
        Ok(())
    }

    async fn record(&self, id: &SandboxId) -> Option<VmRecord> {
        let bytes = tokio::fs::read(self.vm_dir(id).join("runtime.json"))
            .await
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

#[async_trait]
impl Provider for QemuProvider {
    fn name(&self) -> &'static str {
        PROVIDER_QEMU
    }

    fn capabilities(&self) -> &'static [Capability] {
        CAPABILITIES
    }

    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut config = serde_json::Map::new();
        let path = |p: &Path| serde_json::Value::from(p.display().to_string());
        config.insert("qemu_path".into(), path(&self.config.qemu_path));
        config.insert("kernel_path".into(), path(&self.config.kernel_path));
        config.insert("agent_path".into(), path(&self.config.agent_path));
        config.insert("data_dir".into(), path(&self.data_dir));
        config.insert("rootfs_dir".into(), path(self.images.dir()));
        config.insert(
            "vsock_backend_path".into(),
            path(&self.config.vsock_backend_path),
        );
        let accel = match self.config.accel {
            QemuAccel::Auto => "auto (tcg)",
            QemuAccel::Kvm => "kvm",
            QemuAccel::Tcg => "tcg",
        };
        config.insert("accel".into(), accel.into());
        config.insert(
            "boot_timeout".into(),
            self.config.boot_timeout.to_string().into(),
        );
        config
    }

    fn default_network(&self) -> String {
        "none".to_owned()
    }

    async fn health(&self) -> Result<(), ProviderError> {
        for (path, key) in [
            (&self.config.kernel_path, "kernel_path"),
            (&self.config.agent_path, "agent_path"),
        ] {
            if tokio::fs::metadata(path).await.is_err() {
                return Err(ProviderError::Unavailable {
                    message: format!("providers.qemu.{key} {} does not exist", path.display()),
                });
            }
        }
        for (program, key) in [
            (&self.config.qemu_path, "qemu_path"),
            (&self.config.vsock_backend_path, "vsock_backend_path"),
        ] {
            let ran = tokio::process::Command::new(program)
                .arg("--version")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .await;
            if ran.is_err() {
                return Err(ProviderError::Unavailable {
                    message: format!("providers.qemu.{key} {} cannot be run", program.display()),
                });
            }
        }
        Ok(())
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
        } else if let Some(record) = self.record(id).await {
            // A VM of an earlier svc process: its processes are not our children.
            for pid in [record.qemu_pid, record.backend_pid].into_iter().flatten() {
                let pid = i32::try_from(pid)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw);
                let dir = self.vm_dir(id);
                if let Some(pid) =
                    pid.filter(|p| runs_vm(p.as_raw_nonzero().get().unsigned_abs(), &dir))
                {
                    let _ = crate::process::signal_process(pid, crate::Signal::Kill);
                }
            }
        }
        match tokio::fs::remove_dir_all(self.vm_dir(id)).await {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(ProviderError::failed(format!(
                "removing the VM directory of {id}: {err}"
            ))),
        }
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        Ok(match self.record(id).await {
            Some(VmRecord {
                qemu_pid: Some(pid),
                ..
            }) if runs_vm(pid, &self.vm_dir(id)) => RuntimeStatus::Running,
            Some(_) => RuntimeStatus::Stopped,
            None if tokio::fs::metadata(self.vm_dir(id)).await.is_ok() => RuntimeStatus::Stopped,
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
                .qemu_pid
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
        let bytes = tokio::fs::read(dir.join("console.log"))
            .await
            .unwrap_or_default();
        Ok(crate::process::last_lines(
            &String::from_utf8_lossy(&bytes),
            lines,
        ))
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
        content: ByteStream,
    ) -> Result<(), ProviderError> {
        self.existing_agent(id)
            .await?
            .write_file(path, mode, content)
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

    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>, ProviderError> {
        self.images.list().await
    }
}
