//! The provider conformance suite: one behavioural contract every provider must pass, written
//! over `&dyn Provider` and expanded by a macro into one test per case per backend (mock, docker,
//! qemu; firecracker's boots need a `firecracker` binary and real KVM, so its driver is tested
//! against a fake VMM in `conformance/firecracker.rs`); a case needing a capability a backend
//! does not declare reports itself skipped, saying why.

// Cases are plain async functions shared by the generated tests.
#![allow(clippy::unwrap_used)]

#[path = "conformance/cases.rs"]
#[macro_use]
mod cases;
#[path = "conformance/firecracker.rs"]
mod firecracker;

use cases::*;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use svc_core::config::DockerProviderConfig;
use svc_core::SandboxId;
use svc_provider::docker::DockerProvider;
use svc_provider::mock::MockProvider;
use svc_provider::{Provider, ProviderError, SpawnSpec};

async fn mock() -> Option<Backend> {
    let dir = tempfile::tempdir().unwrap();
    Some(Backend {
        prepare: None,
        provider: Arc::new(MockProvider::new(dir.path().join("mock"))),
        image: "alpine:latest".into(),
        _guard: Some(dir),
    })
}

/// The local test image `scripts/test.sh` builds (busybox only; no registry is reachable).
fn docker_test_image() -> String {
    std::env::var("SVC_TEST_DOCKER_IMAGE").unwrap_or_else(|_| "svc-test-busybox:latest".into())
}

/// The Docker engine on its engine path (exec and archive APIs), or a loud skip when it is
/// missing and not required.
async fn docker() -> Option<Backend> {
    docker_with(engine_path(), None).await
}

/// The engine path's configuration.
fn engine_path() -> DockerProviderConfig {
    DockerProviderConfig {
        agent: svc_core::config::DockerAgentMode::Never,
        ..DockerProviderConfig::default()
    }
}

/// The Docker engine on its agent path (the static agent of the microVM assets as every
/// container's init), or a loud skip when the engine or the agent is missing and not required.
async fn docker_agent() -> Option<Backend> {
    let assets = microvm_assets()?;
    let dir = tempfile::tempdir().unwrap();
    let config = DockerProviderConfig {
        agent: svc_core::config::DockerAgentMode::Always,
        agent_path: assets.agent(),
        agent_socket_dir: dir.path().join("sockets"),
        ..DockerProviderConfig::default()
    };
    let backend = docker_with(config, Some(dir)).await?;
    assert_eq!(backend.provider.config_summary()["exec_path"], "agent");
    Some(backend)
}

async fn docker_with(
    config: DockerProviderConfig,
    guard: Option<tempfile::TempDir>,
) -> Option<Backend> {
    let provider = DockerProvider::connect(config).await;
    let healthy = match &provider {
        Ok(provider) => provider.health().await.map_err(|e| e.to_string()),
        Err(err) => Err(err.to_string()),
    };
    if let Err(reason) = healthy {
        if std::env::var_os("SVC_TEST_REQUIRE_DOCKER").is_some() || std::env::var_os("CI").is_some()
        {
            panic!("the Docker engine is required here but does not answer: {reason}");
        }
        eprintln!("SKIPPED (loudly): no Docker engine answers ({reason}); run scripts/test.sh to start one");
        return None;
    }
    Some(Backend {
        prepare: None,
        provider: Arc::new(provider.unwrap()),
        image: docker_test_image(),
        _guard: guard,
    })
}

/// The microVM assets `scripts/microvm-assets.sh` prepares, or a loud skip when they are
/// missing and not required.
fn microvm_assets() -> Option<svc_provider::microvm::Assets> {
    match svc_provider::microvm::Assets::find() {
        Ok(assets) => Some(assets),
        Err(missing) => {
            if std::env::var_os("SVC_TEST_REQUIRE_MICROVM").is_some()
                || std::env::var_os("CI").is_some()
            {
                panic!("{missing}");
            }
            eprintln!("SKIPPED (loudly): {missing}");
            None
        }
    }
}

