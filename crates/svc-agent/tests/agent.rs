//! The real agent binary on a Unix socket, driven by the host's client (`svc_provider::agent`):
//! exec with separated streams, stdin and EOF, a terminal with resize, signals, kill on
//! disconnect; every file operation, streamed; the version handshake and malformed input.

#![allow(clippy::unwrap_used, clippy::zombie_processes)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use svc_agent_proto::{Frame, FrameCodec, Op, Reply, Request};
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_provider::agent::{AgentClient, UnixConnector};
use svc_provider::{ExecSession, ExecSpec, ProviderError, Signal, StdStream, TtySize};
use tokio_util::codec::Framed;

struct Agent {
    child: std::process::Child,
    socket: PathBuf,
    dir: tempfile::TempDir,
}

impl Agent {
    async fn start() -> Agent {
        Agent::start_with(|command, socket| {
            command.arg("--unix").arg(socket);
        })
        .await
    }

    /// In container mode (not PID 1 here, so it serves without supervising), started in
    /// `workdir` with the environment variable `IMAGE_VAR`.
    async fn start_container(workdir: &Path) -> Agent {
        let workdir = workdir.to_owned();
        Agent::start_with(move |command, socket| {
            command
                .arg("--container")
                .arg(socket)
                .current_dir(&workdir)
                .env("IMAGE_VAR", "from-the-image")
                .env("HOME", "/home/image-user")
                .stdout(std::process::Stdio::piped());
        })
        .await
    }

    async fn start_with(configure: impl FnOnce(&mut std::process::Command, &Path)) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_svc-agent"));
        configure(&mut command, &socket);
        let child = command.spawn().unwrap();
        // The socket file appears at bind, a moment before the agent listens: wait for a
        // connection to succeed, not for the file.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
                return Agent { child, socket, dir };
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the agent did not listen within 60 s");
    }

    fn client(&self) -> AgentClient {
        AgentClient::new(Arc::new(UnixConnector::new(&self.socket)))
    }

    /// A path inside this test's directory, as the agent sees it (its root is the host's).
    fn path(&self, name: &str) -> SandboxPath {
        SandboxPath::parse(&self.dir.path().join(name).display().to_string()).unwrap()
    }

    fn non_root(&self, name: &str) -> NonRootPath {
        NonRootPath::new(self.path(name)).unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spec(argv: &[&str]) -> ExecSpec {
    ExecSpec {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        env: [("GREETING".to_owned(), "hello".to_owned())].into(),
        workdir: None,
        tty: None,
        stdin: false,
        user: None,
    }
}

/// Everything a session printed, per stream, and its exit code.
async fn collect(mut session: ExecSession) -> (String, String, i32) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Some(chunk) = session.output.next().await {
        let chunk = chunk.unwrap();
        match chunk.stream {
            StdStream::Stdout => out.extend_from_slice(&chunk.data),
            StdStream::Stderr => err.extend_from_slice(&chunk.data),
        }
    }
    let code = session.exit.await.unwrap().code;
    (
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
        code,
    )
}

#[tokio::test]
async fn hello_names_the_protocol_and_build() {
    let agent = Agent::start().await;
    let hello = agent.client().hello().await.unwrap();
    assert_eq!(hello.version, svc_agent_proto::VERSION);
    assert_eq!(hello.agent_version, env!("CARGO_PKG_VERSION"));
}

#[tokio::test]
async fn exec_separates_streams_and_reports_the_exit_code() {
    let agent = Agent::start().await;
    let mut spec = spec(&["sh", "-c", "echo $GREETING; pwd; echo oops >&2; exit 4"]);
    spec.workdir = Some(SandboxPath::parse(agent.dir.path().to_str().unwrap()).unwrap());
    let (out, err, code) = collect(agent.client().exec(spec).await.unwrap()).await;
    assert_eq!(out, format!("hello\n{}\n", agent.dir.path().display()));
    assert_eq!(err, "oops\n");
    assert_eq!(code, 4);
}

#[tokio::test]
async fn exec_streams_stdin_to_its_end() {
    let agent = Agent::start().await;
    let mut spec = spec(&["sh", "-c", "wc -c; echo done"]);
    spec.stdin = true;
    let session = agent.client().exec(spec).await.unwrap();
    // More than one frame's worth, so it crosses as several.
    let block = Bytes::from(vec![b'x'; 300 * 1024]);
    session.control.write_stdin(block.clone()).await.unwrap();
    session.control.write_stdin(block).await.unwrap();
    session.control.close_stdin().await.unwrap();
    let (out, _, code) = collect(session).await;
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["614400", "done"]
    );
    assert_eq!(code, 0);
}

