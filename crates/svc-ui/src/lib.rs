//! svc's web console (decisions §21): the files `ui/` builds into, embedded in the binary by
//! `build.rs`, served under `/ui`. Page paths (`/ui`, `/ui/sandboxes/{id}`, ...) answer the
//! console's `index.html`, which routes in the browser; hashed assets are cached for good;
//! a browser that accepts gzip gets the copy compressed at build time.

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// One file of the console.
pub struct Asset {
    /// Its path under `/ui/` (`index.html`, `assets/app-HASH.js`).
    pub path: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
    /// The same, gzipped.
    pub gzip: &'static [u8],
}

/// Every file of the console.
pub const ASSETS: &[Asset] = include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// The file at `path` under `/ui/`.
pub fn asset(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|asset| asset.path == path)
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// `asset` as the answer to `request`: gzipped when the browser accepts it.
fn answer(asset: &Asset, request: &Request) -> Response {
    let gzip = request
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|e| e.trim().starts_with("gzip")));
    // Hashed names never change content; the page itself is always revalidated.
    let cache = if asset.path.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let mut response = if gzip {
        (
            [(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))],
            asset.gzip,
        )
            .into_response()
    } else {
        asset.body.into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(asset.path)),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if asset.path.ends_with(".html") {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    response
}

/// What the console's page may load and do: its own files and API only (the credential it
/// holds must not be readable by anything else), inline styles (xterm.js writes its theme into
/// a `<style>` element), the empty `data:` icon; never framed, so no other site can overlay it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
    frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'";

async fn serve(request: Request) -> Response {
    let path = request.uri().path();
    let rest = path
        .strip_prefix("/ui")
        .unwrap_or_default()
        .trim_start_matches('/');
    if let Some(found) = asset(rest).filter(|_| !rest.is_empty()) {
        return answer(found, &request);
    }
    // A missing asset is a 404; any other path is a page the console routes itself.
    if rest.starts_with("assets/") {
        return StatusCode::NOT_FOUND.into_response();
    }
    match asset("index.html") {
        Some(index) => answer(index, &request),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The console's routes: `/ui` and everything under it.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(serve))
        .route("/ui/", get(serve))
        .route("/ui/{*path}", get(serve))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_embedded_a_page_and_its_assets() {
        let index = asset("index.html").expect("index.html");
        let html = std::str::from_utf8(index.body).unwrap_or_default();
        assert!(html.contains("<div id=\"app\">"), "{html}");
        let script = ASSETS
            .iter()
            .find(|a| a.path.starts_with("assets/app-") && a.path.ends_with(".js"))
            .expect("the app's script");
        assert!(html.contains(&format!("/ui/{}", script.path)));
        assert!(script.gzip.len() < script.body.len());
    }

    /// The console's TypeScript is checked as a whole (esbuild, which bundles it, only strips
    /// the types).
    #[test]
    fn the_console_typechecks() {
        let ui = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ui");
        let out = std::process::Command::new("node")
            .args([
                "node_modules/typescript/bin/tsc",
                "-p",
                "tsconfig.json",
                "--noEmit",
            ])
            .current_dir(&ui)
            .output()
            .expect("node runs tsc (the build installed ui/node_modules)");
        assert!(
            out.status.success(),
            "tsc found type errors in ui/:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