/// A spawn of `image` on a microVM provider: a new ID, 256 MiB, one vCPU.
fn microvm_spec(image: &str) -> SpawnSpec {
    SpawnSpec {
        id: SandboxId::generate(),
        image: image.to_owned(),
        memory_mb: 256,
        vcpus: 1,
        env: BTreeMap::new(),
        network: None,
        labels: BTreeMap::new(),
        multi_user: false,
        egress: svc_core::egress::Egress::default(),
        progress: Default::default(),
    }
}

/// A QEMU microVM provider (emulated CPU) over the machine's assets, its image a busybox root
/// filesystem with every applet.
async fn qemu() -> Option<Backend> {
    let assets = microvm_assets()?;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("image");
    for sub in ["bin", "root", "tmp", "etc", "proc", "sys", "dev", "run"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    let applets = std::process::Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .unwrap();
    for applet in String::from_utf8_lossy(&applets.stdout).split_whitespace() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
    }
    let config = assets.qemu_config(dir.path());
    Some(Backend {
        prepare: None,
        provider: Arc::new(svc_provider::microvm::MicrovmProvider::qemu(config, None)),
        image: root.display().to_string(),
        _guard: Some(dir),
    })
}

all_cases!(mock, docker, docker_agent, qemu);

/// A Docker image becomes a cached root disk: exported once, listed in snapshots, booted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_boots_a_docker_image_built_once() {
    let (Some(assets), Some(docker)) = (microvm_assets(), docker().await) else {
        return;
    };
    let engine = DockerProvider::connect(engine_path()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = assets.qemu_config(dir.path());
    let provider: Arc<dyn Provider> = Arc::new(svc_provider::microvm::MicrovmProvider::qemu(
        config,
        Some(Arc::new(engine)),
    ));
    let first = Sandbox::new(Arc::clone(&provider), &docker.image).await;
    let second = Sandbox::new(Arc::clone(&provider), &docker.image).await;
    for sandbox in [&first, &second] {
        let out = sandbox
            .sh("cat /proc/version; ls /bin/busybox; echo $SANDBOX_DEFAULT")
            .await;
        assert!(out.stdout().contains("cloud-amd64"), "{}", out.stdout());
        assert!(out.stdout().contains("/bin/busybox"), "{}", out.stdout());
        assert!(
            out.stdout().ends_with("yes\n"),
            "the sandbox's environment: {}",
            out.stdout()
        );
    }
    let snapshots = provider.snapshots().await.unwrap();
    assert_eq!(snapshots.len(), 1, "built once: {snapshots:?}");
    assert_eq!(snapshots[0].image, docker.image);
    assert_eq!(snapshots[0].kernel, "vmlinux");
    assert!(snapshots[0].size > 0);
    // An image the engine does not have and cannot pull is refused, leaving nothing behind.
    let missing = microvm_spec("svc-test-no-such-image:latest");
    assert!(provider.spawn(&missing).await.is_err());
    assert_eq!(
        provider.status(&missing.id).await.unwrap(),
        svc_provider::RuntimeStatus::Missing
    );
    provider.destroy(&first.id).await.unwrap();
    provider.destroy(&second.id).await.unwrap();
}

