//! The Python and TypeScript SDKs' own suites and the E2B compatibility suite (`clients/`), run
//! against this build's binary.
//! Each suite starts servers of its own, on mock and on docker, calls every SDK function, and
//! checks the SDK against `svc openapi` so that neither drifts from the server. They skip loudly
//! when their toolchains are missing, unless the run requires them (`SVC_TEST_REQUIRE_CLIENTS`,
//! set by scripts/test.sh after scripts/clients-test-env.sh prepared them, or `CI`).

use std::path::PathBuf;
use std::process::Command;

fn clients() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../clients")
}

/// Skips loudly, or fails when the run requires the SDK suites.
fn missing(what: &str) {
    assert!(
        std::env::var_os("SVC_TEST_REQUIRE_CLIENTS").is_none() && std::env::var_os("CI").is_none(),
        "{what} is required here but missing; scripts/test.sh prepares it"
    );
    eprintln!("SKIPPED (loudly): {what} is missing; run scripts/test.sh to prepare it");
}

/// Runs a suite to its end and fails with its whole output when it fails.
fn run_suite(name: &str, mut command: Command) {
    let out = command
        .env("SVC_BIN", env!("CARGO_BIN_EXE_svc"))
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the {name} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // The suite's own summary, for the log.
    for line in stdout
        .lines()
        .rev()
        .take(12)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        eprintln!("{name}: {line}");
    }
}

/// The Python SDK: `mypy --strict`, the generated sync client being current, and pytest.
#[test]
fn python_sdk_suite() {
    let python = match std::env::var("SVC_PYTHON") {
        Ok(python) => python,
        Err(_) => {
            let ready = Command::new("python3")
                .args([
                    "-c",
                    "import httpx, websockets, pytest, mypy, anyio, svc_sdk",
                ])
                .output()
                .is_ok_and(|o| o.status.success());
            if !ready {
                return missing("a Python with the SDK's dev extras (SVC_PYTHON)");
            }
            "python3".to_owned()
        }
    };
    let mut command = Command::new("bash");
    command
        .arg(clients().join("python/check.sh"))
        .env("PYTHON", python);
    run_suite("Python SDK suite", command);
}

/// The unmodified E2B Python SDK (`clients/e2b`, pinned) against the E2B listener, on mock and
/// docker (decisions §20).
#[test]
fn e2b_python_sdk_suite() {
    let python = std::env::var("SVC_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let ready = Command::new(&python)
        .args(["-c", "import e2b, pytest, httpx"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        return missing("a Python with the e2b SDK and pytest (clients/e2b/requirements.txt)");
    }
    let mut command = Command::new("bash");
    command
        .arg(clients().join("e2b/check.sh"))
        .arg("python")
        .env("PYTHON", python);
    run_suite("E2B Python SDK suite", command);
}

/// The unmodified e2b npm package (`clients/e2b/js`, pinned) against the E2B listener, on mock
/// and docker.
#[test]
fn e2b_js_sdk_suite() {
    if !clients().join("e2b/js/node_modules/e2b").is_dir() {
        return missing("clients/e2b/js/node_modules (npm ci)");
    }
    let mut command = Command::new("bash");
    command.arg(clients().join("e2b/check.sh")).arg("js");
    run_suite("E2B npm SDK suite", command);
}

/// The TypeScript SDK: `tsc`, the OpenAPI types being current, and node's test runner.
#[test]
fn typescript_sdk_suite() {
    let dir = clients().join("typescript");
    if !dir.join("node_modules").is_dir() {
        return missing("clients/typescript/node_modules (npm ci)");
    }
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg("npm run --silent check-openapi && npm test --silent")
        .current_dir(&dir);
    run_suite("TypeScript SDK suite", command);
}
