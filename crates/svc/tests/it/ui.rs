//! The web console's serving (decisions §21): `/ui` on the main listener, its files embedded in
//! the binary, without credentials and outside the API's rate limit, off with
//! `server.ui_enabled: false`. Its pages in a browser are tested elsewhere.

use serde_json::Value;

use crate::harness::TestServer;

async fn fetch(server: &TestServer, path: &str, gzip: bool) -> reqwest::Response {
    let mut request = server.client.get(format!("{}{path}", server.base));
    if gzip {
        request = request.header("accept-encoding", "gzip");
    }
    request.send().await.unwrap()
}

/// The assets `index.html` names.
fn assets_of(html: &str) -> Vec<String> {
    html.split('"')
        .filter(|part| part.starts_with("/ui/assets/"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_console_is_served_at_ui_without_credentials_and_small() {
    let server = TestServer::start_with(|c| {
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new("console-test-key");
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_minute = 1;
        c.rate_limit.burst = 1;
    })
    .await;
    let page = fetch(&server, "/ui", false).await;
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(page.headers()["cache-control"], "no-cache");
    // The page loads only its own files and API, and no other site may frame it.
    let policy = page.headers()["content-security-policy"].to_str().unwrap();
    for directive in [
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(directive), "{policy}");
    }
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert_eq!(page.headers()["referrer-policy"], "no-referrer");
    let html = page.text().await.unwrap();
    assert!(html.contains("<div id=\"app\"></div>"), "{html}");
    // Pages the console routes in the browser get the same document.
    for path in [
        "/ui/",
        "/ui/sandboxes/sb-0123456789abcdef",
        "/ui/events",
        "/ui/templates",
        "/ui/overview",
    ] {
        let again = fetch(&server, path, false).await;
        assert_eq!(again.status(), 200, "{path}");
        assert_eq!(again.text().await.unwrap(), html, "{path}");
    }
    let assets = assets_of(&html);
    assert_eq!(assets.len(), 2, "a script and a style sheet: {assets:?}");
    let mut compressed = 0;
    for asset in &assets {
        let plain = fetch(&server, asset, false).await;
        assert_eq!(plain.status(), 200, "{asset}");
        assert_eq!(
            plain.headers()["cache-control"],
            "public, max-age=31536000, immutable"
        );
        let plain = plain.bytes().await.unwrap();
        let gz = fetch(&server, asset, true).await;
        assert_eq!(gz.headers()["content-encoding"], "gzip", "{asset}");
        let gz = gz.bytes().await.unwrap();
        assert!(gz.len() < plain.len());
        compressed += gz.len();
    }
    assert!(
        compressed < 300_000,
        "the first load is under 300 KB compressed: {compressed} bytes"
    );
    assert_eq!(
        fetch(&server, "/ui/assets/missing.js", false)
            .await
            .status(),
        404
    );

    // The API still needs the key and keeps its rate limit; the console's files need neither.
    let refused = fetch(&server, "/api/v1/sandboxes", false).await;
    assert_eq!(refused.status(), 401);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "unauthorized");
    for _ in 0..5 {
        assert_eq!(
            fetch(&server, "/ui", true).await.status(),
            200,
            "not rate-limited"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn ui_enabled_false_turns_the_console_off() {
    let server = TestServer::start_with(|c| c.server.ui_enabled = false).await;
    let off = fetch(&server, "/ui", false).await;
    assert_eq!(off.status(), 404);
    assert_eq!(fetch(&server, "/ui/events", false).await.status(), 404);
    server.shutdown().await;
}