/// What cannot boot fails clearly and leaves nothing: a missing VMM binary, a missing kernel,
/// an "agent" that is no agent (the guest never answers, so the boot deadline and its retry
/// run out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_failures_are_clear_and_leave_nothing() {
    let Some(backend) = qemu().await else {
        return;
    };
    let assets = microvm_assets().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = svc_core::config::QemuProviderConfig {
        boot_timeout: svc_core::GoDuration::from_secs(4),
        ..assets.qemu_config(dir.path())
    };
    let spec = || microvm_spec(&backend.image);
    let cases = [
        (
            svc_core::config::QemuProviderConfig {
                qemu_path: "/no/such/qemu".into(),
                ..base.clone()
            },
            "/no/such/qemu",
        ),
        (
            svc_core::config::QemuProviderConfig {
                kernel_path: dir.path().join("no-kernel"),
                ..base.clone()
            },
            "no-kernel",
        ),
        (
            svc_core::config::QemuProviderConfig {
                agent_path: "/bin/true".into(),
                ..base.clone()
            },
            "",
        ),
    ];
    for (config, named) in cases {
        let provider = svc_provider::microvm::MicrovmProvider::qemu(config, None);
        let spec = spec();
        let started = Instant::now();
        let err = provider.spawn(&spec).await.unwrap_err();
        assert!(err.to_string().contains(named), "{err}");
        // The deadline of 4 s, tried twice, bounds the wait.
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            provider.status(&spec.id).await.unwrap(),
            svc_provider::RuntimeStatus::Missing
        );
        assert!(
            !dir.path().join("vms").join(spec.id.as_str()).exists(),
            "nothing left for {named:?}"
        );
    }
    let health = svc_provider::microvm::MicrovmProvider::qemu(
        svc_core::config::QemuProviderConfig {
            kernel_path: dir.path().join("no-kernel"),
            ..base
        },
        None,
    )
    .health()
    .await
    .unwrap_err();
    assert!(health.to_string().contains("kernel_path"), "{health}");
}

/// Reading and writing files needs nothing inside the image: not even a shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_files_work_without_a_shell() {
    let Some(backend) = docker().await else {
        return;
    };
    let sandbox = Sandbox::new(Arc::clone(&backend.provider), "svc-test-noshell:latest").await;
    assert_eq!(
        sandbox.read("/data/readme.txt").await.unwrap(),
        b"no shell here\n"
    );
    sandbox
        .write("/data/new/file.bin", &[0, 1, 2, 255], 0o600)
        .await
        .unwrap();
    assert_eq!(
        sandbox.read("/data/new/file.bin").await.unwrap(),
        [0, 1, 2, 255]
    );
    let info = sandbox
        .p()
        .stat(&sandbox.id, &path_of("/data/new/file.bin"))
        .await
        .unwrap();
    assert_eq!((info.size, info.mode), (4, 0o600));
    backend.provider.destroy(&sandbox.id).await.unwrap();
}

/// `accel: auto` boots a probe VM under KVM once, from the provider's start-up warm-up, bounded
/// by the boot timeout; what it decided (and why) is in the provider detail,
/// and spawns use it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_auto_accel_is_decided_by_one_timed_probe_boot() {
    let Some(backend) = qemu().await else {
        return;
    };
    let assets = microvm_assets().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = svc_core::config::QemuProviderConfig {
        accel: svc_core::config::QemuAccel::Auto,
        boot_timeout: svc_core::GoDuration::from_secs(15),
        ..assets.qemu_config(dir.path())
    };
    let provider: Arc<dyn Provider> =
        Arc::new(svc_provider::microvm::MicrovmProvider::qemu(config, None));
    let summary = provider.config_summary();
    assert_eq!(summary["accel"], "auto (the KVM probe has not finished)");
    assert!(summary["vmm"]
        .as_str()
        .unwrap()
        .contains("qemu-system-x86_64"));
    assert!(summary["vsock_backend"]
        .as_str()
        .unwrap()
        .contains("vhost-device-vsock"));
    let kvm = svc_provider::microvm::Kvm::detect();
    assert_eq!(summary["kvm"], kvm.describe());
    let started = Instant::now();
    provider.health().await.unwrap();
    assert_eq!(
        provider.config_summary()["accel"],
        "auto (the KVM probe has not finished)",
        "a health check never starts the probe (svc doctor runs them)"
    );
    let warming = tokio::spawn({
        let provider = Arc::clone(&provider);
        async move { provider.warm_up().await }
    });
    assert!(
        provider.config_summary()["vmm"]
            .as_str()
            .unwrap()
            .contains("QEMU emulator version"),
        "the health check read the VMM's version"
    );
    // The spawn waits for the probe, then boots with what it decided.
    let sandbox = Sandbox::new(Arc::clone(&provider), &backend.image).await;
    warming.await.unwrap();
    let took = started.elapsed();
    let accel = provider.config_summary()["accel"]
        .as_str()
        .unwrap()
        .to_owned();
    eprintln!("probe and spawn took {took:?}; accel {accel}");
    assert!(
        accel.starts_with("auto: kvm (a probe boot under KVM answered in")
            || accel.starts_with("auto: tcg ("),
        "{accel}"
    );
    if !kvm.present() {
        assert!(accel.starts_with("auto: tcg (KVM is absent"), "{accel}");
    }
    // Bounded by the boot timeout (one probe, no retry), plus the sandbox's own boot.
    assert!(took < Duration::from_secs(15 + 60), "{took:?}");
    assert_eq!(sandbox.sh("echo up").await.stdout(), "up\n");
    assert!(
        !dir.path().join("vms/kvm-probe").exists(),
        "the probe VM is gone"
    );
}

