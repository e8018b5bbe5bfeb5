//! The provider conformance suite: one behavioural contract every provider must pass, written
//! over `&dyn Provider` and expanded by a macro into one test per case per backend (mock, docker,
//! qemu; firecracker's boots need a `firecracker` binary and real KVM, so its driver is tested
//! against a fake VMM in `conformance/firecracker.rs`); a case needing a capability a backend
//! does not declare reports itself skipped, saying why.

// Cases are plain async functions shared by the generated tests.
#![allow(clippy::unwrap_used)]

#[path = "conformance/firecracker.rs"]
mod firecracker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use svc_core::config::DockerProviderConfig;
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::{Capability, SandboxId};
use svc_provider::docker::DockerProvider;
use svc_provider::mock::MockProvider;
use svc_provider::{
    ByteStream, ExecSession, ExecSpec, Provider, ProviderError, Signal, SpawnSpec, StdStream,
    TtySize, Upload,
};

/// A backend under test and what keeps it alive.
struct Backend {
    provider: Arc<dyn Provider>,
    image: String,
    _guard: Option<tempfile::TempDir>,
}

async fn mock() -> Option<Backend> {
    let dir = tempfile::tempdir().unwrap();
    Some(Backend {
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
        provider: Arc::new(svc_provider::microvm::MicrovmProvider::qemu(config, None)),
        image: root.display().to_string(),
        _guard: Some(dir),
    })
}

/// A sandbox for one case, destroyed at the end even when the case panics.
struct Sandbox {
    provider: Arc<dyn Provider>,
    id: SandboxId,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let provider = Arc::clone(&self.provider);
        let id = self.id.clone();
        // Drop cannot await; a short-lived runtime on its own thread removes the runtime.
        let cleanup = std::thread::spawn(move || {
            if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                let _ = runtime.block_on(provider.destroy(&id));
            }
        });
        let _ = cleanup.join();
    }
}

impl Sandbox {
    async fn new(provider: Arc<dyn Provider>, image: &str) -> Self {
        let id = SandboxId::generate();
        let spec = SpawnSpec {
            id: id.clone(),
            image: image.into(),
            memory_mb: 256,
            vcpus: 1,
            env: BTreeMap::from([("SANDBOX_DEFAULT".into(), "yes".into())]),
            network: None,
            labels: BTreeMap::new(),
            multi_user: false,
            egress: svc_core::egress::Egress::default(),
            progress: Default::default(),
        };
        provider.spawn(&spec).await.unwrap();
        Sandbox { provider, id }
    }

    fn p(&self) -> &dyn Provider {
        self.provider.as_ref()
    }

    async fn start(&self, spec: ExecSpec) -> ExecSession {
        self.p().exec(&self.id, spec).await.unwrap()
    }

    /// Runs a shell command to the end.
    async fn sh(&self, command: &str) -> Output {
        self.run(spec(&["/bin/sh", "-c", command])).await
    }

    async fn run(&self, spec: ExecSpec) -> Output {
        collect(self.start(spec).await).await
    }

    async fn write(&self, path: &str, content: &[u8], mode: u32) -> Result<(), ProviderError> {
        self.p()
            .write_file(
                &self.id,
                &target(path),
                mode,
                Upload::bytes(Bytes::copy_from_slice(content)),
            )
            .await
    }

    async fn read(&self, path: &str) -> Result<Vec<u8>, ProviderError> {
        let mut stream = self.p().read_file(&self.id, &path_of(path)).await?;
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }
}

fn path_of(path: &str) -> SandboxPath {
    SandboxPath::parse(path).unwrap()
}

/// A path that may be written, deleted or moved (as the control plane hands them over).
fn target(path: &str) -> NonRootPath {
    NonRootPath::new(path_of(path)).expect("not the root")
}

fn spec(argv: &[&str]) -> ExecSpec {
    ExecSpec {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        env: BTreeMap::new(),
        workdir: None,
        tty: None,
        stdin: false,
        user: None,
    }
}

