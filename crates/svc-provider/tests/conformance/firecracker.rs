//! The firecracker driver against a fake Firecracker: an HTTP API server on a Unix socket that
//! checks each request against Firecracker's published API (method, path, JSON body, content
//! type) and records the sequence, and a vsock socket that answers `CONNECT <port>` and hands
//! the stream to a real svc-agent on the host. The "firecracker" process the provider starts
//! is a script that links the fake's API socket into the VM's directory and sleeps, so the
//! provider's whole path runs: files placed in the VM's directory, process, API, agent, watch,
//! destroy. Real boots need a `firecracker` binary and real KVM, which this machine kind lacks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{json, Value};
use svc_core::SandboxId;
use svc_provider::microvm::firecracker::VmPlan;
use svc_provider::microvm::vm::VmSpec;
use svc_provider::{Provider, RuntimeStatus, SpawnSpec};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// One request the fake received.
type Recorded = (String, String, Value);

#[derive(Clone, Default)]
struct Fake {
    requests: Arc<Mutex<Vec<Recorded>>>,
    /// Answer 400 with a fault message to this path.
    fail_on: Option<&'static str>,
    /// The VM's directory and the agent the vsock device leads to, for `InstanceStart`.
    vm: Option<(PathBuf, PathBuf)>,
    /// What the VM's directory held at `InstanceStart`.
    files_at_start: Arc<Mutex<Vec<String>>>,
}

/// The fields each API path takes, and which are required (Firecracker's swagger.yaml).
fn schema(path: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    Some(match path {
        "/machine-config" => (
            &["vcpu_count", "mem_size_mib"],
            &[
                "vcpu_count",
                "mem_size_mib",
                "smt",
                "track_dirty_pages",
                "cpu_template",
            ],
        ),
        "/boot-source" => (
            &["kernel_image_path"],
            &["kernel_image_path", "boot_args", "initrd_path"],
        ),
        p if p.starts_with("/drives/") => (
            &["drive_id", "is_root_device"],
            &[
                "drive_id",
                "path_on_host",
                "is_root_device",
                "is_read_only",
                "partuuid",
                "cache_type",
                "rate_limiter",
                "io_engine",
            ],
        ),
        "/vsock" => (
            &["guest_cid", "uds_path"],
            &["guest_cid", "uds_path", "vsock_id"],
        ),
        "/actions" => (&["action_type"], &["action_type"]),
        _ => return None,
    })
}

fn fault(message: &str) -> (StatusCode, String) {
    (
        StatusCode::BAD_REQUEST,
        json!({ "fault_message": message }).to_string(),
    )
}

impl Fake {
    async fn handle(
        &self,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> (StatusCode, String) {
        let path = uri.path().to_owned();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        self.requests
            .lock()
            .unwrap()
            .push((method.to_string(), path.clone(), body.clone()));
        if method != Method::PUT {
            return fault(&format!("{method} {path} is not part of the API used"));
        }
        if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/json") {
            return fault("Content-Type must be application/json");
        }
        let Some((required, known)) = schema(&path) else {
            return fault(&format!("unknown resource {path}"));
        };
        let Some(fields) = body.as_object() else {
            return fault(&format!("{path}: the body is not a JSON object"));
        };
        if let Some(missing) = required.iter().find(|f| !fields.contains_key(**f)) {
            return fault(&format!("{path}: missing field `{missing}`"));
        }
        if let Some(unknown) = fields.keys().find(|f| !known.contains(&f.as_str())) {
            return fault(&format!("{path}: unknown field `{unknown}`"));
        }
        if let Some(id) = path.strip_prefix("/drives/") {
            if body["drive_id"] != id {
                return fault("drive_id differs from the path");
            }
        }
        if self.fail_on == Some(path.as_str()) {
            return fault(&format!("the fake refuses {path}"));
        }
        if path == "/actions" && body["action_type"] == "InstanceStart" {
            if let Some((dir, agent)) = &self.vm {
                let mut names: Vec<String> = std::fs::read_dir(dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                *self.files_at_start.lock().unwrap() = names;
                let uds = self
                    .requests
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|r| r.1 == "/vsock")
                    .map(|r| r.2["uds_path"].as_str().unwrap().to_owned());
                serve_vsock(dir.join(uds.unwrap()), agent.clone());
                // What the agent prints on the guest's serial console, Firecracker's output.
                let mut console = std::fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join("console.log"))
                    .unwrap();
                std::io::Write::write_all(
                    &mut console,
                    format!("{} 1024\n", svc_agent_proto::SERVING_LINE).as_bytes(),
                )
                .unwrap();
            }
        }
        (StatusCode::NO_CONTENT, String::new())
    }

    /// Serves the API on `socket` until the test ends.
    fn serve(self, socket: &Path) {
        let listener = UnixListener::bind(socket).unwrap();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let fake = self.clone();
                async move { fake.handle(method, uri, headers, body).await }
            },
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// Firecracker's host side of vsock: `CONNECT <port>\n`, answered `OK <port>\n`, then the
/// stream is the guest's (here: an agent's Unix socket).
fn serve_vsock(socket: PathBuf, agent: PathBuf) {
    let listener = UnixListener::bind(socket).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let agent = agent.clone();
            tokio::spawn(async move {
                let mut host = BufReader::new(stream);
                let mut line = String::new();
                host.read_line(&mut line).await.unwrap();
                assert_eq!(line, format!("CONNECT {}\n", svc_agent_proto::AGENT_PORT));
                let mut guest = UnixStream::connect(&agent).await.unwrap();
                host.get_mut().write_all(b"OK 1073741824\n").await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut host, &mut guest).await;
            });
        }
    });
}

