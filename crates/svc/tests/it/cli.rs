//! The `svc` binary's commands, run as a user would.

use std::process::Command;

pub(crate) fn svc() -> Command {
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

/// `svc config lint` over good and bad configurations: each finding an `error:` or `warning:`
/// line naming its key, exit 1 on any error (decisions §16).
#[test]
fn config_lint_reports_keys_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let production = format!(
        "server:\n  cors_allowed_origins: [\"https://app.example.com\"]\nauth:\n  enabled: true\n  api_key: {}\n  admin_api_key: {}\nproviders:\n  mock:\n    enabled: false\n",
        "a".repeat(32),
        "b".repeat(40)
    );
    // (what, svc.yaml, --production, environment, exit code, keys named by `error:` lines,
    // texts of `warning:` lines)
    type Case<'a> = (
        &'a str,
        String,
        bool,
        Option<(&'a str, &'a str)>,
        i32,
        Vec<&'a str>,
        Vec<&'a str>,
    );
    let cases: Vec<Case> = vec![
        ("a valid file", "server:\n  port: 8080\ndefaults:\n  ttl: 5m\n".into(), false, None, 0, vec![], vec![]),
        ("a key that does not exist", "server:\n  prot: 8080\n".into(), false, None, 1, vec!["server.prot"], vec![]),
        ("a value out of its set", "defaults:\n  spawn_overflow: sometimes\n".into(), false, None, 1, vec!["defaults.spawn_overflow"], vec![]),
        ("a pool without VMs", "pool:\n  enabled: true\n  max_vms: 0\n".into(), false, None, 1, vec!["pool.max_vms"], vec![]),
        ("a pool that never keeps idle VMs", "pool:\n  enabled: true\n  idle_timeout: 0s\n".into(), false, None, 1, vec!["pool.idle_timeout"], vec![]),
        ("a bad environment value", "server:\n  port: 8080\n".into(), false, Some(("SVC_SERVER__PORT", "not-a-number")), 1, vec!["SVC_SERVER__PORT"], vec![]),
        ("an unknown environment key", "server:\n  port: 8080\n".into(), false, Some(("SVC_NOT__A_KEY", "1")), 0, vec![], vec!["SVC_NOT__A_KEY"]),
        (
            "the defaults in production",
            "server:\n  port: 8080\n".into(),
            true,
            None,
            1,
            vec!["server.cors_allowed_origins", "auth.enabled", "auth.api_key", "auth.admin_api_key", "providers.mock.enabled"],
            vec![],
        ),
        ("a production-ready file", production.clone(), true, None, 0, vec![], vec![]),
        ("the same file is fine outside production", production.replace("enabled: true", "enabled: false"), false, None, 0, vec![], vec![]),
        ("auth off in production", production.replace("enabled: true", "enabled: false"), true, None, 1, vec!["auth.enabled"], vec![]),
        ("a short API key", production.replace(&"a".repeat(32), "short"), true, None, 1, vec!["auth.api_key"], vec![]),
        ("a CORS origin with a path", production.replace("https://app.example.com", "https://app.example.com/"), true, None, 1, vec!["server.cors_allowed_origins"], vec![]),
        ("the mock in production", production.replace("enabled: false", "enabled: true"), true, None, 1, vec!["providers.mock.enabled"], vec![]),
        (
            "OIDC without its keys",
            production.replacen("auth:\n", "auth:\n  oidc_issuer: https://idp.example.com\n", 1),
            true,
            None,
            1,
            vec!["auth.oidc_jwks_url", "auth.oidc_audience", "auth.oidc_admin_groups"],
            vec![],
        ),
        ("SQLite for a named replica", format!("{production}worker:\n  id: replica-1\n"), true, None, 1, vec!["database.driver"], vec![]),
        (
            "PostgreSQL for a named replica",
            format!("{production}worker:\n  id: replica-1\ndatabase:\n  driver: postgres\n  dsn: postgres://svc@db/svc\n"),
            true,
            None,
            0,
            vec![],
            vec![],
        ),
    ];
    for (name, yaml, production, env, code, errors, warnings) in cases {
        let file = dir.path().join("svc.yaml");
        std::fs::write(&file, &yaml).unwrap();
        let mut command = svc();
        command.args(["config", "lint", "--config"]).arg(&file);
        if production {
            command.arg("--production");
        }
        if let Some((key, value)) = env {
            command.env(key, value);
        }
        let out = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(code), "{name}:\n{yaml}\n{stdout}");
        let named: Vec<&str> = stdout
            .lines()
            .filter_map(|line| line.strip_prefix("error: "))
            .collect();
        assert_eq!(named.len(), errors.len(), "{name}: {stdout}");
        for (line, key) in named.iter().zip(&errors) {
            assert!(line.contains(key), "{name}: {key} not named by {line:?}");
        }
        for text in warnings {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with("warning: ") && l.contains(text)),
                "{name}: {stdout}"
            );
        }
        if code == 0 {
            assert!(
                stdout.contains("ok: configuration is valid"),
                "{name}: {stdout}"
            );
        }
    }
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
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
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