#[derive(Debug, Default)]
struct Output {
    code: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Output {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

async fn collect(session: ExecSession) -> Output {
    let ExecSession {
        mut output, exit, ..
    } = session;
    let reading = async {
        let mut out = Output::default();
        while let Some(chunk) = output.next().await {
            let chunk = chunk.unwrap();
            match chunk.stream {
                StdStream::Stdout => out.stdout.extend_from_slice(&chunk.data),
                StdStream::Stderr => out.stderr.extend_from_slice(&chunk.data),
            }
        }
        out
    };
    let (mut out, status) = tokio::join!(reading, exit);
    out.code = status.unwrap().code;
    out
}

fn needs(provider: &dyn Provider, capability: Capability) -> bool {
    let has = provider.capabilities().contains(&capability);
    if !has {
        eprintln!(
            "SKIPPED: provider {} does not declare {}",
            provider.name(),
            capability.as_str()
        );
    }
    has
}

// ---- exec ----

async fn exit_codes(sb: &Sandbox) {
    for code in [0, 1, 3, 255] {
        assert_eq!(sb.sh(&format!("exit {code}")).await.code, code);
    }
}

async fn stdout_and_stderr_are_separate(sb: &Sandbox) {
    let out = sb.sh("echo out; echo err >&2; echo out2").await;
    assert_eq!(out.stdout(), "out\nout2\n");
    assert_eq!(out.stderr(), "err\n");
}

async fn argv_mode_runs_without_a_shell(sb: &Sandbox) {
    let out = sb.run(spec(&["echo", "$HOME", "a b"])).await;
    assert_eq!(out.stdout(), "$HOME a b\n");
    // A missing program is reported: refused up front, or run and exited 126/127 with the
    // reason (as `docker exec` does).
    match sb.p().exec(&sb.id, spec(&["/no/such/program"])).await {
        Err(ProviderError::InvalidRequest { .. }) => {}
        Ok(session) => {
            let out = collect(session).await;
            assert!(matches!(out.code, 126 | 127), "exit {}", out.code);
            assert!(
                !out.stdout.is_empty() || !out.stderr.is_empty(),
                "the reason is shown"
            );
        }
        Err(other) => panic!("a missing program is a clear error, got {other:?}"),
    }
}

async fn large_output_arrives_whole(sb: &Sandbox) {
    let out = sb
        .sh("head -c 8000000 /dev/zero | tr '\\0' x; head -c 100000 /dev/zero | tr '\\0' y >&2")
        .await;
    assert_eq!(out.code, 0);
    assert_eq!(out.stdout.len(), 8_000_000);
    assert!(out.stdout.iter().all(|b| *b == b'x'));
    assert_eq!(out.stderr.len(), 100_000);
}

async fn binary_output_is_kept(sb: &Sandbox) {
    let out = sb.sh("printf '\\000\\001\\377\\376'").await;
    assert_eq!(out.stdout, vec![0, 1, 255, 254]);
}

async fn env_and_workdir(sb: &Sandbox) {
    sb.write("/work/dir/marker", b"m", 0o644).await.unwrap();
    let mut spec = spec(&["/bin/sh", "-c", "echo $FOO; ls"]);
    spec.env.insert("FOO".into(), "bar baz".into());
    spec.workdir = Some(SandboxPath::parse("/work/dir").unwrap());
    let out = sb.run(spec).await;
    assert_eq!(out.code, 0, "{}", out.stderr());
    assert_eq!(out.stdout(), "bar baz\nmarker\n");
    let mut bad = self::spec(&["true"]);
    bad.workdir = Some(SandboxPath::parse("/does/not/exist").unwrap());
    assert!(sb.p().exec(&sb.id, bad).await.is_err());
}

async fn concurrent_execs_do_not_mix(sb: &Sandbox) {
    let runs = (0..8).map(|i| async move {
        let out = sb.sh(&format!("for j in 1 2 3; do echo {i}; done")).await;
        (i, out)
    });
    for (i, out) in futures::future::join_all(runs).await {
        assert_eq!(out.stdout(), format!("{i}\n{i}\n{i}\n"));
    }
}

async fn stdin_then_eof(sb: &Sandbox) {
    let mut spec = spec(&["cat"]);
    spec.stdin = true;
    let session = sb.start(spec).await;
    session
        .control
        .write_stdin(Bytes::from_static(b"hello "))
        .await
        .unwrap();
    session
        .control
        .write_stdin(Bytes::from_static(b"world"))
        .await
        .unwrap();
    session.control.close_stdin().await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), collect(session))
        .await
        .expect("cat ends after EOF");
    assert_eq!(out.stdout(), "hello world");
    assert_eq!(out.code, 0);
}