fn vm_spec(dir: &Path, root_disk: bool) -> VmSpec {
    VmSpec {
        dir: dir.to_path_buf(),
        root_disk: root_disk.then(|| dir.join("root.ext4")),
        memory_mb: 512,
        vcpus: 2,
        boot_timeout: Duration::from_secs(10),
        hostname: "sbx-test".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firecracker_driver_sends_the_published_api_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let fake = Fake::default();
    fake.clone().serve(&socket);
    VmPlan::new(&vm_spec(dir.path(), true))
        .apply(&socket)
        .await
        .unwrap();
    let requests = fake.requests();
    let boot_args = requests[1].2["boot_args"].as_str().unwrap().to_owned();
    for arg in [
        "console=ttyS0",
        "reboot=k",
        "pci=off",
        "svc.root=/dev/vda",
        "svc.hostname=sbx-test",
        "svc.clock=",
    ] {
        assert!(boot_args.contains(arg), "{arg} missing from {boot_args}");
    }
    let put = |path: &str, body: Value| ("PUT".to_owned(), path.to_owned(), body);
    assert_eq!(
        requests,
        vec![
            put(
                "/machine-config",
                json!({"vcpu_count": 2, "mem_size_mib": 512})
            ),
            put(
                "/boot-source",
                json!({"kernel_image_path": "vmlinux", "boot_args": boot_args, "initrd_path": "initramfs.cpio"})
            ),
            put(
                "/drives/rootfs",
                json!({"drive_id": "rootfs", "path_on_host": "rootfs.ext4", "is_root_device": false, "is_read_only": false})
            ),
            put("/vsock", json!({"guest_cid": 3, "uds_path": "vsock.sock"})),
            put("/actions", json!({"action_type": "InstanceStart"})),
        ]
    );
    // Without a root disk there is no drive, and the agent stays in the initramfs.
    let fake = Fake::default();
    let socket = dir.path().join("api2.sock");
    fake.clone().serve(&socket);
    VmPlan::new(&vm_spec(dir.path(), false))
        .apply(&socket)
        .await
        .unwrap();
    let paths: Vec<String> = fake.requests().into_iter().map(|r| r.1).collect();
    assert_eq!(
        paths,
        ["/machine-config", "/boot-source", "/vsock", "/actions"]
    );
    assert!(!fake.requests()[1].2["boot_args"]
        .as_str()
        .unwrap()
        .contains("svc.root"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firecracker_api_faults_stop_the_sequence_and_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let fake = Fake {
        fail_on: Some("/boot-source"),
        ..Fake::default()
    };
    fake.clone().serve(&socket);
    let err = VmPlan::new(&vm_spec(dir.path(), true))
        .apply(&socket)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("PUT /boot-source answered 400")
            && message.contains("the fake refuses /boot-source"),
        "{message}"
    );
    assert_eq!(fake.requests().len(), 2, "nothing is sent after a fault");
    // No API at all: named.
    let err = VmPlan::new(&vm_spec(dir.path(), true))
        .apply(&dir.path().join("none.sock"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("none.sock"), "{err}");
}

/// A "firecracker" that links the fake's API socket where it was told to open its own.
fn fake_firecracker(dir: &Path, api: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("firecracker");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Firecracker v1.7.0 (fake)'; exit 0; fi\n\
             [ \"$1\" = --api-sock ] || exit 2\nln -s {} \"$2\" || exit 3\nexec sleep 600\n",
            api.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firecracker_provider_runs_the_whole_path_on_a_fake_vmm() {
    let Some(assets) = super::microvm_assets() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let agent_socket = work.path().join("agent.sock");
    let mut agent = tokio::process::Command::new(assets.agent())
        .arg("--unix")
        .arg(&agent_socket)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let image = work.path().join("image");
    std::fs::create_dir_all(image.join("etc")).unwrap();
    std::fs::write(image.join("etc/hostname"), "image\n").unwrap();
    let config = svc_core::config::FirecrackerProviderConfig {
        enabled: true,
        firecracker_path: fake_firecracker(work.path(), &work.path().join("fake-api.sock")),
        kernel_path: assets.kernel(),
        agent_path: assets.agent(),
        data_dir: work.path().join("vms"),
        rootfs_dir: work.path().join("rootfs"),
        boot_timeout: svc_core::GoDuration::from_secs(10),
    };
    let provider = svc_provider::microvm::MicrovmProvider::firecracker(config.clone(), None);
    let mut failures = provider
        .take_failures()
        .expect("the provider reports failures");
    let id = SandboxId::generate();
    let vm_dir = config.data_dir.join(id.as_str());
    let fake = Fake {
        vm: Some((vm_dir.clone(), agent_socket.clone())),
        ..Fake::default()
    };
    fake.clone().serve(&work.path().join("fake-api.sock"));
    if svc_provider::microvm::Kvm::detect().present() {
        provider.health().await.unwrap();
    }
    let summary = provider.config_summary();
    assert!(
        summary["vmm"]
            .as_str()
            .unwrap()
            .contains("Firecracker v1.7.0 (fake)")
            || !svc_provider::microvm::Kvm::detect().present(),
        "{summary:?}"
    );
    for key in [
        "kernel",
        "kvm",
        "vsock_backend",
        "firecracker_path",
        "boot_timeout",
    ] {
        assert!(summary.contains_key(key), "{key} missing from {summary:?}");
    }
    let spec = SpawnSpec {
        id: id.clone(),
        image: image.display().to_string(),
        memory_mb: 256,
        vcpus: 1,
        env: BTreeMap::from([("FROM_SPAWN".to_owned(), "yes".to_owned())]),
        network: None,
        labels: BTreeMap::new(),
        multi_user: false,
        egress: svc_core::egress::Egress::default(),
        progress: Default::default(),
    };
    provider.spawn(&spec).await.unwrap();
    assert_eq!(fake.requests().len(), 5, "{:?}", fake.requests());
    assert_eq!(
        *fake.files_at_start.lock().unwrap(),
        [
            "api.sock",
            "console.log",
            "initramfs.cpio",
            "rootfs.ext4",
            "vmlinux",
            "vmm.log"
        ],
        "the jail holds everything the VM opens"
    );
    assert_eq!(provider.status(&id).await.unwrap(), RuntimeStatus::Running);
    let out = super::collect(
        provider
            .exec(&id, super::spec(&["sh", "-c", "echo $FROM_SPAWN"]))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(out.stdout(), "yes\n");
    // The VMM dies: the watcher says so at once, naming the sandbox.
    let record: Value =
        serde_json::from_slice(&std::fs::read(vm_dir.join("runtime.json")).unwrap()).unwrap();
    let pid = record["pids"][0].as_u64().unwrap() as u32;
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let failure = tokio::time::timeout(Duration::from_secs(5), failures.recv())
        .await
        .expect("the crash was reported within 5 s")
        .unwrap();
    assert_eq!(failure.sandbox_id, id);
    assert!(
        failure.message.contains("firecracker") && failure.message.contains("signal: 9"),
        "{}",
        failure.message
    );
    assert_eq!(provider.status(&id).await.unwrap(), RuntimeStatus::Stopped);
    provider.destroy(&id).await.unwrap();
    assert!(!vm_dir.exists());
    assert!(!alive(pid));
    // A VM whose booting svc died before recording it: another process's destroy still finds
    // its VMM (by the directory it runs in) and removes everything.
    provider.spawn(&spec).await.unwrap();
    let record: Value =
        serde_json::from_slice(&std::fs::read(vm_dir.join("runtime.json")).unwrap()).unwrap();
    let pid = record["pids"][0].as_u64().unwrap() as u32;
    std::fs::remove_file(vm_dir.join("runtime.json")).unwrap();
    let later = svc_provider::microvm::MicrovmProvider::firecracker(config.clone(), None);
    later.destroy(&id).await.unwrap();
    assert!(!vm_dir.exists());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!alive(pid), "the unrecorded VMM {pid} was killed");
    // A VMM binary that is not there: named, nothing left.
    let missing = svc_provider::microvm::MicrovmProvider::firecracker(
        svc_core::config::FirecrackerProviderConfig {
            firecracker_path: "/no/such/firecracker".into(),
            ..config
        },
        None,
    );
    let spec = SpawnSpec {
        id: SandboxId::generate(),
        ..spec
    };
    let err = missing.spawn(&spec).await.unwrap_err();
    assert!(err.to_string().contains("/no/such/firecracker"), "{err}");
    assert!(!work.path().join("vms").join(spec.id.as_str()).exists());
    let _ = agent.kill().await;
}

/// A real Firecracker boot, where a `firecracker` binary (`SVC_TEST_FIRECRACKER`, else on
/// `PATH`) and real KVM exist: spawn, exec, files, destroy. Elsewhere it says loudly that it
/// did not run (this machine kind has neither; the fake above covers the driver).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firecracker_boots_for_real_where_it_can() {
    let binary = std::env::var_os("SVC_TEST_FIRECRACKER")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join("firecracker"))
                    .find(|p| p.is_file())
            })
        });
    let kvm = svc_provider::microvm::Kvm::detect();
    let (Some(binary), svc_provider::microvm::Kvm::Real) = (binary, kvm.clone()) else {
        eprintln!(
            "SKIPPED (loudly): a real Firecracker boot needs a firecracker binary and real KVM \
             (KVM here: {}); the driver is covered by the fake Firecracker tests",
            kvm.describe()
        );
        return;
    };
    let Some(assets) = super::microvm_assets() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let image = work.path().join("image");
    for sub in ["bin", "root", "tmp", "etc", "proc", "sys", "dev", "run"] {
        std::fs::create_dir_all(image.join(sub)).unwrap();
    }
    std::fs::copy("/bin/busybox", image.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", image.join("bin/sh")).unwrap();
    let provider = svc_provider::microvm::MicrovmProvider::firecracker(
        svc_core::config::FirecrackerProviderConfig {
            enabled: true,
            firecracker_path: binary,
            kernel_path: assets.kernel(),
            agent_path: assets.agent(),
            data_dir: work.path().join("vms"),
            rootfs_dir: work.path().join("rootfs"),
            boot_timeout: svc_core::GoDuration::from_secs(30),
        },
        None,
    );
    provider.health().await.unwrap();
    let spec = super::microvm_spec(&image.display().to_string());
    let started = std::time::Instant::now();
    provider.spawn(&spec).await.unwrap();
    eprintln!("firecracker boot to agent ready: {:?}", started.elapsed());
    let out = super::collect(
        provider
            .exec(
                &spec.id,
                super::spec(&["sh", "-c", "echo inside; cat /proc/version"]),
            )
            .await
            .unwrap(),
    )
    .await;
    assert!(out.stdout().starts_with("inside\n"), "{}", out.stdout());
    provider.destroy(&spec.id).await.unwrap();
    assert!(!work.path().join("vms").join(spec.id.as_str()).exists());
}
