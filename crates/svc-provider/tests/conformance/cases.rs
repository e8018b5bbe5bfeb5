//! The provider conformance cases: one behavioural contract every provider must pass, written
//! over `&dyn Provider`. `conformance.rs` runs them on mock, docker (both exec paths) and qemu;
//! svc-control's tests run them on pool mode over the mock (`tests/control/pool_conformance.rs`,
//! which includes this file). A case needing a capability a backend does not declare reports
//! itself skipped, saying why.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::StreamExt;
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::{Capability, SandboxId};
use svc_provider::{
    ByteStream, ExecSession, ExecSpec, Provider, ProviderError, RuntimeStatus, Signal, SpawnSpec,
    StdStream, TtySize, Upload, LABEL_INSTALLATION, LABEL_MANAGED, LABEL_SANDBOX_ID as LABEL,
};

/// What a backend does before each sandbox is spawned (pool mode reserves its seat).
pub type Prepare = Arc<dyn Fn(SandboxId) -> BoxFuture<'static, ()> + Send + Sync>;

/// A backend under test and what keeps it alive.
pub struct Backend {
    pub provider: Arc<dyn Provider>,
    pub image: String,
    pub prepare: Option<Prepare>,
    pub _guard: Option<tempfile::TempDir>,
}

/// A sandbox for one case, destroyed at the end even when the case panics.
pub struct Sandbox {
    pub provider: Arc<dyn Provider>,
    pub id: SandboxId,
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
    /// A sandbox of `backend`, prepared as it needs.
    pub async fn on(backend: &Backend) -> Self {
        let id = SandboxId::generate();
        if let Some(prepare) = &backend.prepare {
            prepare(id.clone()).await;
        }
        Self::with_id(Arc::clone(&backend.provider), &backend.image, id).await
    }

    pub async fn new(provider: Arc<dyn Provider>, image: &str) -> Self {
        Self::with_id(provider, image, SandboxId::generate()).await
    }

    async fn with_id(provider: Arc<dyn Provider>, image: &str, id: SandboxId) -> Self {
        let spec = SpawnSpec {
            id: id.clone(),
            image: image.into(),
            memory_mb: 256,
            vcpus: 1,
            env: BTreeMap::from([("SANDBOX_DEFAULT".into(), "yes".into())]),
            network: None,
            // svc's labels, as the control plane sets them, under an installation of its own
            // (no test server's reconciliation touches another installation's runtimes).
            labels: BTreeMap::from([
                (LABEL_MANAGED.to_owned(), "true".to_owned()),
                (LABEL.to_owned(), id.to_string()),
                (LABEL_INSTALLATION.to_owned(), "svc-conformance".to_owned()),
            ]),
            multi_user: false,
            egress: svc_core::egress::Egress::default(),
            progress: Default::default(),
        };
        provider.spawn(&spec).await.unwrap();
        Sandbox { provider, id }
    }

    pub fn p(&self) -> &dyn Provider {
        self.provider.as_ref()
    }

    pub async fn start(&self, spec: ExecSpec) -> ExecSession {
        self.p().exec(&self.id, spec).await.unwrap()
    }

    /// Runs a shell command to the end.
    pub async fn sh(&self, command: &str) -> Output {
        self.run(spec(&["/bin/sh", "-c", command])).await
    }

    pub async fn run(&self, spec: ExecSpec) -> Output {
        collect(self.start(spec).await).await
    }

    pub async fn write(&self, path: &str, content: &[u8], mode: u32) -> Result<(), ProviderError> {
        self.p()
            .write_file(
                &self.id,
                &target(path),
                mode,
                Upload::bytes(Bytes::copy_from_slice(content)),
            )
            .await
    }

    pub async fn read(&self, path: &str) -> Result<Vec<u8>, ProviderError> {
        let mut stream = self.p().read_file(&self.id, &path_of(path)).await?;
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }
}

pub fn path_of(path: &str) -> SandboxPath {
    SandboxPath::parse(path).unwrap()
}

/// A path that may be written, deleted or moved (as the control plane hands them over).
pub fn target(path: &str) -> NonRootPath {
    NonRootPath::new(path_of(path)).expect("not the root")
}