/// `svc serve` in `dir` on `port`, with the mock provider only and its log (stderr) kept in a
/// file: a pipe that nobody reads until the end would stop the server once it fills.
pub(crate) fn serve_in(dir: &std::path::Path, port: u16) -> Command {
    let log = std::fs::File::create(dir.join(format!("svc-serve-{port}.log"))).unwrap();
    let mut command = svc();
    command
        .arg("serve")
        .current_dir(dir)
        .env("SVC_SERVER__PORT", port.to_string())
        .env("SVC_PROVIDERS__MOCK__ROOT_DIR", dir.join("mock"))
        // Named, so it stays on when a test turns authentication on (decisions §30).
        .env("SVC_PROVIDERS__MOCK__ENABLED", "true")
        .env("SVC_PROVIDERS__DOCKER__ENABLED", "false")
        .stderr(log);
    command
}

/// Sends SIGTERM and collects how the server ended, its log as its stderr.
pub(crate) fn stop(child: std::process::Child) -> std::process::Output {
    // Where its stderr goes: the log file serve_in made (or a pipe, read as before).
    let log = std::fs::read_link(format!("/proc/{}/fd/2", child.id()))
        .ok()
        .filter(|target| target.is_absolute() && target.is_file());
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut output = child.wait_with_output().unwrap();
    if let Some(log) = log {
        output.stderr = std::fs::read(&log).unwrap();
    }
    output
}

