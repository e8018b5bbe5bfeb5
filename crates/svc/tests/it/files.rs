//! The file API over HTTP.

use base64::Engine;
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
        .next(std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(event.data["type"], "file.written");
    assert_eq!(
        event.data["data"],
        json!({"path": "/app/hello.txt", "size": 7})
    );
    let event = events
        .next(std::time::Duration::from_secs(5))
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