/// A command may end on what it read before its stdin is closed (the exec-jobs stdin route
/// writes, then closes); closing it afterwards is no error on any path.
async fn closing_stdin_after_the_command_ended_is_no_error(sb: &Sandbox) {
    let mut spec = spec(&["sh", "-c", "read line; echo \"got $line\""]);
    spec.stdin = true;
    let session = sb.start(spec).await;
    let control = Arc::clone(&session.control);
    control
        .write_stdin(Bytes::from_static(b"hello\n"))
        .await
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), collect(session))
        .await
        .expect("the command ends after one line");
    assert_eq!(out.stdout(), "got hello\n");
    // Twice, a moment apart: on a connection the other side has closed, the first write may
    // still be taken by the socket; the second meets the closed connection.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        control
            .close_stdin()
            .await
            .expect("closing the stdin of a command that has ended");
    }
}

async fn signals_end_commands_with_128_plus_n(sb: &Sandbox) {
    for (signal, code) in [
        (Signal::Int, 130),
        (Signal::Term, 143),
        (Signal::Kill, 137),
        (Signal::Hup, 129),
    ] {
        let session = sb.start(spec(&["sleep", "30"])).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        session.control.signal(signal).await.unwrap();
        let out = tokio::time::timeout(Duration::from_secs(10), collect(session))
            .await
            .expect("the signal ends the command");
        assert_eq!(out.code, code, "{signal:?}");
    }
}

async fn kill_stops_everything_the_command_started(sb: &Sandbox) {
    // A duration of its own: the mock's processes share the host's process table with every
    // other test running at the same time (the docker variant of this one included).
    // A number no other test picks, not a time anyone reads.
    #[allow(clippy::disallowed_methods)]
    let secs = 1000
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
            % 9000;
    let script = format!("sleep {secs} & sleep {secs}; echo never");
    let session = sb.start(spec(&["/bin/sh", "-c", &script])).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    session.control.kill().await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), collect(session))
        .await
        .expect("kill ends the command and its children");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!out.stdout().contains("never"));
    let survivors = sb
        .sh(&format!(
            "ps -eo args 2>/dev/null | grep -c '^sleep {secs}$' || true"
        ))
        .await;
    assert_eq!(survivors.stdout().trim(), "0", "no child survives the kill");
}

/// What a deadline relies on: output produced before the kill is delivered, and the kill ends
/// the command at once.
async fn kill_after_output_keeps_what_was_captured(sb: &Sandbox) {
    let ExecSession {
        mut output,
        control,
        exit,
    } = sb
        .start(spec(&[
            "/bin/sh",
            "-c",
            "echo before; sleep 30; echo after",
        ]))
        .await;
    let first = tokio::time::timeout(Duration::from_secs(10), output.next())
        .await
        .expect("output before the deadline")
        .unwrap()
        .unwrap();
    assert_eq!(&first.data[..], b"before\n");
    control.kill().await.unwrap();
    let rest = collect(ExecSession {
        output,
        control,
        exit,
    });
    let out = tokio::time::timeout(Duration::from_secs(10), rest)
        .await
        .expect("killed promptly");
    assert!(
        out.stdout.is_empty(),
        "nothing after the kill: {:?}",
        out.stdout()
    );
    assert_eq!(out.code, 137);
}

