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
        // Raw mode: Ctrl-C travels to the remote terminal and interrupts `sleep` there.
        pty.type_keys("sleep 30\r");
        std::thread::sleep(Duration::from_millis(500));
        pty.type_keys("\u{3}");
        pty.type_until("echo still-$((40+2))\r", "still-42");
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
