//! The file API over HTTP.

use base64::Engine;
use futures::StreamExt;
use reqwest::Method;
use serde_json::json;

use crate::harness::{assert_schema, TestServer};

async fn sandbox(server: &TestServer) -> String {
    server.spawn(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn raw(server: &TestServer, url: &str) -> (u16, Vec<u8>, String) {
    let response = server.client.get(server.url(url)).send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        status,
        response.bytes().await.unwrap().to_vec(),
        content_type,
    )
}

#[tokio::test]
async fn write_read_list_stat() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let files = format!("/sandboxes/{id}/files");
    let mut events = server.events("?types=file.written,file.read", None).await;
    let written = server
        .post(
            &files,
            json!({"path": "/app/hello.txt", "content": "héllo\n"}),
        )
        .await;
    assert_eq!(written.status, 200, "{}", written.body);
    assert_eq!(written.body, json!({"status": "written"}));
    let (status, bytes, content_type) = raw(&server, &format!("{files}?path=/app/hello.txt")).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/octet-stream");
    assert_eq!(bytes, "héllo\n".as_bytes());
    let event = events
        .next(std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(event.data["type"], "file.written");
    assert_eq!(
        event.data["data"],
        json!({"path": "/app/hello.txt", "size": 7})
    );
    let event = events
        .next(std::time::Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(event.data["type"], "file.read");
    assert_eq!(event.data["data"]["path"], "/app/hello.txt");

    server
        .post(
            &files,
            json!({"path": "/app/run.sh", "content": "#!/bin/sh\necho ran\n", "mode": "755"}),
        )
        .await;
    server
        .post(&files, json!({"path": "/app/sub/x", "content": ""}))
        .await;
    let list = server.get(&format!("{files}/list?path=/app")).await;
    assert_eq!(list.status, 200);
    let entries = list.body.as_array().unwrap();
    for entry in entries {
        assert_schema("FileInfo", entry);
    }
    let names: Vec<_> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hello.txt", "run.sh", "sub"]);
    assert_eq!(entries[0]["mode"], "0644");
    assert_eq!(entries[0]["size"], 7);
    assert_eq!(entries[0]["path"], "/app/hello.txt");
    assert_eq!(entries[1]["mode"], "0755");
    assert_eq!(entries[2]["is_dir"], true);
    assert!(entries[0]["mod_time"].as_str().unwrap().ends_with('Z'));
    let ran = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "./app/run.sh"}),
        )
        .await;
    assert_eq!(ran.body["stdout"], "ran\n", "the mode made it executable");

    let root = server.get(&format!("{files}/list")).await;
    let names: Vec<_> = root
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app"], "path defaults to /");

    let stat = server
        .get(&format!("{files}/stat?path=/app/hello.txt"))
        .await;
    assert_eq!(stat.status, 200);
    assert_schema("FileInfo", &stat.body);
    assert_eq!(stat.body["name"], "hello.txt");
    assert_eq!(stat.body["is_dir"], false);
    server
        .get(&format!("{files}/stat?path=/nope"))
        .await
        .assert_error(404, "not_found");
    server.shutdown().await;
}