async fn tty_merges_output_and_resizes(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Console) {
        return;
    }
    let mut size = spec(&["stty", "size"]);
    size.tty = Some(TtySize { cols: 91, rows: 33 });
    let out = sb.run(size).await;
    assert_eq!(out.stdout().trim(), "33 91");
    let mut merged = spec(&["/bin/sh", "-c", "echo to-err >&2"]);
    merged.tty = Some(TtySize { cols: 80, rows: 24 });
    let out = sb.run(merged).await;
    assert!(out.stdout().contains("to-err") && out.stderr.is_empty());

    let mut interactive = spec(&["/bin/sh", "-c", "read line; stty size"]);
    interactive.tty = Some(TtySize { cols: 80, rows: 24 });
    interactive.stdin = true;
    let session = sb.start(interactive).await;
    session
        .control
        .resize(TtySize {
            cols: 120,
            rows: 40,
        })
        .await
        .unwrap();
    session
        .control
        .write_stdin(Bytes::from_static(b"go\n"))
        .await
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), collect(session))
        .await
        .unwrap();
    assert!(out.stdout().contains("40 120"), "{:?}", out.stdout());
}

// ---- files ----

async fn binary_files_round_trip(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Files) {
        return;
    }
    let all: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    sb.write("/data/bin.dat", &all, 0o600).await.unwrap();
    assert_eq!(sb.read("/data/bin.dat").await.unwrap(), all);
    let info = sb
        .p()
        .stat(&sb.id, &path_of("/data/bin.dat"))
        .await
        .unwrap();
    assert_eq!(info.size, 300_000);
    assert_eq!(info.mode, 0o600);
    assert!(!info.is_dir);
    assert_eq!(info.name, "bin.dat");
    assert_eq!(info.path, "/data/bin.dat");
    // Overwrite truncates.
    sb.write("/data/bin.dat", b"short", 0o644).await.unwrap();
    assert_eq!(sb.read("/data/bin.dat").await.unwrap(), b"short");
}

/// `len` bytes of a known pattern in 64 KiB chunks, failing after `fail_after` bytes if given.
fn chunked(len: usize, fail_after: Option<usize>) -> (Vec<u8>, ByteStream) {
    let all: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let mut chunks: Vec<Result<Bytes, ProviderError>> = all
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    if let Some(after) = fail_after {
        chunks.truncate(after / (64 * 1024));
        chunks.push(Err(ProviderError::failed("the client went away")));
    }
    (all, Box::pin(futures::stream::iter(chunks)))
}

async fn streamed_uploads_are_whole_or_nothing(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Files) {
        return;
    }
    let big = target("/up/big.bin");
    let upload = |stream, size| {
        sb.p()
            .write_file(&sb.id, &big, 0o640, Upload::stream(stream, size))
    };
    // Announced size (a Content-Length) and unknown size (chunked) both arrive whole.
    for announced in [true, false] {
        let (all, stream) = chunked(5 << 20, None);
        let size = announced.then_some(all.len() as u64);
        upload(stream, size).await.unwrap();
        assert_eq!(
            sb.read("/up/big.bin").await.unwrap(),
            all,
            "announced {announced}"
        );
        let info = sb.p().stat(&sb.id, &path_of("/up/big.bin")).await.unwrap();
        assert_eq!((info.size, info.mode), (5 << 20, 0o640));
    }
    sb.write("/up/big.bin", b"old", 0o644).await.unwrap();
    // A stream that fails, and one shorter than announced, leave the old file and nothing else.
    let (_, failing) = chunked(4 << 20, Some(3 << 20));
    assert!(upload(failing, Some(4 << 20)).await.is_err());
    let (_, short) = chunked(2 << 20, None);
    assert!(upload(short, Some(4 << 20)).await.is_err());
    let (_, unsized_failing) = chunked(3 << 20, Some(2 << 20));
    assert!(upload(unsized_failing, None).await.is_err());
    assert_eq!(sb.read("/up/big.bin").await.unwrap(), b"old");
    let names: Vec<String> = sb
        .p()
        .list_dir(&sb.id, &path_of("/up"))
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(names, ["big.bin"], "no partial upload is left behind");
}

