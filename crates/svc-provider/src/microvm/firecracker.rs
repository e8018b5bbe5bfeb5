//! The Firecracker driver: one `firecracker` process per VM, configured through its HTTP API on
//! a Unix socket (machine config, boot source, root drive, vsock, `InstanceStart`), exactly as
//! Firecracker's published API (`swagger.yaml`) describes.
//!
//! Jailer-ready: the process runs in the VM's directory and every path the API is given is
//! relative to it (kernel and initramfs are linked in, the root disk is the VM's own copy), so
//! the same requests work unchanged when the jailer makes that directory the VM's chroot.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::process::{Child, Command};

use super::vm::{
    spawn_error, BootFiles, VmSpec, Vmm, CONSOLE_LOG, GUEST_CID, VMM_LOG, VSOCK_SOCKET,
};
use crate::ProviderError;

/// The API socket, in the VM's directory.
pub const API_SOCKET: &str = "api.sock";
/// The names of the VM's own files, relative to its directory (the jail).
const KERNEL: &str = "vmlinux";
const INITRAMFS: &str = "initramfs.cpio";
const ROOT_DISK: &str = "rootfs.ext4";
/// The root drive's ID.
const ROOT_DRIVE: &str = "rootfs";

/// `PUT /machine-config`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MachineConfig {
    /// Virtual CPUs.
    pub vcpu_count: u32,
    /// Memory in MiB.
    pub mem_size_mib: u32,
}

/// `PUT /boot-source`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootSource {
    /// The kernel, relative to the VM's directory.
    pub kernel_image_path: String,
    /// The kernel command line.
    pub boot_args: String,
    /// The initramfs, relative to the VM's directory.
    pub initrd_path: String,
}

/// `PUT /drives/{drive_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drive {
    /// The drive's ID (also in the path).
    pub drive_id: String,
    /// The disk image, relative to the VM's directory.
    pub path_on_host: String,
    /// False: the agent in the initramfs mounts the disk itself (`svc.root=`).
    pub is_root_device: bool,
    /// False: the disk is the VM's own copy.
    pub is_read_only: bool,
}

/// `PUT /vsock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vsock {
    /// The guest's context ID.
    pub guest_cid: u32,
    /// The host side's Unix socket, relative to the VM's directory.
    pub uds_path: String,
}

/// `PUT /actions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Action {
    /// `InstanceStart`.
    pub action_type: String,
}

/// Every request that configures and starts one VM, in the order they are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmPlan {
    /// `PUT /machine-config`.
    pub machine: MachineConfig,
    /// `PUT /boot-source`.
    pub boot: BootSource,
    /// `PUT /drives/rootfs`, when the VM has a root disk.
    pub root: Option<Drive>,
    /// `PUT /vsock`.
    pub vsock: Vsock,
}

impl VmPlan {
    /// The plan for `spec`.
    pub fn new(spec: &VmSpec) -> VmPlan {
        VmPlan {
            machine: MachineConfig {
                vcpu_count: spec.vcpus.max(1),
                mem_size_mib: spec.memory_mb.max(64),
            },
            boot: BootSource {
                kernel_image_path: KERNEL.to_owned(),
                boot_args: format!("{} reboot=k pci=off", spec.kernel_args()),
                initrd_path: INITRAMFS.to_owned(),
            },
            root: spec.root_disk.as_ref().map(|_| Drive {
                drive_id: ROOT_DRIVE.to_owned(),
                path_on_host: ROOT_DISK.to_owned(),
                is_root_device: false,
                is_read_only: false,
            }),
            vsock: Vsock {
                guest_cid: GUEST_CID,
                uds_path: VSOCK_SOCKET.to_owned(),
            },
        }
    }

    /// Sends the plan through the API at `socket` and starts the VM.
    pub async fn apply(&self, socket: &Path) -> Result<(), ProviderError> {
        let mut api = Api::connect(socket).await?;
        api.put("/machine-config", &self.machine).await?;
        api.put("/boot-source", &self.boot).await?;
        if let Some(root) = &self.root {
            api.put(&format!("/drives/{}", root.drive_id), root).await?;
        }
        api.put("/vsock", &self.vsock).await?;
        api.put(
            "/actions",
            &Action {
                action_type: "InstanceStart".to_owned(),
            },
        )
        .await
    }
}

/// One connection to a Firecracker API socket.
struct Api {
    sender: SendRequest<Full<Bytes>>,
}

fn api_error(err: impl std::fmt::Display) -> ProviderError {
    ProviderError::failed(format!("the Firecracker API: {err}"))
}