/// A directory image is cached by every entry in it: a file changed deep inside builds a new
/// disk, an untouched directory reuses the cached one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_directory_images_are_rebuilt_when_any_file_changes() {
    if microvm_assets().is_none() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let image = work.path().join("image");
    std::fs::create_dir_all(image.join("etc/deep/deeper")).unwrap();
    std::fs::write(image.join("etc/deep/deeper/conf"), "one").unwrap();
    let cache =
        svc_provider::microvm::RootfsCache::new(work.path().join("cache"), "vmlinux".into(), None);
    let name = image.display().to_string();
    let first = cache
        .root_disk(&name, &svc_provider::ProgressSink::default())
        .await
        .unwrap();
    assert_eq!(
        cache
            .root_disk(&name, &svc_provider::ProgressSink::default())
            .await
            .unwrap(),
        first,
        "cached"
    );
    std::fs::write(image.join("etc/deep/deeper/conf"), "two!").unwrap();
    let second = cache
        .root_disk(&name, &svc_provider::ProgressSink::default())
        .await
        .unwrap();
    assert_ne!(second, first, "a change deep inside makes a new disk");
    assert_eq!(cache.list().await.unwrap().len(), 2);
}

/// A root disk the guest cannot mount fails the boot at once, quoting the guest, instead of a
/// sandbox that runs without the image's content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_boot_fails_fast_when_the_root_disk_does_not_mount() {
    let Some(backend) = qemu().await else {
        return;
    };
    let first = Sandbox::new(Arc::clone(&backend.provider), &backend.image).await;
    backend.provider.destroy(&first.id).await.unwrap();
    let rootfs = std::path::Path::new(&backend.image)
        .parent()
        .unwrap()
        .join("rootfs");
    for entry in std::fs::read_dir(&rootfs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "ext4") {
            std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        }
    }
    let spec = microvm_spec(&backend.image);
    let started = Instant::now();
    let err = backend.provider.spawn(&spec).await.unwrap_err().to_string();
    assert!(err.contains("switching to the root disk"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "failed at once, not at the boot deadline: {:?}",
        started.elapsed()
    );
    assert_eq!(
        backend.provider.status(&spec.id).await.unwrap(),
        svc_provider::RuntimeStatus::Missing
    );
}