async fn unicode_names(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Files) {
        return;
    }
    sb.write("/dír/ünïcödé 文件.txt", "✓".as_bytes(), 0o644)
        .await
        .unwrap();
    let listed = sb.p().list_dir(&sb.id, &path_of("/dír")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "ünïcödé 文件.txt");
    assert_eq!(listed[0].path, "/dír/ünïcödé 文件.txt");
    assert_eq!(
        sb.read("/dír/ünïcödé 文件.txt").await.unwrap(),
        "✓".as_bytes()
    );
    let pattern = SandboxGlob::new("/dír/*.txt").unwrap();
    let found = sb.p().glob(&sb.id, &pattern).await.unwrap();
    assert_eq!(found, vec!["/dír/ünïcödé 文件.txt".to_owned()]);
}

async fn listing_is_sorted_with_modes(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Files) {
        return;
    }
    sb.write("/l/b.txt", b"bb", 0o644).await.unwrap();
    sb.write("/l/a.sh", b"#!/bin/sh", 0o755).await.unwrap();
    sb.write("/l/sub/c", b"c", 0o644).await.unwrap();
    let listed = sb.p().list_dir(&sb.id, &path_of("/l")).await.unwrap();
    let names: Vec<_> = listed.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["a.sh", "b.txt", "sub"]);
    assert_eq!(listed[0].mode, 0o755);
    assert_eq!(listed[1].size, 2);
    assert!(listed[2].is_dir);
    let err = sb
        .p()
        .list_dir(&sb.id, &path_of("/l/b.txt"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    let err = sb
        .p()
        .list_dir(&sb.id, &path_of("/nope"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
}

async fn delete_rules(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Files) {
        return;
    }
    sb.write("/d/x/y.txt", b"y", 0o644).await.unwrap();
    let err = sb
        .p()
        .delete_file(&sb.id, &target("/d"), false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    assert!(sb.read("/d/x/y.txt").await.is_ok(), "nothing was deleted");
    sb.p()
        .delete_file(&sb.id, &target("/d/x/y.txt"), false)
        .await
        .unwrap();
    sb.p()
        .delete_file(&sb.id, &target("/d/x"), false)
        .await
        .unwrap();
    sb.write("/d/z/w.txt", b"w", 0o644).await.unwrap();
    sb.p()
        .delete_file(&sb.id, &target("/d"), true)
        .await
        .unwrap();
    let err = sb.p().stat(&sb.id, &path_of("/d")).await.unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
    let err = sb
        .p()
        .delete_file(&sb.id, &target("/d"), true)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
}

async fn move_and_chmod(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Files) {
        return;
    }
    sb.write("/m/src.txt", b"source", 0o644).await.unwrap();
    sb.write("/m/dst.txt", b"old", 0o644).await.unwrap();
    sb.p()
        .move_path(&sb.id, &target("/m/src.txt"), &target("/m/dst.txt"))
        .await
        .unwrap();
    assert_eq!(sb.read("/m/dst.txt").await.unwrap(), b"source");
    let err = sb.read("/m/src.txt").await.unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
    let err = sb
        .p()
        .move_path(&sb.id, &target("/m/missing"), &target("/m/x"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
    sb.p()
        .chmod(&sb.id, &path_of("/m/dst.txt"), 0o750)
        .await
        .unwrap();
    assert_eq!(
        sb.p()
            .stat(&sb.id, &path_of("/m/dst.txt"))
            .await
            .unwrap()
            .mode,
        0o750
    );
    let err = sb
        .p()
        .chmod(&sb.id, &path_of("/m/none"), 0o750)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
}

async fn glob_patterns(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Files) {
        return;
    }
    for path in [
        "/g/a.rs",
        "/g/b.rs",
        "/g/c.txt",
        "/g/x/d.rs",
        "/g/x/y/e.rs",
        "/g/file1.md",
        "/g/file2.md",
    ] {
        sb.write(path, b"", 0o644).await.unwrap();
    }
    let glob = |pattern: &'static str| async move {
        let pattern = SandboxGlob::new(pattern).unwrap();
        sb.p().glob(&sb.id, &pattern).await.unwrap()
    };
    assert_eq!(glob("/g/*.rs").await, ["/g/a.rs", "/g/b.rs"]);
    assert_eq!(
        glob("/g/**/*.rs").await,
        ["/g/a.rs", "/g/b.rs", "/g/x/d.rs", "/g/x/y/e.rs"]
    );
    assert_eq!(glob("/g/file?.md").await, ["/g/file1.md", "/g/file2.md"]);
    assert_eq!(glob("/g/file[2].md").await, ["/g/file2.md"]);
    assert!(glob("/nothing/*").await.is_empty());
}

async fn read_errors(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Files) {
        return;
    }
    sb.write("/r/f", b"f", 0o644).await.unwrap();
    let err = sb.read("/r").await.unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    let err = sb.read("/r/missing").await.unwrap_err();
    assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
}

async fn logs_answer(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Console) {
        return;
    }
    sb.sh("echo logged").await;
    let lines = sb.p().logs(&sb.id, 100).await.unwrap();
    assert!(lines.len() <= 100);
    assert!(sb.p().logs(&sb.id, 0).await.unwrap().is_empty());
}