/// A pool workspace's command runs as its own user with its own `HOME` (switching users needs
/// the agent to run as root, as it does in a guest).
#[tokio::test]
async fn exec_runs_as_the_requested_user() {
    let agent = Agent::start().await;
    let running_as_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap();
    if !running_as_root {
        eprintln!("SKIPPED (loudly): switching users needs root");
        return;
    }
    // The user must be able to reach its home: the test's directory is private to root.
    std::fs::set_permissions(
        agent.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    let home = agent.path("home");
    std::fs::create_dir(home.as_str()).unwrap();
    std::os::unix::fs::chown(home.as_str(), Some(20_001), Some(20_001)).unwrap();
    let mut spec = spec(&["sh", "-c", "id -u; id -g; echo $HOME; pwd"]);
    spec.user = Some(svc_provider::ExecUser {
        uid: 20_001,
        gid: 20_001,
        home: home.clone(),
    });
    let (out, err, code) = collect(agent.client().exec(spec).await.unwrap()).await;
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, format!("20001\n20001\n{home}\n{home}\n"));
}

#[tokio::test]
async fn a_terminal_has_its_size_and_follows_a_resize() {
    let agent = Agent::start().await;
    let mut spec = spec(&["sh", "-c", "stty size; read line; stty size"]);
    spec.tty = Some(TtySize {
        cols: 100,
        rows: 30,
    });
    spec.stdin = true;
    let mut session = agent.client().exec(spec).await.unwrap();
    let mut seen = String::new();
    while !seen.contains("30 100") {
        let chunk = session.output.next().await.unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk.data));
    }
    session
        .control
        .resize(TtySize {
            cols: 132,
            rows: 50,
        })
        .await
        .unwrap();
    session
        .control
        .write_stdin(Bytes::from_static(b"go\n"))
        .await
        .unwrap();
    let (out, _, code) = collect(session).await;
    assert!(out.contains("50 132"), "{out:?}");
    assert_eq!(code, 0);
    // A command without a terminal cannot be resized.
    let plain = agent.client().exec(spec_sleep()).await.unwrap();
    let refused = plain.control.resize(TtySize { cols: 1, rows: 1 }).await;
    assert!(matches!(refused, Err(ProviderError::InvalidRequest { .. })));
    plain.control.kill().await.unwrap();
}

fn spec_sleep() -> ExecSpec {
    spec(&["sh", "-c", "sleep 30 & wait"])
}

#[tokio::test]
async fn signals_reach_the_whole_group() {
    let agent = Agent::start().await;
    let session = agent.client().exec(spec_sleep()).await.unwrap();
    session.control.signal(Signal::Term).await.unwrap();
    let (_, _, code) = tokio::time::timeout(Duration::from_secs(10), collect(session))
        .await
        .expect("the command ended on SIGTERM");
    assert_eq!(code, 128 + 15);
    let session = agent.client().exec(spec_sleep()).await.unwrap();
    session.control.kill().await.unwrap();
    let (_, _, code) = tokio::time::timeout(Duration::from_secs(10), collect(session))
        .await
        .expect("the command ended on kill");
    assert_eq!(code, 128 + 9);
}

/// Whether a process with this ID is alive (and not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