/// File operations through exec scripts as an unprivileged user (pool workspaces): streamed
/// both ways, a broken upload leaves the old file and nothing beside it, and what the user may
/// not reach is refused, symlinks included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_files_run_as_a_user_and_stop_where_it_may_not_reach() {
    use svc_provider::shell_files::ShellFiles;
    let Some(backend) = docker().await else {
        return;
    };
    // A multi-user container: its root keeps what it needs to make other users' homes.
    let id = SandboxId::generate();
    let spec = SpawnSpec {
        id: id.clone(),
        image: backend.image.clone(),
        memory_mb: 256,
        vcpus: 1,
        env: BTreeMap::new(),
        network: None,
        labels: BTreeMap::new(),
        multi_user: true,
        egress: svc_core::egress::Egress::default(),
        progress: Default::default(),
    };
    backend.provider.spawn(&spec).await.unwrap();
    let sandbox = Sandbox {
        provider: Arc::clone(&backend.provider),
        id,
    };
    let root = ShellFiles::new(
        sandbox.p(),
        &sandbox.id,
        Some(svc_provider::ExecUser {
            uid: 0,
            gid: 0,
            home: path_of("/"),
        }),
    );
    let user = |uid: u32| {
        ShellFiles::new(
            sandbox.p(),
            &sandbox.id,
            Some(svc_provider::ExecUser {
                uid,
                gid: uid,
                home: path_of(&format!("/home/{uid}")),
            }),
        )
    };
    let out = sandbox
        .sh("mkdir -p /home/1000 /home/1001 && echo secret > /home/1001/s && chown -R 1000:1000 /home/1000 && chown -R 1001:1001 /home/1001 && chmod 700 /home/1000 /home/1001 && ln -s /home/1001/s /home/1000/peek")
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let alice = user(1000);
    let big: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 253) as u8).collect();
    let chunks: Vec<Result<Bytes, ProviderError>> = big
        .chunks(100_000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    alice
        .write(
            &path_of("/home/1000/d/big.bin"),
            0o640,
            futures::stream::iter(chunks).boxed(),
        )
        .await
        .unwrap();
    let mut read = Vec::new();
    let mut stream = alice.read(&path_of("/home/1000/d/big.bin")).await.unwrap();
    while let Some(chunk) = stream.next().await {
        read.extend_from_slice(&chunk.unwrap());
    }
    assert!(read == big, "{} bytes read back", read.len());
    let info = alice.stat(&path_of("/home/1000/d/big.bin")).await.unwrap();
    assert_eq!(
        (info.size, info.mode, info.is_dir),
        (big.len() as u64, 0o640, false)
    );
    let owner = sandbox.sh("stat -c %u /home/1000/d/big.bin").await;
    assert_eq!(owner.stdout, b"1000\n", "the user's own file");

    // A broken upload: the old file stays, nothing is left beside it.
    let broken = futures::stream::iter(vec![
        Ok(Bytes::from_static(b"partial")),
        Err(ProviderError::failed("the client went away")),
    ])
    .boxed();
    assert!(alice
        .write(&path_of("/home/1000/d/big.bin"), 0o640, broken)
        .await
        .is_err());
    assert_eq!(
        alice
            .stat(&path_of("/home/1000/d/big.bin"))
            .await
            .unwrap()
            .size,
        big.len() as u64
    );
    let names: Vec<String> = alice
        .list(&path_of("/home/1000/d"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["big.bin"]);

    // Another user's files: not through a symlink, not directly, not for writing.
    let denied = alice.read(&path_of("/home/1000/peek")).await.err();
    assert!(
        matches!(&denied, Some(ProviderError::InvalidRequest { message }) if message.contains("permission denied")),
        "{denied:?}"
    );
    // Behind a directory the user cannot enter, a file is not even seen.
    let hidden = alice.read(&path_of("/home/1001/s")).await.err();
    assert!(
        matches!(hidden, Some(ProviderError::FileNotFound { .. })),
        "{hidden:?}"
    );
    let planted = futures::stream::iter(vec![Ok(Bytes::from_static(b"x"))]).boxed();
    assert!(alice
        .write(&path_of("/home/1001/planted"), 0o644, planted)
        .await
        .is_err());
    assert!(alice.delete(&path_of("/home/1001/s"), false).await.is_err());
    assert!(alice.list(&path_of("/home/1001")).await.is_err());
    assert!(
        root.read(&path_of("/home/1001/s")).await.is_ok(),
        "root may"
    );
    assert!(matches!(
        alice.read(&path_of("/home/1000/missing")).await.err(),
        Some(ProviderError::FileNotFound { .. })
    ));
    assert_eq!(
        alice
            .glob(&svc_core::glob::SandboxGlob::new("/home/1000/**/*.bin").unwrap())
            .await
            .unwrap(),
        ["/home/1000/d/big.bin"]
    );
    backend.provider.destroy(&sandbox.id).await.unwrap();
}
