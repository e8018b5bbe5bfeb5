//! The web console in a real browser (decisions §21): Debian's Chromium, driven by playwright-core
//! from `ui/tests/browser.mjs`, against this server on the mock provider. Each test runs one of
//! the script's scenarios, which checks the page and the API and saves its screenshots under
//! `target/ui-screenshots/`. They skip loudly without Chromium, unless the run requires it
//! (`SVC_TEST_REQUIRE_BROWSER`, set by scripts/test.sh after installing it, or `CI`).

use std::path::PathBuf;
use std::time::Duration;

use crate::harness::TestServer;

fn ui() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ui")
}

/// Where the screenshots go: `target/ui-screenshots`, kept after the run as its artifacts.
fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../ui-screenshots")
}

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("SVC_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("SVC_TEST_REQUIRE_BROWSER").is_none() && std::env::var_os("CI").is_none(),
        "Chromium ({}) is required here but missing; scripts/test.sh installs it",
        path.display()
    );
    eprintln!(
        "SKIPPED (loudly): Chromium ({}) is missing; run scripts/test.sh to install it",
        path.display()
    );
    None
}

/// Runs `scenario` of ui/tests/browser.mjs against `server` with `env` (`SVC_API_KEY` when the
/// server wants a key), failing with its output.
async fn scenario(server: &TestServer, scenario: &str, env: &[(&str, &str)]) {
    let Some(chromium) = chromium() else { return };
    let mut command = tokio::process::Command::new("node");
    command
        .arg("tests/browser.mjs")
        .arg(scenario)
        .current_dir(ui())
        .env("SVC_URL", &server.base)
        .env("SVC_CHROMIUM", chromium)
        .env("SVC_SCREENSHOTS", screenshots())
        .kill_on_drop(true);
    command.envs(env.iter().copied());
    let out = tokio::time::timeout(Duration::from_secs(180), command.output())
        .await
        .unwrap_or_else(|_| panic!("the {scenario} scenario ran for 3 minutes"))
        .unwrap_or_else(|e| panic!("node tests/browser.mjs {scenario}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser scenario {scenario} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for line in stdout.lines() {
        eprintln!("browser {scenario}: {line}");
    }
}

const KEY: &str = "console-browser-key";

async fn with_auth() -> TestServer {
    TestServer::start_with(|c| {
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(KEY);
    })
    .await
}

#[tokio::test]
async fn the_list_shows_a_sandbox_spawned_through_the_api_within_a_second() {
    let server = TestServer::start().await;
    scenario(&server, "list", &[]).await;
}

#[tokio::test]
async fn spawn_and_destroy_from_the_console() {
    let server = TestServer::start().await;
    scenario(&server, "spawn-destroy", &[]).await;
}

#[tokio::test]
async fn the_list_filters_and_extends_pauses_and_resumes_from_its_rows() {
    let server = TestServer::start().await;
    scenario(&server, "list-actions", &[]).await;
}

#[tokio::test]
async fn the_list_pages_past_100_and_stays_current() {
    let server = TestServer::start().await;
    scenario(&server, "paging", &[]).await;
}

#[tokio::test]
async fn the_sandbox_page_shows_exec_history_output_stats_and_logs() {
    let server = TestServer::start().await;
    scenario(&server, "sandbox-details", &[]).await;
}

#[tokio::test]
async fn the_terminal_runs_what_is_typed() {
    let server = with_auth().await;
    scenario(&server, "terminal", &[("SVC_API_KEY", KEY)]).await;
}

#[tokio::test]
async fn a_file_uploaded_in_the_browser_is_read_back_through_the_api() {
    let server = with_auth().await;
    scenario(&server, "upload", &[("SVC_API_KEY", KEY)]).await;
}

#[tokio::test]
async fn the_events_page_shows_sandbox_created_live() {
    let server = TestServer::start().await;
    scenario(&server, "events", &[]).await;
}

#[tokio::test]
async fn with_auth_the_console_asks_for_a_key_and_refuses_a_wrong_one() {
    let server = with_auth().await;
    scenario(&server, "auth", &[("SVC_API_KEY", KEY)]).await;
}

#[tokio::test]
async fn the_overview_shows_providers_queue_quotas_and_request_rates() {
    let server = TestServer::start().await;
    let quota = server
        .client
        .put(server.url("/quotas/console-owner"))
        .json(&serde_json::json!({"max_sandboxes": 3, "max_ttl": "1h", "max_exec_timeout": "5m"}))
        .send()
        .await
        .unwrap();
    assert_eq!(quota.status(), 200);
    scenario(&server, "overview", &[]).await;
}

/// Edits a template and builds its image from the console, the build's log followed live (builds
/// use the Docker engine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_is_edited_and_built_in_the_console() {
    let Some((server, docker)) = crate::builds::build_server().await else {
        return;
    };
    let name = format!("console-{}", crate::builds::nonce());
    let created = server
        .client
        .post(server.url("/templates"))
        .json(
            &serde_json::json!({"name": name, "provider": "docker", "image": crate::docker::IMAGE}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    scenario(&server, "templates", &[("SVC_TEMPLATE", &name)]).await;
    crate::builds::finish(server, &docker, &[&name]).await;
}
