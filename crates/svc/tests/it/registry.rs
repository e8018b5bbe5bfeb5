//! A small image registry for pull tests: no registry is reachable here, so the test serves the
//! Registry HTTP API v2 itself on loopback (which the engine treats as an insecure registry),
//! with one image whose layer (busybox and some incompressible padding) trickles out slowly
//! enough for pull progress to show.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;
use sha2::{Digest, Sha256};

/// One image the registry serves.
struct Image {
    manifest: Bytes,
    manifest_digest: String,
    config: Bytes,
    config_digest: String,
    layer: Bytes,
    layer_digest: String,
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex_of(&Sha256::digest(bytes)))
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A root filesystem of busybox (as `/bin/busybox`, with its applets) and `padding` bytes of
/// random data, as an uncompressed tar (the engine detects compression itself).
fn layer(padding: usize) -> Bytes {
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    tar.append_data(&mut dir, "bin", std::io::empty()).unwrap();
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static at /bin/busybox");
    let mut file = tar::Header::new_gnu();
    file.set_mode(0o755);
    file.set_size(busybox.len() as u64);
    tar.append_data(&mut file, "bin/busybox", busybox.as_slice())
        .unwrap();
    let applets = std::process::Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .unwrap()
        .stdout;
    for applet in String::from_utf8_lossy(&applets).lines() {
        if applet != "busybox" {
            let mut link = tar::Header::new_gnu();
            link.set_entry_type(tar::EntryType::Symlink);
            link.set_mode(0o777);
            link.set_size(0);
            tar.append_link(&mut link, format!("bin/{applet}"), "busybox")
                .unwrap();
        }
    }
    for dir_name in ["tmp", "etc", "root", "proc", "sys", "dev"] {
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_mode(if dir_name == "tmp" { 0o1777 } else { 0o755 });
        dir.set_size(0);
        tar.append_data(&mut dir, dir_name, std::io::empty())
            .unwrap();
    }
    let mut noise = vec![0u8; padding];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut noise,
    )
    .unwrap();
    let mut pad = tar::Header::new_gnu();
    pad.set_mode(0o644);
    pad.set_size(noise.len() as u64);
    tar.append_data(&mut pad, "padding", noise.as_slice())
        .unwrap();
    Bytes::from(tar.into_inner().unwrap())
}

impl Image {
    fn new(padding: usize) -> Self {
        let layer = layer(padding);
        let layer_digest = digest(&layer);
        let config = Bytes::from(
            serde_json::to_vec(&json!({
                "architecture": "amd64",
                "os": "linux",
                "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]},
                "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
                "history": [{"created_by": "svc pull test"}],
            }))
            .unwrap(),
        );
        let config_digest = digest(&config);
        let manifest = Bytes::from(
            serde_json::to_vec(&json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "size": config.len(),
                    "digest": config_digest,
                },
                "layers": [{
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": layer.len(),
                    "digest": layer_digest,
                }],
            }))
            .unwrap(),
        );
        Image {
            manifest_digest: digest(&manifest),
            manifest,
            config,
            config_digest,
            layer,
            layer_digest,
        }
    }
}

/// A running registry.
pub(crate) struct Registry {
    /// `127.0.0.1:PORT`.
    pub(crate) host: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one image under every repository name, its layer `padding` bytes of noise larger
/// than busybox and sent in 256 KiB pieces `pace` apart.
pub(crate) async fn serve(padding: usize, pace: Duration) -> Registry {
    let image = Arc::new(Image::new(padding));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let app = axum::Router::new().fallback(move |request: Request| {
        let image = Arc::clone(&image);
        async move { answer(&image, pace, &request) }
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Registry { host, task }
}

fn answer(image: &Image, pace: Duration, request: &Request) -> Response {
    let path = request.uri().path();
    let head = request.method() == Method::HEAD;
    let blob = |bytes: &Bytes, kind: &str, digest: &str, paced: bool| {
        let body = if head {
            Body::empty()
        } else if paced {
            let pieces: Vec<Bytes> = bytes
                .chunks(256 << 10)
                .map(Bytes::copy_from_slice)
                .collect();
            Body::from_stream(futures::stream::iter(pieces).then(move |piece| async move {
                tokio::time::sleep(pace).await;
                Ok::<_, std::convert::Infallible>(piece)
            }))
        } else {
            Body::from(bytes.clone())
        };
        (
            [
                (header::CONTENT_TYPE, kind.to_owned()),
                (header::CONTENT_LENGTH, bytes.len().to_string()),
                (
                    header::HeaderName::from_static("docker-content-digest"),
                    digest.to_owned(),
                ),
            ],
            body,
        )
            .into_response()
    };
    if path == "/v2/" || path == "/v2" {
        return (
            [(
                header::HeaderName::from_static("docker-distribution-api-version"),
                "registry/2.0",
            )],
            "{}",
        )
            .into_response();
    }
    if path.contains("/manifests/") {
        return blob(
            &image.manifest,
            "application/vnd.docker.distribution.manifest.v2+json",
            &image.manifest_digest,
            false,
        );
    }
    if path.ends_with(&format!("/blobs/{}", image.config_digest)) {
        return blob(
            &image.config,
            "application/octet-stream",
            &image.config_digest,
            false,
        );
    }
    if path.ends_with(&format!("/blobs/{}", image.layer_digest)) {
        return blob(
            &image.layer,
            "application/octet-stream",
            &image.layer_digest,
            true,
        );
    }
    StatusCode::NOT_FOUND.into_response()
}