/// Waits for `svc serve` on `port`. The socket accepts connections as soon as it is bound,
/// before the store is open; a health answer means the server is up.
pub(crate) fn wait_until_serving(port: u16) {
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
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Whether `GET /api/v1/health` on `port` answers 200, over a plain blocking socket.
pub(crate) fn health_answers(port: u16) -> bool {
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

/// `svc worker --once` against `url` as `id` with `token`.
fn worker_once(url: &str, id: &str, token: &str) -> Command {
    let mut command = svc();
    command.args([
        "worker",
        "--control-plane",
        url,
        "--id",
        id,
        "--token",
        token,
        "--once",
    ]);
    command
}

const WORKER_ADMIN_KEY: &str = "cli-admin-key-0123456789abcdef0123";

/// `GET /api/v1/workers/{id}` as the admin; the body.
fn worker_record(port: u16, id: &str) -> String {
    raw_request(
        port,
        &format!("GET /api/v1/workers/{id}"),
        &[("X-Admin-API-Key", WORKER_ADMIN_KEY)],
    )
}

#[test]
fn svc_worker_reports_in_mints_its_token_and_goes_offline_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = serve_in(dir.path(), port)
        .env("SVC_AUTH__ENABLED", "true")
        .env("SVC_AUTH__ADMIN_API_KEY", WORKER_ADMIN_KEY)
        .env(
            "SVC_AUTH__WORKER_SIGNING_KEY",
            "cli-signing-key-0123456789abcdef0123",
        )
        .env("SVC_AUTH__WORKER_TOKEN", "cli-shared-token")
        // Minted tokens live 2s: the worker must refresh them to keep heartbeating.
        .env("SVC_AUTH__WORKER_TOKEN_TTL", "2s")
        .spawn()
        .unwrap();
    wait_until_serving(port);
    let url = format!("http://127.0.0.1:{port}");
    // One heartbeat with the shared token.
    let once = worker_once(&url, "w-once", "cli-shared-token")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        once.status.success(),
        "{}",
        String::from_utf8_lossy(&once.stderr)
    );
    assert!(worker_record(port, "w-once").contains("\"status\":\"online\""));
    // With worker RPC TLS on, the worker advertises an https URL; half a TLS pair is refused.
    let tls = worker_once(&url, "w-tls", "cli-shared-token")
        .env("SVC_WORKER__RPC_TLS__ENABLED", "true")
        .env("SVC_WORKER__RPC_TLS__SERVER_CERT_FILE", "cert.pem")
        .env("SVC_WORKER__RPC_TLS__SERVER_KEY_FILE", "key.pem")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        tls.status.success(),
        "{}",
        String::from_utf8_lossy(&tls.stderr)
    );
    assert!(worker_record(port, "w-tls").contains("\"url\":\"https://"));
    let half = worker_once(&url, "w-half", "cli-shared-token")
        .env("SVC_WORKER__RPC_TLS__ENABLED", "true")
        .env("SVC_WORKER__RPC_TLS__SERVER_CERT_FILE", "cert.pem")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!half.status.success());
    assert!(String::from_utf8_lossy(&half.stderr).contains("worker.rpc_tls.server_key_file"));
    // A wrong token is refused, and says so.
    let refused = worker_once(&url, "w-bad", "nope")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"));
    // A long-running worker that mints its own token from the bootstrap admin key.
    let worker = svc()
        .args([
            "worker",
            "--control-plane",
            &url,
            "--id",
            "w-boot",
            "--bootstrap-admin-key",
            WORKER_ADMIN_KEY,
        ])
        .env("SVC_WORKER__HEARTBEAT_INTERVAL", "100ms")
        .env("SVC_WORKER__STALE_AFTER", "1s")
        .env("SVC_WORKER__LEASE_TTL", "1s")
        .env("SVC_WORKER__RPC_TLS__ENABLED", "false")
        .current_dir(dir.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !worker_record(port, "w-boot").contains("\"status\":\"online\"") {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never reported in"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Well past the first token's lifetime, heartbeats still arrive.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let heartbeat_of = |record: &str| {
        let at = record.find("\"last_heartbeat\":\"").unwrap() + 18;
        let end = at + record[at..].find('"').unwrap();
        record[at..end].to_owned()
    };
    let before = heartbeat_of(&worker_record(port, "w-boot"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while heartbeat_of(&worker_record(port, "w-boot")) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker did not refresh its token and keep heartbeating: last heartbeat {before}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let stopped = stop(worker);
    assert!(
        stopped.status.success(),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    let record = worker_record(port, "w-boot");
    assert!(record.contains("\"status\":\"offline\""), "{record}");
    assert!(record.contains("\"url\":\"http://"), "{record}");
    stop(server);
}

/// `METHOD path` with a JSON body over a plain socket: the status and the JSON body.
fn call_json(port: u16, request_line: &str, body: &str) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let request = format!(
        "{request_line} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let json = response
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// Whether the docker CLI reaches an engine; loud when it may not be skipped.
fn docker_cli_answers() -> bool {
    let answers = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !answers {
        assert!(
            std::env::var_os("SVC_TEST_REQUIRE_DOCKER").is_none()
                && std::env::var_os("CI").is_none(),
            "the Docker engine is required here but does not answer"
        );
        eprintln!("SKIPPED (loudly): the docker part of this test; no engine answers");
    }
    answers
}

fn containers_of(sandbox_id: &str) -> String {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.svc.sandbox_id={sandbox_id}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_server_killed_with_sigkill_heals_at_the_next_start() {
    let docker = docker_cli_answers();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let start = || {
        let child = serve_in(dir.path(), port)
            .env("SVC_PROVIDERS__DOCKER__ENABLED", docker.to_string())
            .spawn()
            .unwrap();
        wait_until_serving(port);
        child
    };
    let spawn = |body: &str| {
        let (status, sandbox) = call_json(port, "POST /api/v1/sandboxes", body);
        assert_eq!(status, 201, "{sandbox}");
        sandbox["id"].as_str().unwrap().to_owned()
    };
    let server = start();
    let kept = spawn(r#"{"provider": "mock"}"#);
    let lost = spawn(r#"{"provider": "mock"}"#);
    let in_docker =
        docker.then(|| spawn(r#"{"provider": "docker", "image": "svc-test-busybox:latest"}"#));
    // SIGKILL: no shutdown, no checkpoint, no offline record.
    let mut server = server;
    server.kill().unwrap();
    server.wait().unwrap();
    // One runtime disappears while svc is down.
    let root = dir.path().join("mock");
    std::fs::remove_dir_all(root.join(&lost)).unwrap();
    std::fs::remove_file(root.join(format!("{lost}.json"))).unwrap();
    let server = start();
    let get = |id: &str| call_json(port, &format!("GET /api/v1/sandboxes/{id}"), "").1;
    assert_eq!(get(&kept)["state"], "running");
    let vanished = get(&lost);
    assert_eq!(vanished["state"], "destroyed", "{vanished}");
    assert_eq!(vanished["state_reason"], "runtime_vanished");
    if let Some(id) = &in_docker {
        assert_eq!(get(id)["state"], "running");
        assert!(!containers_of(id).is_empty());
    }
    // Everything still works and nothing leaks: destroy the rest.
    for id in std::iter::once(&kept).chain(in_docker.iter()) {
        let (status, body) = call_json(port, &format!("DELETE /api/v1/sandboxes/{id}"), "");
        assert_eq!(status, 200, "{body}");
    }
    let (_, active) = call_json(port, "GET /api/v1/sandboxes", "");
    assert_eq!(active, serde_json::json!([]));
    let runtimes: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(Result::ok)
        .collect();
    assert!(runtimes.is_empty(), "no mock runtime is left: {runtimes:?}");
    if let Some(id) = &in_docker {
        assert_eq!(containers_of(id), "", "no container is left");
    }
    let output = stop(server);
    assert!(output.status.success());
    // No lease is left active.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use svc_store::Store;
        let store = svc_store::sqlite::SqliteStore::open(dir.path().join("svc.db"))
            .await
            .unwrap();
        let counts = store
            .lease_counts(svc_core::Clock::now(&svc_core::clock::SystemClock))
            .await
            .unwrap();
        assert_eq!(counts.active, 0, "{counts:?}");
        assert!(counts.total >= 2);
        store.close().await;
    });
}

/// `svc doctor` over good and bad set-ups: one `ok|warn|fail <check>: ...` line per check,
/// exit 1 on any fail, the key or path at fault named, secrets never printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_each_check_and_fails_on_any_failure() {
    let dir = tempfile::tempdir().unwrap();
    let base = format!(
        "database:\n  path: {db}\nproviders:\n  docker:\n    enabled: false\n  mock:\n    root_dir: {mock}\n",
        db = dir.path().join("svc.db").display(),
        mock = dir.path().join("mock").display()
    );
    let migrated = dir.path().join("migrated.db");
    drop(
        svc_store::sqlite::SqliteStore::open(&migrated)
            .await
            .unwrap(),
    );
    // (what, svc.yaml, extra arguments, exit code, texts the output holds)
    type Case<'a> = (&'a str, String, &'a [&'a str], i32, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "a fresh development set-up",
            base.clone(),
            &[],
            0,
            vec![
                "ok config: valid",
                "warn store: ",
                "does not exist yet",
                "ok provider mock: healthy",
                "ok disk ",
                "ok clock: ",
            ],
        ),
        (
            "a migrated SQLite file",
            base.replace("svc.db", "migrated.db"),
            &[],
            0,
            vec!["ok store: ", "(current)"],
        ),
        (
            "a key that does not exist",
            format!("{base}server:\n  prot: 1\n"),
            &[],
            1,
            vec!["fail config: ", "server.prot"],
        ),
        (
            "production rules",
            base.clone(),
            &["--production"],
            1,
            vec!["ok config: valid", "fail config.production: providers.mock.enabled"],
        ),
        (
            "a qemu provider without its kernel",
            format!(
                "{base}  qemu:\n    enabled: true\n    kernel_path: {k}\n    agent_path: /bin/true\n",
                k = dir.path().join("no-vmlinux").display()
            ),
            &[],
            1,
            vec!["fail provider qemu: ", "providers.qemu.kernel_path", "no-vmlinux"],
        ),
        (
            "a docker fast path whose agent is missing",
            base.replace(
                "    enabled: false\n",
                "    enabled: true\n    agent: always\n    agent_path: /nonexistent/svc-agent\n",
            ),
            &[],
            1,
            vec!["fail providers: ", "providers.docker.agent_path", "/nonexistent/svc-agent"],
        ),
        (
            "an unreachable PostgreSQL",
            format!(
                "{}database:\n  driver: postgres\n  dsn: postgres://svc:hunter2-secret@127.0.0.1:1/svc\n",
                base.replacen(
                    &format!("database:\n  path: {}\n", dir.path().join("svc.db").display()),
                    "",
                    1
                )
            ),
            &[],
            1,
            vec!["fail store: PostgreSQL unreachable"],
        ),
    ];
    for (name, yaml, args, code, expected) in cases {
        let file = dir.path().join("svc.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = svc()
            .arg("doctor")
            .arg("--config")
            .arg(&file)
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(code), "{name}:\n{stdout}");
        for line in stdout.lines() {
            assert!(
                ["ok ", "warn ", "fail "]
                    .iter()
                    .any(|p| line.starts_with(p)),
                "{name}: every line is a finding: {line}"
            );
        }
        for text in expected {
            assert!(
                stdout.contains(text),
                "{name}: {text:?} missing from\n{stdout}"
            );
        }
        assert!(
            !stdout.contains("hunter2"),
            "{name}: a secret was printed\n{stdout}"
        );
    }
    assert!(
        !dir.path().join("svc.db").exists(),
        "doctor creates no database"
    );
}

/// The command-line client (decisions §19): `svc sandbox ...` with tables and `--json`, the
/// server from `--url` or `SVC_URL`, the server's code and message on a refusal, and
/// `svc exec` streaming output as it comes and exiting with the command's exit code.
#[test]
fn the_client_manages_sandboxes_and_runs_commands() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = serve_in(dir.path(), port).spawn().unwrap();
    wait_until_serving(port);
    let url = format!("http://127.0.0.1:{port}");
    let client = |args: &[&str]| {
        let mut command = svc();
        command.env("SVC_URL", &url).args(args);
        command.output().unwrap()
    };
    let created = svc()
        .args([
            "sandbox",
            "create",
            "--env",
            "GREETING=hi",
            "--json",
            "--url",
            &url,
        ])
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let sandbox: serde_json::Value = serde_json::from_slice(&created.stdout).unwrap();
    let id = sandbox["id"].as_str().unwrap().to_owned();
    assert_eq!(sandbox["state"], "running");

    let listed = client(&["sandbox", "ls"]);
    let table = String::from_utf8(listed.stdout).unwrap();
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("running")),
        "{table}"
    );
    let listed = client(&["--json", "sandbox", "ls"]);
    let array: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        array[0]["id"],
        id.as_str(),
        "lists print the server's array"
    );

    // A refusal prints the server's code and message and fails.
    let missing = client(&["sandbox", "get", "sb-0000000000000000"]);
    assert!(!missing.status.success());
    let stderr = String::from_utf8(missing.stderr).unwrap();
    assert!(
        stderr.contains("not_found") && stderr.contains("sb-0000000000000000"),
        "{stderr}"
    );

    // Exit codes and streams pass through; one word runs through the shell, more as argv.
    let ran = client(&[
        "exec",
        &id,
        "--",
        "printf \"$GREETING\"; printf err >&2; exit 7",
    ]);
    assert_eq!(ran.status.code(), Some(7));
    assert_eq!(ran.stdout, b"hi");
    assert_eq!(ran.stderr, b"err");
    let argv = client(&["exec", &id, "--", "printf", "%s-%s", "a b", "c"]);
    assert_eq!(
        (argv.status.code(), argv.stdout.as_slice()),
        (Some(0), b"a b-c".as_slice())
    );

    // Output arrives while the command still runs: the command cannot end before the test,
    // having read its first line, creates the gate file in the sandbox (its working directory,
    // under the mock provider's root).
    let mut streaming = svc()
        .env("SVC_URL", &url)
        .args([
            "exec",
            &id,
            "--",
            "echo first; while [ ! -e gate ]; do sleep 0.05; done; echo second",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(streaming.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert_eq!(first, "first\n");
    assert!(
        streaming.try_wait().unwrap().is_none(),
        "svc exec ended while its command still waited for the gate"
    );
    std::fs::write(dir.path().join("mock").join(&id).join("gate"), b"").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert_eq!(rest, "second\n");
    assert!(streaming.wait().unwrap().success());

    let extended = client(&["sandbox", "extend", &id, "--ttl", "2h", "--json"]);
    assert!(
        extended.status.success(),
        "{}",
        String::from_utf8_lossy(&extended.stderr)
    );
    // Pause and resume; a paused sandbox refuses commands with the server's code.
    let paused = client(&["sandbox", "pause", &id, "--json"]);
    let record: serde_json::Value = serde_json::from_slice(&paused.stdout).unwrap();
    assert_eq!(record["state"], "paused");
    let refused = client(&["exec", &id, "--", "true"]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(
        stderr.contains("conflict") && stderr.contains("paused"),
        "{stderr}"
    );
    let resumed = client(&["sandbox", "resume", &id]);
    let table = String::from_utf8(resumed.stdout).unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("running")),
        "{table}"
    );
    let removed = client(&["sandbox", "rm", &id]);
    assert_eq!(
        String::from_utf8(removed.stdout).unwrap(),
        format!("{id}\n")
    );
    let gone = client(&["--json", "sandbox", "get", &id]);
    let record: serde_json::Value = serde_json::from_slice(&gone.stdout).unwrap();
    assert_eq!(record["state"], "destroyed");
    stop(server);
}

/// `svc template`, `svc quota` and `svc events` against a served binary (decisions §19).
#[test]
fn the_client_manages_templates_and_quotas_and_follows_events() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = serve_in(dir.path(), port).spawn().unwrap();
    wait_until_serving(port);
    let url = format!("http://127.0.0.1:{port}");
    let client = |args: &[&str]| {
        let output = svc().env("SVC_URL", &url).args(args).output().unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let json = |text: String| -> serde_json::Value { serde_json::from_str(&text).unwrap() };

    let mut events = svc()
        .env("SVC_URL", &url)
        .args(["events", "--types", "sandbox.created", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let template = json(client(&[
        "template",
        "create",
        "py",
        "--image",
        "alpine:latest",
        "--provider",
        "mock",
        "--ttl",
        "10m",
        "--warm-pool",
        "1",
        "--json",
    ]));
    assert_eq!(template["name"], "py");
    assert_eq!(template["warm_pool"], 1);
    assert!(client(&["template", "ls"])
        .lines()
        .any(|l| l.starts_with("py ")));
    // `svc events` follows the stream once the server counts it as a subscriber.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, diagnostics) = call_json(port, "GET /api/v1/diagnostics", "");
        let subscribers = diagnostics["events"]["subscribers"].as_u64().unwrap_or(0);
        if status == 200 && subscribers >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "svc events never subscribed: {status} {diagnostics}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let sandbox = json(client(&[
        "template",
        "spawn",
        "py",
        "--env",
        "LANG_X=py",
        "--json",
    ]));
    assert_eq!(sandbox["state"], "running");
    let echoed = client(&[
        "exec",
        sandbox["id"].as_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo $LANG_X",
    ]);
    assert_eq!(echoed, "py\n");
    let (sender, received) = std::sync::mpsc::channel();
    let followed = events.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(followed), &mut line).unwrap();
        let _ = sender.send(line);
    });
    let line = received
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("svc events printed no line: {e}"));
    let event = json(line);
    assert_eq!(event["type"], "sandbox.created");
    assert_eq!(event["sandbox_id"], sandbox["id"]);
    events.kill().unwrap();
    let _ = events.wait();

    let quota = json(client(&[
        "quota",
        "set",
        "alice",
        "--max-sandboxes",
        "2",
        "--max-ttl",
        "1h",
        "--json",
    ]));
    assert_eq!(quota["max_sandboxes"], 2);
    assert!(client(&["quota", "ls"])
        .lines()
        .any(|l| l.starts_with("alice ")));
    assert_eq!(client(&["quota", "rm", "alice"]), "alice\n");
    assert_eq!(client(&["template", "rm", "py"]), "py\n");

    // `svc worker drain|undrain` (decisions §22): the worker as the server answers it.
    let drained = json(client(&["worker", "drain", "local", "--json"]));
    assert_eq!(
        (drained["id"].as_str(), drained["status"].as_str()),
        (Some("local"), Some("draining"))
    );
    let table = client(&["worker", "undrain", "local"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("local ") && l.contains(" online")),
        "{table}"
    );
    let unknown = svc()
        .env("SVC_URL", &url)
        .args(["worker", "drain", "nobody"])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("not_found"));
    stop(server);
}