#[tokio::test]
async fn binary_content_round_trips_through_base64() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let files = format!("/sandboxes/{id}/files");
    let content: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let encoded = base64::engine::general_purpose::STANDARD.encode(&content);
    let reply = server
        .post(
            &files,
            json!({"path": "/bin.dat", "content": encoded, "encoding": "base64", "mode": "0600"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let (status, bytes, _) = raw(&server, &format!("{files}?path=/bin.dat")).await;
    assert_eq!(status, 200);
    assert_eq!(bytes, content);
    let stat = server.get(&format!("{files}/stat?path=/bin.dat")).await;
    assert_eq!(stat.body["mode"], "0600");
    assert_eq!(stat.body["size"], 1_000_000);
    server.shutdown().await;
}

#[tokio::test]
async fn move_chmod_delete_glob() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let files = format!("/sandboxes/{id}/files");
    for path in [
        "/src/a.rs",
        "/src/b.txt",
        "/src/deep/c.rs",
        "/src/deep/er/d.rs",
        "/old.txt",
        "/target.txt",
    ] {
        server
            .post(&files, json!({"path": path, "content": path}))
            .await;
    }
    let moved = server
        .post(
            &format!("{files}/move"),
            json!({"old_path": "/old.txt", "new_path": "/target.txt"}),
        )
        .await;
    assert_eq!(moved.body, json!({"status": "moved"}));
    assert_eq!(
        raw(&server, &format!("{files}?path=/target.txt")).await.1,
        b"/old.txt",
        "the destination was replaced"
    );
    server
        .get(&format!("{files}/stat?path=/old.txt"))
        .await
        .assert_error(404, "not_found");
    server
        .post(
            &format!("{files}/move"),
            json!({"old_path": "/missing", "new_path": "/x"}),
        )
        .await
        .assert_error(404, "not_found");

    let chmod = server
        .post(
            &format!("{files}/chmod"),
            json!({"path": "/target.txt", "mode": "0700"}),
        )
        .await;
    assert_eq!(chmod.body, json!({"status": "chmod applied"}));
    assert_eq!(
        server
            .get(&format!("{files}/stat?path=/target.txt"))
            .await
            .body["mode"],
        "0700"
    );

    let glob = server
        .get(&format!("{files}/glob?pattern=/src/**/*.rs"))
        .await;
    assert_eq!(
        glob.body,
        json!(["/src/a.rs", "/src/deep/c.rs", "/src/deep/er/d.rs"])
    );
    let glob = server.get(&format!("{files}/glob?pattern=/src/*")).await;
    assert_eq!(glob.body, json!(["/src/a.rs", "/src/b.txt", "/src/deep"]));

    let message = server
        .call(Method::DELETE, &format!("{files}?path=/src"), None)
        .await
        .assert_error(400, "bad_request");
    assert!(message.contains("recursive"), "{message}");
    assert_eq!(
        server
            .get(&format!("{files}/glob?pattern=/src/*"))
            .await
            .body
            .as_array()
            .unwrap()
            .len(),
        3,
        "nothing was deleted"
    );
    let deleted = server
        .call(
            Method::DELETE,
            &format!("{files}?path=/src&recursive=true"),
            None,
        )
        .await;
    assert_eq!(deleted.body, json!({"status": "deleted"}));
    let deleted = server
        .call(Method::DELETE, &format!("{files}?path=/target.txt"), None)
        .await;
    assert_eq!(deleted.status, 200);
    server
        .call(Method::DELETE, &format!("{files}?path=/target.txt"), None)
        .await
        .assert_error(404, "not_found");
    assert_eq!(server.get(&format!("{files}/list")).await.body, json!([]));
    server.shutdown().await;
}

#[tokio::test]
async fn file_bad_input_has_no_side_effects() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    let files = format!("/sandboxes/{id}/files");
    server
        .post(&files, json!({"path": "/keep/me.txt", "content": "kept"}))
        .await;
    let cases = [
        (json!({"path": "relative.txt", "content": "x"}), "path"),
        (
            json!({"path": "/x.txt", "content": "%%%", "encoding": "base64"}),
            "base64",
        ),
        (
            json!({"path": "/x.txt", "content": "x", "encoding": "rot13"}),
            "encoding",
        ),
        (
            json!({"path": "/x.txt", "content": "x", "mode": "999"}),
            "mode",
        ),
        (
            json!({"path": "/x.txt", "content": "x", "mode": "abc"}),
            "mode",
        ),
        (json!({"content": "x"}), "path"),
        (json!({"path": "/", "content": "x"}), "directory"),
    ];
    for (body, mention) in cases {
        let message = server
            .post(&files, body.clone())
            .await
            .assert_error(400, "bad_request");
        assert!(message.contains(mention), "{body}: {message}");
    }
    server
        .post(
            &format!("{files}/chmod"),
            json!({"path": "/keep/me.txt", "mode": "999"}),
        )
        .await
        .assert_error(400, "bad_request");
    server
        .post(
            &format!("{files}/chmod"),
            json!({"path": "keep", "mode": "644"}),
        )
        .await
        .assert_error(400, "bad_request");
    server
        .get(&format!("{files}?path=/keep"))
        .await
        .assert_error(400, "bad_request");
    server
        .get(&format!("{files}?path=keep/me.txt"))
        .await
        .assert_error(400, "bad_request");
    server
        .get(&format!("{files}?path=/keep/none"))
        .await
        .assert_error(404, "not_found");
    server.get(&files).await.assert_error(400, "bad_request");
    server
        .get(&format!("{files}/glob?pattern=*.txt"))
        .await
        .assert_error(400, "bad_request");
    server
        .get(&format!("{files}/list?path=/keep/me.txt"))
        .await
        .assert_error(400, "bad_request");
    let message = server
        .call(
            Method::DELETE,
            &format!("{files}?path=/&recursive=true"),
            None,
        )
        .await
        .assert_error(400, "bad_request");
    assert!(message.contains('/'), "{message}");
    // Path rules live in one place, above every provider.
    for body in [
        json!({"old_path": "/", "new_path": "/elsewhere"}),
        json!({"old_path": "/keep/me.txt", "new_path": "/"}),
        json!({"old_path": "keep/me.txt", "new_path": "/x"}),
    ] {
        server
            .post(&format!("{files}/move"), body)
            .await
            .assert_error(400, "bad_request");
    }
    let message = server
        .get(&format!("{files}/glob?pattern=/keep/../*"))
        .await
        .assert_error(400, "bad_request");
    assert!(message.contains("pattern"), "{message}");
    server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "true", "workdir": "relative"}),
        )
        .await
        .assert_error(400, "bad_request");
    assert_eq!(
        server
            .get(&format!("{files}?path=/keep/me.txt"))
            .await
            .status,
        200,
        "nothing was moved"
    );
    // A symlink pointing outside the sandbox cannot be followed by the file API.
    server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "ln -s /etc etc-link; ln -s ../../.. up"}),
        )
        .await;
    server
        .get(&format!("{files}?path=/etc-link/passwd"))
        .await
        .assert_error(400, "bad_request");
    server
        .get(&format!("{files}/list?path=/up"))
        .await
        .assert_error(400, "bad_request");
    assert!(server
        .post(&files, json!({"path": "/etc-link/evil", "content": "x"}))
        .await
        .status
        .is_client_error());
    assert!(!std::path::Path::new("/etc/evil").exists());
    // `..` stays inside: it resolves at the sandbox root.
    server
        .get(&format!("{files}?path=/../../../etc/passwd"))
        .await
        .assert_error(404, "not_found");
    assert_eq!(
        raw(&server, &format!("{files}?path=/keep/me.txt")).await.1,
        b"kept"
    );
    server.delete(&format!("/sandboxes/{id}")).await;
    server
        .post(&files, json!({"path": "/x", "content": "x"}))
        .await
        .assert_error(409, "conflict");
    server.shutdown().await;
}