impl Api {
    async fn connect(socket: &Path) -> Result<Api, ProviderError> {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| api_error(format!("connecting to {}: {e}", socket.display())))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(api_error)?;
        // Ends when the sender is dropped.
        tokio::spawn(connection);
        Ok(Api { sender })
    }

    /// `PUT path` with `body` as JSON; Firecracker answers 204, or an error with a
    /// `fault_message`.
    async fn put(&mut self, path: &str, body: &impl Serialize) -> Result<(), ProviderError> {
        let json = serde_json::to_vec(body).map_err(api_error)?;
        let request = hyper::Request::put(path)
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(json)))
            .map_err(api_error)?;
        // The connection takes the next request only once the previous exchange is done.
        self.sender
            .ready()
            .await
            .map_err(|e| api_error(format!("PUT {path}: {e}")))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| api_error(format!("PUT {path}: {e}")))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = http_body_util::Limited::new(response.into_body(), 64 * 1024)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let fault = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["fault_message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        Err(api_error(format!("PUT {path} answered {status}: {fault}")))
    }
}

/// The Firecracker driver.
#[derive(Debug, Clone)]
pub struct FirecrackerVmm {
    /// The `firecracker` binary.
    pub firecracker: PathBuf,
}

/// Links `from` into the VM's directory as `name` (a copy when it is on another file system).
fn place(from: &Path, dir: &Path, name: &str) -> std::io::Result<()> {
    let to = dir.join(name);
    std::fs::hard_link(from, &to).or_else(|_| std::fs::copy(from, &to).map(|_| ()))
}

impl FirecrackerVmm {
    /// Puts the VM's files into its directory: kernel and initramfs linked, the root disk its
    /// own copy (Firecracker writes to it; the kernel shares unchanged blocks where the file
    /// system can).
    async fn prepare(&self, spec: &VmSpec, files: &BootFiles) -> Result<(), ProviderError> {
        let (dir, files, disk) = (spec.dir.clone(), files.clone(), spec.root_disk.clone());
        tokio::task::spawn_blocking(move || {
            place(&files.kernel, &dir, KERNEL)?;
            place(&files.initramfs, &dir, INITRAMFS)?;
            if let Some(disk) = disk {
                std::fs::copy(disk, dir.join(ROOT_DISK))?;
            }
            Ok::<_, std::io::Error>(())
        })
        .await
        .map_err(|e| ProviderError::caused("preparing the VM's files", e))?
        .map_err(|e| ProviderError::io("preparing the VM's files", e))
    }

    async fn wait_for_api(&self, process: &mut Child, spec: &VmSpec) -> Result<(), ProviderError> {
        let socket = spec.dir.join(API_SOCKET);
        let deadline = Instant::now() + spec.boot_timeout;
        while tokio::net::UnixStream::connect(&socket).await.is_err() {
            if let Ok(Some(status)) = process.try_wait() {
                let log = std::fs::read_to_string(spec.dir.join(VMM_LOG)).unwrap_or_default();
                return Err(ProviderError::failed(format!(
                    "{} exited before opening its API socket ({status}): {}",
                    self.firecracker.display(),
                    log.trim()
                )));
            }
            if Instant::now() > deadline {
                return Err(ProviderError::failed(format!(
                    "{} did not open its API socket within {:?}",
                    self.firecracker.display(),
                    spec.boot_timeout
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

#[async_trait]
impl Vmm for FirecrackerVmm {
    async fn launch(&self, spec: &VmSpec, files: &BootFiles) -> Result<Vec<Child>, ProviderError> {
        self.prepare(spec, files).await?;
        let console = std::fs::File::create(spec.dir.join(CONSOLE_LOG));
        let log = std::fs::File::create(spec.dir.join(VMM_LOG));
        let (console, log) = match (console, log) {
            (Ok(console), Ok(log)) => (console, log),
            (Err(e), _) | (_, Err(e)) => {
                return Err(ProviderError::io("creating the VM's logs", e))
            }
        };
        let mut process = Command::new(&self.firecracker)
            .args(["--api-sock", API_SOCKET])
            .current_dir(&spec.dir)
            .stdin(Stdio::null())
            // The guest's serial console is Firecracker's standard output.
            .stdout(Stdio::from(console))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| spawn_error(&self.firecracker, e))?;
        let configured = match self.wait_for_api(&mut process, spec).await {
            Ok(()) => tokio::time::timeout(
                spec.boot_timeout,
                VmPlan::new(spec).apply(&spec.dir.join(API_SOCKET)),
            )
            .await
            .unwrap_or_else(|_| {
                Err(api_error(format!(
                    "no answer within {:?}",
                    spec.boot_timeout
                )))
            }),
            Err(err) => Err(err),
        };
        match configured {
            Ok(()) => Ok(vec![process]),
            Err(err) => {
                let _ = process.kill().await;
                Err(err)
            }
        }
    }
}