/// `svc sandbox create --egress/--allow` and `svc sandbox preview` against a served binary.
#[test]
fn the_client_asks_for_egress_and_preview_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = serve_in(dir.path(), port).spawn().unwrap();
    wait_until_serving(port);
    let url = format!("http://127.0.0.1:{port}");
    let run = |args: &[&str]| svc().env("SVC_URL", &url).args(args).output().unwrap();
    // The mock provider cannot enforce egress: the server's refusal, as the client prints it.
    let refused = run(&[
        "sandbox",
        "create",
        "--provider",
        "mock",
        "--allow",
        "10.0.0.1:80",
    ]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("bad_request") && stderr.contains("egress"),
        "{stderr}"
    );
    let created = run(&[
        "sandbox",
        "create",
        "--provider",
        "mock",
        "--egress",
        "all",
        "--json",
    ]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let sandbox: serde_json::Value = serde_json::from_slice(&created.stdout).unwrap();
    assert_eq!(sandbox["egress"]["mode"], "all");
    let id = sandbox["id"].as_str().unwrap();
    let preview = run(&["sandbox", "preview", id, "8080", "--ttl", "5m"]);
    assert!(
        preview.status.success(),
        "{}",
        String::from_utf8_lossy(&preview.stderr)
    );
    let text = String::from_utf8(preview.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "http://8080-{id}.localhost:{port}/?svc_preview_token="
        )),
        "{text}"
    );
    assert!(text.contains("\nexpires "), "{text}");
    stop(server);
}

/// `svc sandbox ls` follows `X-Next-Cursor`: all 1,001 sandboxes, not the first page of 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_ls_lists_every_page() {
    use futures::StreamExt;
    let server = crate::harness::TestServer::start().await;
    let url = server.url("/sandboxes");
    let created = futures::stream::iter(0..1001)
        .map(|_| {
            let (client, url) = (server.client.clone(), url.clone());
            async move {
                let reply = client
                    .post(&url)
                    .json(&serde_json::json!({"provider": "mock"}))
                    .send()
                    .await
                    .unwrap();
                reply.status().as_u16()
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<u16>>()
        .await;
    assert!(created.iter().all(|s| *s == 201), "{created:?}");
    let base = server.base.clone();
    let listed = tokio::task::spawn_blocking(move || {
        svc()
            .args(["--json", "sandbox", "ls", "--url", &base])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let array: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let ids: std::collections::BTreeSet<&str> = array
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1001, "every page, no sandbox twice");
    server.shutdown().await;
}