async fn stats_count_a_running_command(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Stats) {
        return;
    }
    let ExecSession {
        mut output,
        control,
        exit,
    } = sb
        .start(spec(&["/bin/sh", "-c", "echo started; sleep 30"]))
        .await;
    let first = tokio::time::timeout(Duration::from_secs(10), output.next())
        .await
        .expect("the command starts")
        .unwrap()
        .unwrap();
    assert_eq!(&first.data[..], b"started\n");
    let stats = sb.p().stats(&sb.id).await.unwrap();
    control.kill().await.unwrap();
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        collect(ExecSession {
            output,
            control,
            exit,
        }),
    )
    .await
    .expect("killed promptly");
    assert!(stats.pids >= 1, "{stats:?}");
    assert!(stats.memory_bytes > 0, "{stats:?}");
    assert_eq!(stats.memory_limit_bytes, 256 * 1024 * 1024, "{stats:?}");
    assert!(
        stats.cpu_percent.is_finite() && stats.cpu_percent >= 0.0,
        "{stats:?}"
    );
}

async fn operations_on_a_destroyed_sandbox_fail(sb: &Sandbox) {
    sb.p().destroy(&sb.id).await.unwrap();
    assert!(sb.p().exec(&sb.id, spec(&["true"])).await.is_err());
    if sb.p().capabilities().contains(&Capability::Files) {
        assert!(sb.read("/x").await.is_err());
    }
    if sb.p().capabilities().contains(&Capability::Stats) {
        let err = sb.p().stats(&sb.id).await.unwrap_err();
        assert!(
            matches!(err, ProviderError::RuntimeNotFound { .. }),
            "{err:?}"
        );
    }
}

macro_rules! conformance {
    ($backend:ident: $($case:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(backend) = super::$backend().await else {
                        return;
                    };
                    if !super::needs(backend.provider.as_ref(), svc_core::Capability::Exec) {
                        return;
                    }
                    let sandbox = super::Sandbox::new(std::sync::Arc::clone(&backend.provider), &backend.image).await;
                    super::$case(&sandbox).await;
                    backend.provider.destroy(&sandbox.id).await.unwrap();
                }
            )*
        }
    };
}

macro_rules! all_cases {
    ($($backend:ident),*) => {
        $(
            conformance!($backend:
    exit_codes,
    stdout_and_stderr_are_separate,
    argv_mode_runs_without_a_shell,
    large_output_arrives_whole,
    binary_output_is_kept,
    env_and_workdir,
    concurrent_execs_do_not_mix,
    stdin_then_eof,
    closing_stdin_after_the_command_ended_is_no_error,
    signals_end_commands_with_128_plus_n,
    kill_stops_everything_the_command_started,
    kill_after_output_keeps_what_was_captured,
    tty_merges_output_and_resizes,
    binary_files_round_trip,
    streamed_uploads_are_whole_or_nothing,
    unicode_names,
    listing_is_sorted_with_modes,
    delete_rules,
    move_and_chmod,
    glob_patterns,
    read_errors,
    logs_answer,
    stats_count_a_running_command,
    operations_on_a_destroyed_sandbox_fail,
            );
        )*
    };
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