/// A download resumes with `Range` (decisions §9): 206 with the part and `Content-Range`,
/// 416 naming the size when no byte is in range, 200 with `Accept-Ranges` otherwise.
pub(crate) async fn assert_ranges(server: &TestServer, id: &str, dir: &str) {
    let content: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let path = format!("{dir}/ranged.bin");
    let files = format!("/sandboxes/{id}/files");
    let written = server
        .post(
            &files,
            json!({
                "path": path,
                "content": base64::engine::general_purpose::STANDARD.encode(&content),
                "encoding": "base64",
            }),
        )
        .await;
    assert_eq!(written.status, 200, "{}", written.body);
    let get = |range: Option<&str>| {
        let mut request = server
            .client
            .get(server.url(&format!("{files}?path={path}")));
        if let Some(range) = range {
            request = request.header("range", range);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_owned())
            };
            let (range, length, accept) = (
                header("content-range"),
                header("content-length"),
                header("accept-ranges"),
            );
            let body = response.bytes().await.unwrap().to_vec();
            (status, range, length, accept, body)
        }
    };
    let (status, range, _, accept, body) = get(None).await;
    assert_eq!(
        (status, range, accept.as_deref()),
        (200, None, Some("bytes"))
    );
    assert!(body == content);
    let size = content.len();
    for (header, start, end) in [
        ("bytes=0-0", 0, 0),
        ("bytes=100-65635", 100, 65635),
        ("bytes=99990-", 99_990, size - 1),
        ("bytes=-10", size - 10, size - 1),
        ("bytes=50000-999999", 50_000, size - 1),
    ] {
        let (status, range, length, _, body) = get(Some(header)).await;
        assert_eq!(status, 206, "{header}");
        assert_eq!(
            range.unwrap(),
            format!("bytes {start}-{end}/{size}"),
            "{header}"
        );
        assert_eq!(length.unwrap(), (end - start + 1).to_string(), "{header}");
        assert!(
            body == content[start..=end],
            "{header}: {} bytes",
            body.len()
        );
    }
    let (status, range, _, _, body) = get(Some("bytes=100000-")).await;
    assert_eq!((status, range.unwrap()), (416, format!("bytes */{size}")));
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["code"], "range_not_satisfiable");
    let (status, ..) = get(Some("bytes=5-1")).await;
    assert_eq!(status, 200, "a range that is not one is ignored");
    let directory = server
        .client
        .get(server.url(&format!("{files}?path={dir}")))
        .header("range", "bytes=0-1")
        .send()
        .await
        .unwrap();
    assert_eq!(directory.status(), 400);
}

