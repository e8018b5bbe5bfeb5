//! The command-line client's interactive exec and `svc cp` (decisions §19), run as the real
//! binary against a test server; shared by the mock tests here and the docker tests.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::pty::{self, OpenptFlags};
use rustix::termios::{self, Winsize};
use serde_json::json;

use crate::cli::svc;
use crate::harness::TestServer;

/// `svc` pointed at `server`.
fn client(server: &TestServer) -> Command {
    let mut command = svc();
    command.env("SVC_URL", &server.base);
    command
}

/// A pseudo-terminal pair: the master side the test types into and reads from, and the path
/// of the slave side the client runs on.
struct Pty {
    master: std::fs::File,
    slave: std::fs::File,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn open(cols: u16, rows: u16) -> Pty {
        let master = pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        pty::grantpt(&master).unwrap();
        pty::unlockpt(&master).unwrap();
        let name = pty::ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap();
        let master = std::fs::File::from(master);
        let pty = Pty {
            master,
            slave,
            screen: Arc::default(),
        };
        pty.resize(cols, rows);
        let mut reader = pty.master.try_clone().unwrap();
        let screen = Arc::clone(&pty.screen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read @ 1..) = reader.read(&mut buffer) {
                screen.lock().unwrap().extend_from_slice(&buffer[..read]);
            }
        });
        pty
    }

    /// Resizes the terminal; the kernel sends SIGWINCH to its foreground process group.
    fn resize(&self, cols: u16, rows: u16) {
        let size = Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        termios::tcsetwinsize(&self.master, size).unwrap();
    }

    fn stdio(&self) -> Stdio {
        Stdio::from(self.slave.try_clone().unwrap())
    }

    fn type_keys(&self, keys: &str) {
        (&self.master).write_all(keys.as_bytes()).unwrap();
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Types `keys` (again every second) until the screen shows `text` after what it showed
    /// before.
    fn type_until(&self, keys: &str, text: &str) {
        let before = self.screen().len();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut next_try = Instant::now();
        loop {
            if Instant::now() >= next_try {
                self.type_keys(keys);
                next_try = Instant::now() + Duration::from_secs(1);
            }
            if self.screen()[before..].contains(text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the terminal never showed {text:?}; it shows:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types `keys` once and waits until the screen shows `text` after what it showed before.
    fn type_then_wait_for(&self, keys: &str, text: &str) {
        let before = self.screen().len();
        self.type_keys(keys);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.screen()[before..].contains(text) {
            assert!(
                Instant::now() < deadline,
                "the terminal never showed {text:?}; it shows:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `svc exec -i` sends stdin and its end; `svc exec -it` runs in the local terminal in raw mode
/// (Ctrl-C reaches the remote command, not the client), starts at the terminal's size, follows
/// SIGWINCH, and exits with the command's exit code.
pub(crate) async fn assert_interactive_exec(server: &TestServer, id: &str) {
    let base = server.base.clone();
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut piped = svc()
            .env("SVC_URL", &base)
            .args(["exec", "-i", &id, "--", "cat; echo done; exit 3"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        piped
            .stdin
            .take()
            .unwrap()
            .write_all("one\nzwei é\n".as_bytes())
            .unwrap();
        let out = piped.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "one\nzwei é\ndone\n"
        );

        let pty = Pty::open(100, 30);
        // `setsid -c` makes the pseudo-terminal the client's controlling terminal, as a login
        // shell's is, so that resizing it signals the client.
        let mut child = Command::new("setsid")
            .arg("-c")
            .arg(env!("CARGO_BIN_EXE_svc"))
            .args(["exec", "-it", &id, "--", "sh"])
            .env("SVC_URL", &base)
            .stdin(pty.stdio())
            .stdout(pty.stdio())
            .stderr(pty.stdio())
            .spawn()
            .unwrap();
        pty.type_until("stty size\r", "30 100");
        pty.resize(120, 40);
        pty.type_until("stty size\r", "40 120");
        // Raw mode: Ctrl-C travels to the remote terminal and interrupts `sleep` there. The
        // shell has run the line up to `sleep 300` once it shows zz-2 (the typed line shows
        // only `$((1+1))`), but it may not have made `sleep` its foreground job yet: a Ctrl-C
        // that lands between fork and exec is lost, so each try sends Ctrl-C again before the
        // next line. Only an interrupted `sleep` lets the shell answer within the deadline.
        pty.type_then_wait_for("echo zz-$((1+1)); sleep 300\r", "zz-2");
        pty.type_until("\u{3}echo still-$((40+2))\r", "still-42");
        assert!(
            child.try_wait().unwrap().is_none(),
            "Ctrl-C ended the client"
        );
        pty.type_keys("exit 5\r");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the client did not end");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(5), "{}", pty.screen());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_exec_on_mock() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({})).await;
    assert_interactive_exec(&server, sandbox["id"].as_str().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_exec_refused_prints_the_servers_code() {
    let server = TestServer::start().await;
    let out = client(&server)
        .args(["exec", "-it", "sb-0000000000000000", "--", "sh"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("not_found") && stderr.contains("sb-0000000000000000"),
        "{stderr}"
    );
}

/// Everything under `dir`, a line each: relative path, then `dir MODE`, `link TARGET` or
/// `file MODE SHA256`.
fn tree(dir: &std::path::Path) -> Vec<String> {
    use sha2::Digest;
    use std::os::unix::fs::PermissionsExt;
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            if meta.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.push(format!("{name} link {}", target.display()));
            } else if meta.is_dir() {
                out.push(format!("{name} dir {mode:o}"));
                walk(root, &path, out);
            } else {
                let digest = sha2::Sha256::digest(std::fs::read(&path).unwrap());
                out.push(format!("{name} file {mode:o} {digest:x}"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// A tree with nested and empty directories, an executable, a symlink, a name with a space and
/// 3 MB of random bytes.
fn sample_tree(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    std::fs::write(dir.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("sub/with space.txt"), "spaced").unwrap();
    std::fs::write(dir.join("sub/deeper/zero"), "").unwrap();
    let mut big = vec![0u8; 3_000_000];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for byte in &mut big {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *byte = state as u8;
    }
    std::fs::write(dir.join("sub/big.bin"), &big).unwrap();
    std::os::unix::fs::symlink("../a.txt", dir.join("sub/to-a")).unwrap();
}

/// `svc cp` (decisions §19) in both directions under `base` in sandbox `id`: a directory tree
/// round-trips byte for byte (modes and symlinks too); a DST that is an existing directory
/// receives SRC inside it, otherwise DST becomes the copy; single files go both ways; refusals
/// name what was wrong.
pub(crate) async fn assert_cp(server: &TestServer, id: &str, base: &str) {
    let base_url = server.base.clone();
    let (id, base) = (id.to_owned(), base.to_owned());
    tokio::task::spawn_blocking(move || {
        let cp = |src: &str, dst: &str| {
            let out = svc()
                .env("SVC_URL", &base_url)
                .args(["cp", src, dst])
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let local = tempfile::tempdir().unwrap();
        let src = local.path().join("tree");
        sample_tree(&src);
        let remote = format!("{id}:{base}/tree");

        assert_eq!(cp(src.to_str().unwrap(), &remote), (Some(0), String::new()));
        let back = local.path().join("back");
        assert_eq!(
            cp(&remote, back.to_str().unwrap()),
            (Some(0), String::new())
        );
        assert_eq!(tree(&back), tree(&src), "the tree came back different");

        // Into existing directories: the copy lands inside, under SRC's name.
        assert_eq!(cp(src.to_str().unwrap(), &remote).0, Some(0));
        let again = local.path().join("again");
        assert_eq!(
            cp(&format!("{remote}/tree"), again.to_str().unwrap()).0,
            Some(0)
        );
        assert_eq!(tree(&again), tree(&src));
        let into = local.path().join("into");
        std::fs::create_dir(&into).unwrap();
        assert_eq!(
            cp(&format!("{remote}/sub"), into.to_str().unwrap()).0,
            Some(0)
        );
        assert_eq!(tree(&into.join("sub")), tree(&src.join("sub")));
        assert_eq!(std::fs::read_dir(&into).unwrap().count(), 1);

        // Single files, into a directory and onto a new name, with their mode.
        let script = src.join("run.sh");
        assert_eq!(
            cp(script.to_str().unwrap(), &format!("{id}:{base}/")).0,
            Some(0)
        );
        let fetched = local.path().join("fetched.sh");
        assert_eq!(
            cp(&format!("{id}:{base}/run.sh"), fetched.to_str().unwrap()).0,
            Some(0)
        );
        let fetched_line = tree(local.path())
            .into_iter()
            .find(|line| line.starts_with("fetched.sh "))
            .unwrap();
        assert!(
            tree(&src).contains(&fetched_line.replacen("fetched.sh", "run.sh", 1)),
            "{fetched_line}"
        );
        let big = src.join("sub/big.bin");
        assert_eq!(
            cp(big.to_str().unwrap(), &format!("{id}:{base}/big.bin")).0,
            Some(0)
        );
        assert_eq!(
            cp(
                &format!("{id}:{base}/big.bin"),
                local.path().to_str().unwrap()
            )
            .0,
            Some(0)
        );
        assert_eq!(
            std::fs::read(local.path().join("big.bin")).unwrap(),
            std::fs::read(&big).unwrap()
        );

        let (code, stderr) = cp(big.to_str().unwrap(), &format!("{id}:{base}/missing/"));
        assert_eq!(code, Some(1));
        assert!(stderr.contains("does not exist"), "{stderr}");
        let (code, stderr) = cp(&format!("{id}:{base}/nothing-here"), "x");
        assert_eq!(code, Some(1));
        assert!(stderr.contains("nothing-here"), "{stderr}");
        let (code, stderr) = cp("sb-0000000000000000:/a", local.path().to_str().unwrap());
        assert_eq!(code, Some(1));
        assert!(stderr.contains("not_found"), "{stderr}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_on_mock() {
    let server = TestServer::start().await;
    let sandbox = server.spawn(json!({})).await;
    assert_cp(&server, sandbox["id"].as_str().unwrap(), "/work").await;
}

/// A scripted client session with `svc mcp` (decisions §19) over its stdio: the handshake, the
/// tool list, and each tool, with bounded command output and refusals as tool errors.
pub(crate) async fn assert_mcp_session(server: &TestServer, create: serde_json::Value) {
    let base = server.base.clone();
    tokio::task::spawn_blocking(move || {
        let mut child = svc()
            .env("SVC_URL", &base)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let (lines, received) = std::sync::mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
                if lines.send(line.unwrap()).is_err() {
                    return;
                }
            }
        });
        let mut next_id = 0;
        let mut request = |method: &str, params: serde_json::Value| -> serde_json::Value {
            next_id += 1;
            let message = json!({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params});
            writeln!(stdin, "{message}").unwrap();
            loop {
                let line = received
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|_| panic!("no answer to {method}"));
                let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
                if answer["id"] == next_id {
                    assert!(answer["error"].is_null(), "{method}: {answer}");
                    return answer["result"].clone();
                }
            }
        };
        let hello = request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "svc-test", "version": "1"}}),
        );
        assert_eq!(hello["serverInfo"]["name"], "svc");
        assert!(hello["capabilities"]["tools"].is_object(), "{hello}");
        let mut call = |tool: &str, arguments: serde_json::Value| {
            request("tools/call", json!({"name": tool, "arguments": arguments}))
        };
        let ok = |result: serde_json::Value| {
            assert_eq!(result["isError"], false, "{result}");
            result["structuredContent"].clone()
        };

        let sandbox = ok(call("create_sandbox", create));
        let id = sandbox["id"].as_str().unwrap().to_owned();
        assert_eq!(sandbox["state"], "running");
        let listed = ok(call("list_sandboxes", json!({})));
        assert!(
            listed["sandboxes"].as_array().unwrap().iter().any(|s| s["id"] == id.as_str()),
            "{listed}"
        );

        let written = ok(call(
            "write_file",
            json!({"id": id, "path": "/work/mcp/hello.txt", "content": "héllo\n"}),
        ));
        assert_eq!(written["size"], 7);
        let read = ok(call("read_file", json!({"id": id, "path": "/work/mcp/hello.txt"})));
        assert_eq!((read["content"].as_str(), read["truncated"].as_bool()), (Some("héllo\n"), Some(false)));
        let head = ok(call(
            "read_file",
            json!({"id": id, "path": "/work/mcp/hello.txt", "max_bytes": 1}),
        ));
        assert_eq!((head["content"].as_str(), head["size"].as_u64(), head["truncated"].as_bool()), (Some("h"), Some(7), Some(true)));
        let entries = ok(call("list_files", json!({"id": id, "path": "/work/mcp"})));
        assert_eq!(entries["entries"][0]["name"], "hello.txt", "{entries}");

        let ran = ok(call(
            "run_command",
            json!({"id": id, "command": "cat hello.txt; echo oops >&2; exit 3", "workdir": "/work/mcp"}),
        ));
        assert_eq!(
            (ran["exit_code"].as_i64(), ran["stdout"].as_str(), ran["stderr"].as_str()),
            (Some(3), Some("héllo\n"), Some("oops\n"))
        );
        assert_eq!(ran["truncated"], false);
        let long = ok(call(
            "run_command",
            json!({"id": id, "command": "i=0; while [ $i -lt 5000 ]; do echo line-$i; i=$((i+1)); done",
                   "max_output_bytes": 100}),
        ));
        let stdout = long["stdout"].as_str().unwrap();
        assert_eq!(long["truncated"], true);
        assert!(stdout.starts_with("line-0\n") && stdout.ends_with("line-4999\n"), "{stdout}");
        assert!(stdout.contains("bytes cut") && stdout.len() < 200, "{stdout}");

        let refused = call("run_command", json!({"id": "sb-0000000000000000", "command": "true"}));
        assert_eq!(refused["isError"], true, "{refused}");
        assert!(refused["content"][0]["text"].as_str().unwrap().contains("not_found"), "{refused}");

        ok(call("destroy_sandbox", json!({"id": id})));
        let listed = ok(call("list_sandboxes", json!({})));
        assert!(
            !listed["sandboxes"].as_array().unwrap().iter().any(|s| s["id"] == id.as_str()),
            "{listed}"
        );
        let tools = request("tools/list", json!({}));
        let mut names: Vec<&str> = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["create_sandbox", "destroy_sandbox", "list_files", "list_sandboxes", "read_file", "run_command", "write_file"]
        );
        drop(stdin);
        assert!(child.wait().unwrap().success(), "svc mcp did not end cleanly at end of input");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_session_on_mock() {
    let server = TestServer::start().await;
    assert_mcp_session(&server, json!({})).await;
}