#[tokio::test]
async fn closing_the_connection_kills_the_command() {
    let agent = Agent::start().await;
    let pid_file = agent.dir.path().join("pid");
    let script = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
    let session = agent
        .client()
        .exec(spec(&["sh", "-c", &script]))
        .await
        .unwrap();
    let mut pid = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&pid_file) {
            if let Ok(value) = text.trim().parse::<u32>() {
                pid = Some(value);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = pid.expect("the command started its child");
    assert!(alive(pid));
    // The host goes away without a word.
    drop(session);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the command's child {pid} outlived the connection");
}

#[tokio::test]
async fn a_missing_program_or_directory_is_named() {
    let agent = Agent::start().await;
    let Err(err) = agent.client().exec(spec(&["/no/such/program"])).await else {
        panic!("ran a missing program");
    };
    assert!(
        matches!(&err, ProviderError::InvalidRequest { message } if message.contains("/no/such/program")),
        "{err:?}"
    );
    let mut spec = spec(&["true"]);
    spec.workdir = Some(SandboxPath::parse("/no/such/dir").unwrap());
    let Err(err) = agent.client().exec(spec).await else {
        panic!("ran in a missing directory");
    };
    assert!(err.to_string().contains("/no/such/dir"), "{err}");
}

fn content(chunks: Vec<Bytes>) -> svc_provider::ByteStream {
    Box::pin(futures::stream::iter(chunks.into_iter().map(Ok)))
}

async fn read_all(client: &AgentClient, path: &SandboxPath) -> Vec<u8> {
    let mut stream = client.read_file(path).await.unwrap();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    bytes
}

#[tokio::test]
async fn files_stream_both_ways_and_every_operation_answers() {
    let agent = Agent::start().await;
    let client = agent.client();
    // 5 MiB in uneven chunks, into a directory that does not exist yet.
    let pattern: Vec<u8> = (0..5 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let chunks = pattern
        .chunks(700 * 1024)
        .map(Bytes::copy_from_slice)
        .collect();
    let big = agent.non_root("deep/er/big.bin");
    client
        .write_file(&big, 0o640, content(chunks))
        .await
        .unwrap();
    assert_eq!(read_all(&client, &big).await, pattern);
    let info = client.stat(&big).await.unwrap();
    assert_eq!(
        (info.name.as_str(), info.size, info.mode, info.is_dir),
        ("big.bin", pattern.len() as u64, 0o640, false)
    );
    // Listing, sorted by name, directories marked.
    let small = agent.non_root("deep/a.txt");
    client
        .write_file(&small, 0o644, content(vec![Bytes::from_static(b"hi")]))
        .await
        .unwrap();
    let listed = client.list_dir(&agent.path("deep")).await.unwrap();
    let names: Vec<_> = listed.iter().map(|f| (f.name.as_str(), f.is_dir)).collect();
    assert_eq!(names, [("a.txt", false), ("er", true)]);
    // Glob, move, chmod.
    let pattern_text = format!("{}/deep/**/*.bin", agent.dir.path().display());
    let found = client
        .glob(&SandboxGlob::new(&pattern_text).unwrap())
        .await
        .unwrap();
    assert_eq!(found, [big.to_string()]);
    let moved = agent.non_root("moved/a.txt");
    client.move_path(&small, &moved).await.unwrap();
    client.chmod(&moved, 0o600).await.unwrap();
    assert_eq!(client.stat(&moved).await.unwrap().mode, 0o600);
    assert!(matches!(
        client.stat(&small).await,
        Err(ProviderError::FileNotFound { .. })
    ));
    // A non-empty directory goes only when asked to.
    let deep = agent.non_root("deep");
    let refused = client.delete_file(&deep, false).await.unwrap_err();
    assert!(refused.to_string().contains("not empty"), "{refused}");
    client.delete_file(&deep, true).await.unwrap();
    assert!(!agent.dir.path().join("deep").exists());
}

#[tokio::test]
async fn file_errors_are_typed_and_a_broken_upload_leaves_nothing() {
    let agent = Agent::start().await;
    let client = agent.client();
    let missing = agent.path("missing.txt");
    let Err(err) = client.read_file(&missing).await else {
        panic!("read a missing file");
    };
    assert!(
        matches!(&err, ProviderError::FileNotFound { path } if *path == missing.to_string()),
        "{err:?}"
    );
    let Err(err) = client.read_file(&agent.path("")).await else {
        panic!("read a directory");
    };
    assert!(err.to_string().contains("is a directory"), "{err}");
    // An upload whose source fails midway: the target keeps its old content, and no
    // temporary file is left beside it.
    let target = agent.non_root("kept.txt");
    client
        .write_file(&target, 0o644, content(vec![Bytes::from_static(b"old")]))
        .await
        .unwrap();
    let failing: svc_provider::ByteStream = Box::pin(futures::stream::iter(vec![
        Ok(Bytes::from_static(b"new and partial")),
        Err(ProviderError::failed("the client went away")),
    ]));
    assert!(client.write_file(&target, 0o644, failing).await.is_err());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(read_all(&client, &target).await, b"old");
    let leftovers: Vec<_> = std::fs::read_dir(agent.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("svc-upload"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A raw connection, for what the client would never send.
async fn raw(socket: &Path) -> Framed<tokio::net::UnixStream, FrameCodec> {
    Framed::new(
        tokio::net::UnixStream::connect(socket).await.unwrap(),
        FrameCodec,
    )
}

#[tokio::test]
async fn another_version_or_a_malformed_frame_is_refused_and_the_agent_serves_on() {
    let agent = Agent::start().await;
    let mut connection = raw(&agent.socket).await;
    let future = Request {
        version: 99,
        op: Op::Hello,
    };
    connection
        .send(Frame::json(&future).unwrap())
        .await
        .unwrap();
    let reply: Reply = connection.next().await.unwrap().unwrap().parse().unwrap();
    assert!(
        matches!(&reply, Reply::Error { kind: svc_agent_proto::ErrorKind::UnsupportedVersion, message } if message.contains("99")),
        "{reply:?}"
    );
    // A frame claiming more than the limit: the connection is dropped, nothing buffered.
    let mut stream = tokio::net::UnixStream::connect(&agent.socket)
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, &[0xff, 0xff, 0xff, 0xff, 1])
        .await
        .unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut rest),
    )
    .await
    .expect("the agent closed the connection");
    assert!(read.is_ok_and(|n| n == 0) || rest.is_empty());
    // An operation this agent does not know.
    let mut connection = raw(&agent.socket).await;
    let unknown = Frame {
        kind: svc_agent_proto::FrameKind::Json,
        payload: Bytes::from_static(br#"{"version":1,"op":"teleport"}"#),
    };
    connection.send(unknown).await.unwrap();
    let reply: Reply = connection.next().await.unwrap().unwrap().parse().unwrap();
    assert!(
        matches!(
            &reply,
            Reply::Error {
                kind: svc_agent_proto::ErrorKind::Invalid,
                ..
            }
        ),
        "{reply:?}"
    );
    // And it still serves.
    agent.client().hello().await.unwrap();
}

/// The microVM assets `scripts/microvm-assets.sh` prepares, or `None` after saying so (they
/// are required in CI, where `scripts/test.sh` prepares them).
fn microvm_assets() -> Option<svc_provider::microvm::Assets> {
    match svc_provider::microvm::Assets::find() {
        Ok(assets) => Some(assets),
        Err(missing) => {
            assert!(
                std::env::var_os("SVC_TEST_REQUIRE_MICROVM").is_none()
                    && std::env::var_os("CI").is_none(),
                "{missing}"
            );
            eprintln!("SKIPPED: {missing}; the microVM test did not run");
            None
        }
    }
}

/// A root filesystem of busybox alone (static, from the host).
fn busybox_root(root: &Path) {
    for dir in ["bin", "root", "tmp", "etc", "proc", "sys", "dev", "run"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    for tool in ["sh", "uname", "hostname", "cat", "sleep", "echo", "ls"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(tool)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_serves_from_inside_a_qemu_microvm() {
    use svc_provider::microvm::{initramfs, qemu, rootfs, vm};
    let Some(assets) = microvm_assets() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let initrd = work.path().join("initrd.cpio");
    let image = initramfs::build(&assets.agent(), &assets.modules()).unwrap();
    std::fs::write(&initrd, image).unwrap();
    let root = work.path().join("root");
    busybox_root(&root);
    let disk = work.path().join("root.ext4");
    let size = rootfs::build_ext4(&root, &disk).await.unwrap();
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), size);
    let vmm = qemu::QemuVmm {
        qemu: PathBuf::from("qemu-system-x86_64"),
        vsock_backend: assets.vsock_backend(),
        accel: "tcg",
    };
    let files = vm::BootFiles {
        kernel: assets.kernel(),
        initramfs: initrd,
    };
    let vm_dir = work.path().join("vm");
    let (failures, mut failed) = tokio::sync::mpsc::unbounded_channel();
    let watch = vm::Watch {
        sandbox_id: svc_core::SandboxId::generate(),
        failures,
        vmm: "qemu",
    };
    let vm_spec = vm::VmSpec {
        dir: vm_dir.clone(),
        root_disk: Some(disk),
        memory_mb: 256,
        vcpus: 1,
        boot_timeout: Duration::from_secs(60),
        hostname: "svc-test".into(),
    };
    let vm = vm::boot(&vmm, &files, &vm_spec, watch)
        .await
        .expect("the microVM booted and its agent answered");
    eprintln!("microVM boot to agent ready: {:?}", vm.boot_time);
    let agent =
        svc_provider::agent::AgentClient::new(Arc::new(svc_provider::agent::VsockConnector::new(
            vm_dir.join(vm::VSOCK_SOCKET),
            svc_agent_proto::AGENT_PORT,
        )));
    // Its own kernel, its own host name, the host's clock.
    let (out, _, code) = collect(
        agent
            .exec(spec(&["sh", "-c", "uname -r; hostname; echo $GREETING"]))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 0);
    let lines: Vec<_> = out.lines().collect();
    assert!(lines[0].ends_with("cloud-amd64"), "{out}");
    assert_eq!(&lines[1..], ["svc-test", "hello"]);
    // Files inside the guest, streamed both ways.
    let file = NonRootPath::new(SandboxPath::parse("/root/data/hello.txt").unwrap()).unwrap();
    let payload: Vec<u8> = (0..300_000).map(|i| (i % 251) as u8).collect();
    agent
        .write_file(&file, 0o600, content(vec![Bytes::from(payload.clone())]))
        .await
        .unwrap();
    assert_eq!(read_all(&agent, &file).await, payload);
    assert_eq!(agent.stat(&file).await.unwrap().mode, 0o600);
    // A signal ends a command inside.
    let session = agent.exec(spec_sleep()).await.unwrap();
    session.control.kill().await.unwrap();
    let (_, _, code) = tokio::time::timeout(Duration::from_secs(20), collect(session))
        .await
        .expect("the command ended on kill");
    assert_eq!(code, 128 + 9);
    // Shutdown leaves nothing behind.
    let pids = vm.pids().to_vec();
    vm.shutdown().await;
    assert!(!vm_dir.exists());
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived its VM");
    }
    // Stopping it was asked for: no failure is reported.
    assert!(failed.try_recv().is_err());
}

#[tokio::test]
async fn connect_splices_a_tcp_port_of_the_guest() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let agent = Agent::start().await;
    // A server that speaks first (its greeting may arrive with the agent's answer), then echoes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                stream.write_all(b"greeting\n").await.unwrap();
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    let mut stream = agent.client().connect_port(port).await.unwrap();
    let mut greeting = [0u8; 9];
    stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"greeting\n");
    let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let (mut read, mut write) = tokio::io::split(stream);
    let sent = payload.clone();
    let writer = tokio::spawn(async move {
        write.write_all(&sent).await.unwrap();
        write.shutdown().await.unwrap();
    });
    let mut echoed = Vec::new();
    read.read_to_end(&mut echoed).await.unwrap();
    writer.await.unwrap();
    assert!(echoed == payload, "{} bytes came back", echoed.len());

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let unused = closed.local_addr().unwrap().port();
    drop(closed);
    let Err(err) = agent.client().connect_port(unused).await else {
        panic!("a port with nothing listening connected");
    };
    assert!(
        matches!(err, ProviderError::Unreachable { ref message } if message.contains(&unused.to_string())),
        "{err:?}"
    );
}

#[tokio::test]
async fn in_a_container_commands_get_its_environment_and_directory_and_are_logged() {
    let workdir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start_container(workdir.path()).await;
    let client = agent.client();
    let (out, _, code) = collect(
        client
            .exec(spec(&[
                "sh",
                "-c",
                "echo $IMAGE_VAR $GREETING $HOME; pwd; exit 3",
            ]))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 3);
    assert_eq!(
        out,
        format!(
            "from-the-image hello /home/image-user\n{}\n",
            workdir.path().display()
        )
    );
    // The request's environment wins over the container's.
    let mut replaced = spec(&["sh", "-c", "echo $IMAGE_VAR"]);
    replaced
        .env
        .insert("IMAGE_VAR".into(), "from-the-request".into());
    let (out, _, _) = collect(client.exec(replaced).await.unwrap()).await;
    assert_eq!(out, "from-the-request\n");
    let lines = client.logs(10).await.unwrap();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(
        lines[0],
        "exec 1: sh -c echo $IMAGE_VAR $GREETING $HOME; pwd; exit 3"
    );
    assert!(lines[1].starts_with("exec 1: exit 3 after "), "{lines:?}");
    assert_eq!(client.logs(1).await.unwrap(), lines[3..].to_vec());
    // The same lines are the process's stdout: the container log.
    let _ = agent.child.kill();
    let mut stdout = String::new();
    std::io::Read::read_to_string(agent.child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert_eq!(stdout.lines().collect::<Vec<_>>(), lines);
}

#[tokio::test]
async fn a_detached_command_outlives_its_connection_and_is_found_by_handle() {
    let agent = Agent::start().await;
    let client = agent.client().detached();
    let marker = agent.dir.path().join("marker");
    // It runs until the test lets it end, so "running" is checked while it surely runs.
    let go = agent.dir.path().join("go");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo done > {}; exit 7",
        go.display(),
        marker.display()
    );
    let session = client.exec(spec(&["sh", "-c", &script])).await.unwrap();
    let handle = session
        .control
        .handle()
        .expect("a detached command has a handle");
    // svc goes away without a word; the command runs on.
    drop(session);
    let (state, control) = client.exec_state(&handle).await.unwrap();
    assert_eq!(state, svc_provider::ExecState::Running);
    assert!(control.is_some());
    std::fs::write(&go, b"").unwrap();
    let mut ended = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if let (svc_provider::ExecState::Exited(code), None) =
            client.exec_state(&handle).await.unwrap()
        {
            ended = Some(code);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ended, Some(Some(7)));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "done\n");

    // Found again, it can still be killed, with its whole group.
    let session = client.exec(spec_sleep()).await.unwrap();
    let handle = session.control.handle().unwrap();
    drop(session);
    let (_, control) = client.exec_state(&handle).await.unwrap();
    control.unwrap().kill().await.unwrap();
    let mut ended = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if let (svc_provider::ExecState::Exited(code), _) =
            client.exec_state(&handle).await.unwrap()
        {
            ended = Some(code);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ended, Some(Some(128 + 9)));
    // An attached session still gets its output and exit, and has a handle too.
    let session = client.exec(spec(&["echo", "hi"])).await.unwrap();
    assert!(session.control.handle().is_some());
    assert_eq!(collect(session).await, ("hi\n".into(), String::new(), 0));
    let (state, _) = client.exec_state("nobody-1").await.unwrap();
    assert_eq!(state, svc_provider::ExecState::Gone);
    // Without detach there is no handle.
    let session = agent.client().exec(spec(&["true"])).await.unwrap();
    assert_eq!(session.control.handle(), None);
}