#[tokio::test]
async fn downloads_resume_with_a_range() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    assert_ranges(&server, &id, "/data").await;
    server.shutdown().await;
}

/// A deterministic pseudo-random block of 1 MiB, different for every `index`.
fn block(index: u64) -> bytes::Bytes {
    let mut state = index.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(1 << 20);
    while out.len() < 1 << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    bytes::Bytes::from(out)
}

/// `mib` MiB of known content as a request body, failing after `cut_after` MiB if given.
fn known_body(mib: u64, cut_after: Option<u64>) -> reqwest::Body {
    let blocks = futures::stream::iter(0..mib).map(move |i| {
        if cut_after == Some(i) {
            Err(std::io::Error::other("the client went away"))
        } else {
            Ok(block(i))
        }
    });
    reqwest::Body::wrap_stream(blocks)
}

fn digest_of(mib: u64) -> Vec<u8> {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for i in 0..mib {
        hash.update(block(i));
    }
    hash.finalize().to_vec()
}

async fn put(
    server: &TestServer,
    url: &str,
    body: reqwest::Body,
    length: Option<u64>,
) -> (u16, serde_json::Value) {
    let mut request = server.client.put(server.url(url)).body(body);
    if let Some(length) = length {
        request = request.header("content-length", length);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.json().await.unwrap_or(serde_json::Value::Null);
            (status, body)
        }
        // The server may answer 413 and close before the client finished sending.
        Err(err) => (0, json!({"client_error": err.to_string()})),
    }
}

/// Streamed uploads (decisions §9) on a server with `server.max_body_bytes` 1 MiB and
/// `server.max_upload_bytes` 8 MiB: not bounded by the first, refused with 413 over the second
/// (announced or not), and a refused or broken-off upload leaves the old file as it was.
pub(crate) async fn assert_streamed_uploads(server: &TestServer, id: &str, dir: &str) {
    let files = format!("/sandboxes/{id}/files");
    let target = format!("{dir}/up/data.bin");
    let (status, body) = put(
        server,
        &format!("{files}?path={target}&mode=0600"),
        known_body(4, None),
        Some(4 << 20),
    )
    .await;
    assert_eq!(
        (status, &body),
        (200, &json!({"status": "written", "size": 4 << 20}))
    );
    let (status, read, _) = raw(server, &format!("{files}?path={target}")).await;
    assert_eq!(status, 200);
    use sha2::Digest;
    assert_eq!(sha2::Sha256::digest(&read).to_vec(), digest_of(4));
    let stat = server.get(&format!("{files}/stat?path={target}")).await;
    assert_eq!(
        (stat.body["mode"].as_str(), stat.body["size"].as_u64()),
        (Some("0600"), Some(4 << 20))
    );
    // Chunked (no Content-Length) works the same.
    let (status, body) = put(
        server,
        &format!("{files}?path={target}"),
        known_body(3, None),
        None,
    )
    .await;
    assert_eq!(
        (status, body["size"].as_u64()),
        (200, Some(3 << 20)),
        "{body}"
    );
    server
        .post(&files, json!({"path": target, "content": "old"}))
        .await;
    // Over the limit, announced: refused before a byte is read.
    let (status, body) = put(
        server,
        &format!("{files}?path={target}"),
        known_body(9, None),
        Some(9 << 20),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["code"], "payload_too_large");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("server.max_upload_bytes"),
        "{body}"
    );
    // The limit bounds a tar body too.
    let (status, body) = put(
        server,
        &format!("{files}/archive?path={dir}/tree"),
        known_body(9, None),
        Some(9 << 20),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );
    // Over the limit, chunked: refused when the count passes it.
    let (status, body) = put(
        server,
        &format!("{files}?path={target}"),
        known_body(9, None),
        None,
    )
    .await;
    assert!(status == 413 || status == 0, "{status} {body}");
    // Cut in the middle, announced and not.
    let (status, _) = put(
        server,
        &format!("{files}?path={target}"),
        known_body(4, Some(2)),
        Some(4 << 20),
    )
    .await;
    assert_ne!(status, 200);
    let (status, _) = put(
        server,
        &format!("{files}?path={target}"),
        known_body(4, Some(2)),
        None,
    )
    .await;
    assert_ne!(status, 200);
    // A file never written is not left half there either.
    let (status, _) = put(
        server,
        &format!("{files}?path={dir}/up/new.bin"),
        known_body(4, Some(2)),
        Some(4 << 20),
    )
    .await;
    assert_ne!(status, 200);
    crate::harness::wait_for(
        "the old file, alone",
        std::time::Duration::from_secs(60),
        || async {
            let (status, read, _) = raw(server, &format!("{files}?path={target}")).await;
            let list = server.get(&format!("{files}/list?path={dir}/up")).await;
            let names: Vec<&str> = list
                .body
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap())
                .collect();
            (status, read.as_slice(), names) == (200, b"old".as_slice(), vec!["data.bin"])
        },
    )
    .await;
    let refused = server
        .client
        .put(server.url(&format!("{files}?path={target}&mode=99")))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let root = server
        .client
        .put(server.url(&format!("{files}?path=/")))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(root.status(), 400);
}