pub fn spec(argv: &[&str]) -> ExecSpec {
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
pub struct Output {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Waits until the command has written `ready` (so it runs, with its handlers as it set them),
/// and hands the session back for the rest of its output.
pub async fn when_ready(mut session: ExecSession) -> ExecSession {
    let mut said = Vec::new();
    while !said.ends_with(b"ready\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(60), session.output.next())
            .await
            .expect("the command starts within a minute")
            .expect("the command says it is ready before its output ends")
            .unwrap();
        said.extend_from_slice(&chunk.data);
    }
    session
}

pub async fn collect(session: ExecSession) -> Output {
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

pub fn needs(provider: &dyn Provider, capability: Capability) -> bool {
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

pub async fn exit_codes(sb: &Sandbox) {
    for code in [0, 1, 3, 255] {
        assert_eq!(sb.sh(&format!("exit {code}")).await.code, code);
    }
}

pub async fn stdout_and_stderr_are_separate(sb: &Sandbox) {
    let out = sb.sh("echo out; echo err >&2; echo out2").await;
    assert_eq!(out.stdout(), "out\nout2\n");
    assert_eq!(out.stderr(), "err\n");
}

pub async fn argv_mode_runs_without_a_shell(sb: &Sandbox) {
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

pub async fn large_output_arrives_whole(sb: &Sandbox) {
    let out = sb
        .sh("head -c 8000000 /dev/zero | tr '\\0' x; head -c 100000 /dev/zero | tr '\\0' y >&2")
        .await;
    assert_eq!(out.code, 0);
    assert_eq!(out.stdout.len(), 8_000_000);
    assert!(out.stdout.iter().all(|b| *b == b'x'));
    assert_eq!(out.stderr.len(), 100_000);
}

pub async fn binary_output_is_kept(sb: &Sandbox) {
    let out = sb.sh("printf '\\000\\001\\377\\376'").await;
    assert_eq!(out.stdout, vec![0, 1, 255, 254]);
}

pub async fn env_and_workdir(sb: &Sandbox) {
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

pub async fn concurrent_execs_do_not_mix(sb: &Sandbox) {
    let runs = (0..8).map(|i| async move {
        let out = sb.sh(&format!("for j in 1 2 3; do echo {i}; done")).await;
        (i, out)
    });
    for (i, out) in futures::future::join_all(runs).await {
        assert_eq!(out.stdout(), format!("{i}\n{i}\n{i}\n"));
    }
}

pub async fn stdin_then_eof(sb: &Sandbox) {
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
pub async fn closing_stdin_after_the_command_ended_is_no_error(sb: &Sandbox) {
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

pub async fn signals_end_commands_with_128_plus_n(sb: &Sandbox) {
    for (signal, code) in [
        (Signal::Int, 130),
        (Signal::Term, 143),
        (Signal::Kill, 137),
        (Signal::Hup, 129),
    ] {
        // `exec`: the signal reaches `sleep` itself, as it would a program run without a shell.
        let session = when_ready(
            sb.start(spec(&["/bin/sh", "-c", "echo ready; exec sleep 30"]))
                .await,
        )
        .await;
        session.control.signal(signal).await.unwrap();
        let out = tokio::time::timeout(Duration::from_secs(10), collect(session))
            .await
            .expect("the signal ends the command");
        assert_eq!(out.code, code, "{signal:?}");
    }
}

pub async fn kill_stops_everything_the_command_started(sb: &Sandbox) {
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
    let script = format!("sleep {secs} & echo ready; sleep {secs}; echo never");
    let session = when_ready(sb.start(spec(&["/bin/sh", "-c", &script])).await).await;
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
pub async fn kill_after_output_keeps_what_was_captured(sb: &Sandbox) {
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

pub async fn tty_merges_output_and_resizes(sb: &Sandbox) {
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

pub async fn binary_files_round_trip(sb: &Sandbox) {
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
pub fn chunked(len: usize, fail_after: Option<usize>) -> (Vec<u8>, ByteStream) {
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

pub async fn streamed_uploads_are_whole_or_nothing(sb: &Sandbox) {
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

pub async fn unicode_names(sb: &Sandbox) {
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

pub async fn listing_is_sorted_with_modes(sb: &Sandbox) {
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

pub async fn delete_rules(sb: &Sandbox) {
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

pub async fn move_and_chmod(sb: &Sandbox) {
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

pub async fn glob_patterns(sb: &Sandbox) {
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

pub async fn read_errors(sb: &Sandbox) {
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

pub async fn logs_answer(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Console) {
        return;
    }
    sb.sh("echo logged").await;
    let lines = sb.p().logs(&sb.id, 100).await.unwrap();
    assert!(lines.len() <= 100);
    assert!(sb.p().logs(&sb.id, 0).await.unwrap().is_empty());
}

pub async fn stats_count_a_running_command(sb: &Sandbox) {
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

// ---- lifecycle ----

pub async fn status_follows_the_runtime(sb: &Sandbox) {
    assert_eq!(sb.p().status(&sb.id).await.unwrap(), RuntimeStatus::Running);
    let never = SandboxId::generate();
    assert_eq!(sb.p().status(&never).await.unwrap(), RuntimeStatus::Missing);
}

pub async fn inventory_lists_the_runtime_with_its_labels(sb: &Sandbox) {
    if !needs(sb.p(), Capability::RuntimeInventory) {
        return;
    }
    let runtimes = sb.p().inventory().await.unwrap();
    let own = runtimes
        .iter()
        .find(|runtime| runtime.sandbox_id == sb.id)
        .unwrap_or_else(|| panic!("{} is not in the inventory: {runtimes:?}", sb.id));
    assert!(own.running, "{own:?}");
    assert_eq!(own.labels.get(LABEL), Some(&sb.id.to_string()), "{own:?}");
}

pub async fn pause_and_resume_are_idempotent_and_keep_the_sandbox(sb: &Sandbox) {
    if !needs(sb.p(), Capability::Pause) {
        return;
    }
    // In the command's working directory, wherever a backend puts it (pool mode confines
    // files to the sandbox's workspace).
    assert_eq!(
        sb.sh("echo kept > kept.txt && echo ok").await.stdout(),
        "ok\n"
    );
    sb.p().pause(&sb.id).await.unwrap();
    // A paused runtime stays paused: pausing again is no error.
    sb.p().pause(&sb.id).await.unwrap();
    sb.p().resume(&sb.id).await.unwrap();
    // A running one stays running.
    sb.p().resume(&sb.id).await.unwrap();
    assert_eq!(sb.p().status(&sb.id).await.unwrap(), RuntimeStatus::Running);
    assert_eq!(sb.sh("cat kept.txt").await.stdout(), "kept\n");
}

pub async fn operations_on_a_destroyed_sandbox_fail(sb: &Sandbox) {
    sb.p().destroy(&sb.id).await.unwrap();
    assert_eq!(sb.p().status(&sb.id).await.unwrap(), RuntimeStatus::Missing);
    if sb
        .p()
        .capabilities()
        .contains(&Capability::RuntimeInventory)
    {
        let runtimes = sb.p().inventory().await.unwrap();
        assert!(
            runtimes.iter().all(|runtime| runtime.sandbox_id != sb.id),
            "{runtimes:?}"
        );
    }
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
                    let sandbox = super::Sandbox::on(&backend).await;
                    super::$case(&sandbox).await;
                    backend.provider.destroy(&sandbox.id).await.unwrap();
                }
            )*
        }
    };
}

/// The cases that name no absolute path inside the sandbox: every case but the file API's,
/// for backends that confine files to a directory of their own (pool mode's workspaces).
#[allow(unused_macros)] // used by pool mode's conformance in svc-control
macro_rules! cases_without_absolute_paths {
    ($($backend:ident),*) => {
        $(
            conformance!($backend:
    exit_codes,
    stdout_and_stderr_are_separate,
    argv_mode_runs_without_a_shell,
    large_output_arrives_whole,
    binary_output_is_kept,
    concurrent_execs_do_not_mix,
    stdin_then_eof,
    closing_stdin_after_the_command_ended_is_no_error,
    signals_end_commands_with_128_plus_n,
    kill_stops_everything_the_command_started,
    kill_after_output_keeps_what_was_captured,
    tty_merges_output_and_resizes,
    logs_answer,
    stats_count_a_running_command,
    status_follows_the_runtime,
    inventory_lists_the_runtime_with_its_labels,
    pause_and_resume_are_idempotent_and_keep_the_sandbox,
    operations_on_a_destroyed_sandbox_fail,
            );
        )*
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
    status_follows_the_runtime,
    inventory_lists_the_runtime_with_its_labels,
    pause_and_resume_are_idempotent_and_keep_the_sandbox,
    operations_on_a_destroyed_sandbox_fail,
            );
        )*
    };
}