#[tokio::test]
async fn directories_travel_as_tar_archives_both_ways() {
    let agent = Agent::start().await;
    let client = agent.client();
    let binary: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 251) as u8).collect();
    client
        .write_file(
            &agent.non_root("src/sub/big.bin"),
            0o640,
            content(vec![Bytes::from(binary.clone())]),
        )
        .await
        .unwrap();
    client
        .write_file(
            &agent.non_root("src/a.txt"),
            0o755,
            content(vec![Bytes::from("alpha")]),
        )
        .await
        .unwrap();
    std::os::unix::fs::symlink("a.txt", agent.dir.path().join("src/link")).unwrap();
    let archive = read_all_archive(&client, &agent.path("src")).await;
    let mut names: Vec<String> = tar::Archive::new(archive.as_slice())
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["./", "a.txt", "link", "sub", "sub/big.bin"]);
    let upload: svc_provider::ByteStream = Box::pin(futures::stream::iter(
        archive
            .chunks(10_000)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    ));
    client
        .write_archive(&agent.path("copy"), upload)
        .await
        .unwrap();
    let copy = agent.dir.path().join("copy");
    assert_eq!(std::fs::read(copy.join("sub/big.bin")).unwrap(), binary);
    assert_eq!(
        std::fs::read_link(copy.join("link")).unwrap(),
        Path::new("a.txt")
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(copy.join("a.txt")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o755);
    // A file is not a directory; an entry leaving the directory is refused.
    let err = client
        .read_archive(&agent.path("src/a.txt"))
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, ProviderError::InvalidRequest { .. }),
        "{err:?}"
    );
    // The builder refuses `..` itself: the name goes into the header by hand.
    let mut evil = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_old();
    header.as_old_mut().name[..10].copy_from_slice(b"../escaped");
    header.set_size(4);
    header.set_mode(0o644);
    header.set_cksum();
    evil.append(&header, &b"evil"[..]).unwrap();
    let evil = evil.into_inner().unwrap();
    let upload: svc_provider::ByteStream =
        Box::pin(futures::stream::iter(vec![Ok(Bytes::from(evil))]));
    let _ = client.write_archive(&agent.path("copy2"), upload).await;
    assert!(
        !agent.dir.path().join("escaped").exists(),
        "nothing lands outside"
    );
}

async fn read_all_archive(client: &AgentClient, dir: &SandboxPath) -> Vec<u8> {
    let mut stream = client.read_archive(dir).await.unwrap();
    let mut all = Vec::new();
    while let Some(chunk) = stream.next().await {
        all.extend_from_slice(&chunk.unwrap());
    }
    all
}