/// The largest resident size of this process (the server runs in it) over a transfer.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Samples the resident size until dropped; `peak` is the largest seen.
struct RssWatch {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssWatch {
    fn start() -> Self {
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(rss_kib()));
        let seen = std::sync::Arc::clone(&peak);
        let task = tokio::spawn(async move {
            loop {
                seen.fetch_max(rss_kib(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        });
        RssWatch { peak, task }
    }

    fn peak(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A 2 GiB file goes up with `PUT /files` and comes back with `GET /files` byte for byte, and
/// the process (server and client) grows by less than 64 MiB meanwhile.
pub(crate) async fn assert_two_gib_round_trip(server: &TestServer, id: &str, path: &str) {
    const MIB: u64 = 2048;
    let files = format!("/sandboxes/{id}/files");
    let before = rss_kib();
    let watch = RssWatch::start();
    let (status, body) = put(
        server,
        &format!("{files}?path={path}"),
        known_body(MIB, None),
        Some(MIB << 20),
    )
    .await;
    assert_eq!(
        (status, body["size"].as_u64()),
        (200, Some(MIB << 20)),
        "{body}"
    );
    let response = server
        .client
        .get(server.url(&format!("{files}?path={path}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        total += chunk.len() as u64;
        hash.update(&chunk);
    }
    assert_eq!(total, MIB << 20);
    assert!(
        hash.finalize().to_vec() == digest_of(MIB),
        "the download differs from the upload"
    );
    let growth_mib = watch.peak().saturating_sub(before) / 1024;
    assert!(
        growth_mib < 64,
        "a 2 GiB upload and download grew the process by {growth_mib} MiB"
    );
    // A resumed download of the tail matches too.
    let tail = server
        .client
        .get(server.url(&format!("{files}?path={path}")))
        .header("range", format!("bytes={}-", (MIB - 1) << 20))
        .send()
        .await
        .unwrap();
    assert_eq!(tail.status(), 206);
    assert!(tail.bytes().await.unwrap() == block(MIB - 1));
}

#[tokio::test]
async fn streamed_uploads_are_bounded_and_whole() {
    let server = TestServer::start_with(|c| {
        c.server.max_body_bytes = 1 << 20;
        c.server.max_upload_bytes = 8 << 20;
    })
    .await;
    let id = sandbox(&server).await;
    let mut events = server.events("?types=file.written", None).await;
    assert_streamed_uploads(&server, &id, "/data").await;
    let written = events
        .until("file.written", std::time::Duration::from_secs(60))
        .await;
    assert_eq!(
        written.last().unwrap().data["data"]["size"],
        4 << 20,
        "file.written carries the size"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn two_gib_up_and_down_in_flat_memory() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    assert_two_gib_round_trip(&server, &id, "/big/two.bin").await;
    server.shutdown().await;
}

/// One raw tar header naming `name` exactly (builders refuse `..` and absolute names).
fn raw_entry(name: &str, kind: tar::EntryType, link: &str, content: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_old();
    header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    header.set_entry_type(kind);
    header.set_size(content.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(content);
    bytes.resize(bytes.len().div_ceil(512) * 512, 0);
    bytes
}

/// Directory archives (decisions §9): `GET /files/archive` packs a tree (names relative to
/// it, symlinks kept), `PUT /files/archive` recreates it elsewhere, and archives with escaping
/// entries are refused naming the entry, with nothing outside the directory touched.
pub(crate) async fn assert_archives(server: &TestServer, id: &str, dir: &str) {
    let files = format!("/sandboxes/{id}/files");
    let binary: Vec<u8> = (0..70_000u32).map(|i| (i * 13 % 256) as u8).collect();
    for (path, content) in [("a.txt", b"alpha".to_vec()), ("sub/b.bin", binary.clone())] {
        let written = server
            .post(
                &files,
                json!({
                    "path": format!("{dir}/src/{path}"),
                    "content": base64::engine::general_purpose::STANDARD.encode(&content),
                    "encoding": "base64",
                }),
            )
            .await;
        assert_eq!(written.status, 200, "{}", written.body);
    }
    let linked = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "ln -s a.txt l", "workdir": format!("{dir}/src")}),
        )
        .await;
    assert_eq!(linked.body["exit_code"], 0, "{}", linked.body);
    let (status, packed, content_type) =
        raw(server, &format!("{files}/archive?path={dir}/src")).await;
    assert_eq!((status, content_type.as_str()), (200, "application/x-tar"));
    let mut seen = Vec::new();
    let mut archive = tar::Archive::new(packed.as_slice());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let kind = entry.header().entry_type();
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut body).unwrap();
        let link = entry
            .link_name()
            .unwrap()
            .map(|l| l.to_string_lossy().into_owned());
        seen.push((
            name.trim_start_matches("./")
                .trim_end_matches('/')
                .to_owned(),
            kind,
            link,
            body,
        ));
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = seen.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        names,
        ["", "a.txt", "l", "sub", "sub/b.bin"],
        "names are relative to the directory"
    );
    assert_eq!(seen[1].3, b"alpha");
    assert_eq!(
        (seen[2].1, seen[2].2.as_deref()),
        (tar::EntryType::Symlink, Some("a.txt"))
    );
    assert!(seen[3].1.is_dir());
    assert!(seen[4].3 == binary);
    // Recreated elsewhere (the directory is created), whole.
    let put = server
        .client
        .put(server.url(&format!("{files}/archive?path={dir}/copy/here")))
        .body(packed.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let answer: serde_json::Value = put.json().await.unwrap();
    assert_eq!(answer, json!({"status": "extracted", "entries": 5}));
    let (_, copied, _) = raw(server, &format!("{files}?path={dir}/copy/here/sub/b.bin")).await;
    assert!(copied == binary);
    let (_, through_link, _) = raw(server, &format!("{files}?path={dir}/copy/here/l")).await;
    assert_eq!(through_link, b"alpha");
    // Escaping archives: refused naming the entry; nothing lands outside.
    let end = vec![0u8; 1024];
    let good = raw_entry("fine.txt", tar::EntryType::Regular, "", b"fine");
    for (bad, named) in [
        (
            raw_entry("../x", tar::EntryType::Regular, "", b"escaped"),
            "../x",
        ),
        (
            raw_entry("/abs.txt", tar::EntryType::Regular, "", b"escaped"),
            "/abs.txt",
        ),
        (
            raw_entry("evil", tar::EntryType::Symlink, "../../..", b""),
            "evil",
        ),
        (raw_entry("hard", tar::EntryType::Link, "../x", b""), "hard"),
    ] {
        let body = [good.clone(), bad, end.clone()].concat();
        let refused = server
            .client
            .put(server.url(&format!("{files}/archive?path={dir}/m")))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 400, "{named}");
        let error: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(error["code"], "bad_request");
        assert!(
            error["message"].as_str().unwrap().contains(named),
            "{error}"
        );
    }
    for outside in [
        format!("{dir}/x"),
        "/abs.txt".to_owned(),
        format!("{dir}/m/evil"),
        format!("{dir}/m/hard"),
    ] {
        server
            .get(&format!("{files}/stat?path={outside}"))
            .await
            .assert_error(404, "not_found");
    }
    let (status, ..) = raw(server, &format!("{files}/archive?path={dir}/src/a.txt")).await;
    assert_eq!(status, 400, "a file is not a directory");
    let (status, ..) = raw(server, &format!("{files}/archive?path={dir}/none")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn directory_archives_round_trip_and_refuse_escapes() {
    let server = TestServer::start().await;
    let id = sandbox(&server).await;
    assert_archives(&server, &id, "/data").await;
    server.shutdown().await;
}
