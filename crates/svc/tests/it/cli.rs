//! The `svc` binary's commands, run as a user would.

use std::process::Command;

fn svc() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_svc"));
    // The developer's own SVC_ variables must not leak into these runs.
    for (key, _) in std::env::vars() {
        if key.starts_with("SVC_") {
            command.env_remove(key);
        }
    }
    command
}

#[test]
fn openapi_prints_json_and_yaml() {
    let json = svc().arg("openapi").output().unwrap();
    assert!(json.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(doc["paths"]["/api/v1/sandboxes"]["post"].is_object());
    let yaml = svc()
        .args(["openapi", "--format", "yaml"])
        .output()
        .unwrap();
    assert!(yaml.status.success());
    let doc: serde_json::Value = serde_norway::from_slice(&yaml.stdout).unwrap();
    assert!(doc["paths"]["/api/v1/templates/{name}/spawn"]["post"].is_object());
}

#[test]
fn config_lint_reports_keys_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "server:\n  port: 8080\ndefaults:\n  ttl: 5m\n").unwrap();
    let out = svc()
        .args(["config", "lint", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let typo = dir.path().join("typo.yaml");
    std::fs::write(&typo, "server:\n  prot: 8080\n").unwrap();
    let out = svc()
        .args(["config", "lint", "--config"])
        .arg(&typo)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("error:") && stdout.contains("server.prot"),
        "{stdout}"
    );

    let out = svc()
        .args(["config", "lint", "--production", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("server.cors_allowed_origins"), "{stdout}");

    let out = svc()
        .args(["config", "lint", "--config"])
        .arg(&good)
        .env("SVC_SERVER__PORT", "not-a-number")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("SVC_SERVER__PORT"));

    let out = svc()
        .args(["config", "lint", "--config"])
        .arg(&good)
        .env("SVC_NOT__A_KEY", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("warning:"));
}

#[test]
fn serve_refuses_an_invalid_configuration_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "defaults:\n  spawn_overflow: sometimes\n").unwrap();
    let out = svc()
        .args(["serve", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("defaults.spawn_overflow"), "{stderr}");
}

#[test]
fn serve_refuses_auth_without_a_key_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = svc()
        .arg("serve")
        .current_dir(dir.path())
        .env("SVC_AUTH__ENABLED", "true")
        .env("SVC_PROVIDERS__DOCKER__ENABLED", "false")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("auth.api_key"), "{stderr}");
}

#[test]
fn serve_with_api_keys_never_logs_them() {
    const KEY: &str = "cli-secret-api-key-0123456789abcdef";
    const WRONG: &str = "cli-wrong-key-fedcba9876543210";
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = serve_in(dir.path(), port)
        .env("SVC_AUTH__ENABLED", "true")
        .env("SVC_AUTH__API_KEY", KEY)
        .env("SVC_LOGGING__LEVEL", "debug")
        .spawn()
        .unwrap();
    wait_until_serving(port);
    let unauthorized = raw_request(port, "GET /api/v1/sandboxes", &[("X-API-Key", WRONG)]);
    assert!(unauthorized.starts_with("HTTP/1.1 401"), "{unauthorized}");
    assert!(!unauthorized.contains(WRONG));
    let ok = raw_request(port, "GET /api/v1/sandboxes", &[("X-API-Key", KEY)]);
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let admin = raw_request(
        port,
        "GET /api/v1/admin/providers",
        &[("X-Admin-API-Key", WRONG)],
    );
    assert!(admin.starts_with("HTTP/1.1 401"), "{admin}");
    let output = stop(child);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("API keys required"), "{stderr}");
    assert!(
        stderr.contains("status=401"),
        "the refused request is logged: {stderr}"
    );
    assert!(!stderr.contains(KEY), "the API key reached the log");
    assert!(!stderr.contains(WRONG), "a presented key reached the log");
}

/// One HTTP/1.1 request over a plain blocking socket; the whole response as text.
fn raw_request(port: u16, request_line: &str, headers: &[(&str, &str)]) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut request =
        format!("{request_line} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

#[test]
fn serve_runs_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = serve_in(dir.path(), port).spawn().unwrap();
    wait_until_serving(port);
    assert!(
        dir.path().join("svc.db").exists(),
        "the default store is ./svc.db"
    );
    let output = stop(child);
    assert!(output.status.success(), "exit: {:?}", output.status);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("listening on http://127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(stderr.contains("svc stopped"), "{stderr}");
}

/// `svc serve` in `dir` on `port`, with the mock provider only and stderr captured.
fn serve_in(dir: &std::path::Path, port: u16) -> Command {
    let mut command = svc();
    command
        .arg("serve")
        .current_dir(dir)
        .env("SVC_SERVER__PORT", port.to_string())
        .env("SVC_PROVIDERS__MOCK__ROOT_DIR", dir.join("mock"))
        .env("SVC_PROVIDERS__DOCKER__ENABLED", "false")
        .stderr(std::process::Stdio::piped());
    command
}

/// Sends SIGTERM and collects how the server ended.
fn stop(child: std::process::Child) -> std::process::Output {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait_with_output().unwrap()
}

/// Waits for `svc serve` on `port`. The socket accepts connections as soon as it is bound,
/// before the store is open; a health answer means the server is up.
fn wait_until_serving(port: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !health_answers(port) {
        assert!(
            std::time::Instant::now() < deadline,
            "svc serve did not start answering"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A free port on loopback.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Whether `GET /api/v1/health` on `port` answers 200, over a plain blocking socket.
fn health_answers(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    let request = "GET /api/v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 200")
}
