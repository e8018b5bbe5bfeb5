//! Previews (decisions §18) on the mock provider, whose sandboxes are host processes: their
//! ports are the host's loopback ones. A web server started inside the sandbox (python's
//! `http.server`), and an echo server of the test's own (HTTP and WebSocket) on a port of the
//! same loopback, reached through the proxy by path and by host name; preview tokens; 502 when
//! nothing listens; 1,000 concurrent requests.

use std::time::Duration;

use axum::extract::ws::{Message as AxumMessage, WebSocketUpgrade};
use axum::http::{HeaderMap, Method as AxumMethod, Uri};
use axum::routing::{any, get};
use futures::{SinkExt, StreamExt};
use reqwest::Method;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::harness::{wait_for, TestServer};

use crate::cli::free_port;

/// An echo server on `port`: any request answers JSON with its method, path and query,
/// headers, body length and the connection it came on (`peer`); `/ws` echoes WebSocket messages; `/missing` is a plain-text 404.
async fn echo_server(port: u16) {
    async fn echo(
        axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
        method: AxumMethod,
        uri: Uri,
        headers: HeaderMap,
        body: axum::body::Bytes,
    ) -> axum::Json<Value> {
        let headers: serde_json::Map<String, Value> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(v.to_str().unwrap_or(""))))
            .collect();
        axum::Json(json!({
            "method": method.as_str(),
            "uri": uri.to_string(),
            "headers": headers,
            "body_len": body.len(),
            "body_sum": body.iter().map(|b| u64::from(*b)).sum::<u64>(),
            "peer": peer.to_string(),
        }))
    }
    async fn ws(upgrade: WebSocketUpgrade) -> axum::response::Response {
        upgrade.on_upgrade(|mut socket| async move {
            while let Some(Ok(message)) = socket.recv().await {
                let reply = match message {
                    AxumMessage::Text(text) => {
                        AxumMessage::Text(format!("echo:{}", text.as_str()).into())
                    }
                    AxumMessage::Binary(bytes) => AxumMessage::Binary(bytes),
                    AxumMessage::Close(_) => break,
                    _ => continue,
                };
                if socket.send(reply).await.is_err() {
                    break;
                }
            }
        })
    }
    let app = axum::Router::new()
        .route("/ws", get(ws))
        .route(
            "/missing",
            get(|| async { (axum::http::StatusCode::NOT_FOUND, "no such page here") }),
        )
        .fallback(any(echo))
        .layer(axum::extract::DefaultBodyLimit::disable());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
}

async fn mock_sandbox(server: &TestServer) -> String {
    server.spawn(json!({"provider": "mock"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn proxy_path(id: &str, port: u16, rest: &str) -> String {
    format!("/sandboxes/{id}/proxy/{port}{rest}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_server_in_a_sandbox_is_reached_by_path_and_by_host() {
    let server = TestServer::start().await;
    let id = mock_sandbox(&server).await;
    let written = server
        .post(
            &format!("/sandboxes/{id}/files"),
            json!({"path": "/site/index.html", "content": "<h1>hello from the sandbox</h1>"}),
        )
        .await;
    assert!(written.status.is_success(), "{}", written.body);
    let port = free_port();
    let started = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": format!("exec python3 -m http.server {port} --bind 127.0.0.1 --directory site"), "background": true}),
        )
        .await;
    assert_eq!(started.status, 202, "{}", started.body);
    let page = server.url(&proxy_path(&id, port, "/index.html"));
    wait_for(
        "the sandbox's web server",
        Duration::from_secs(20),
        || async {
            server
                .client
                .get(&page)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    let by_path = server.client.get(&page).send().await.unwrap();
    assert_eq!(by_path.status(), 200);
    assert_eq!(
        by_path.text().await.unwrap(),
        "<h1>hello from the sandbox</h1>"
    );

    // By host name: the server's own address, with the preview host in the Host header.
    let by_host = server
        .client
        .get(format!("{}/index.html", server.base))
        .header("host", format!("{port}-{id}.localhost:7423"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_host.status(), 200);
    assert_eq!(
        by_host.text().await.unwrap(),
        "<h1>hello from the sandbox</h1>"
    );

    // The sandbox's own errors pass through untouched.
    let missing = server
        .client
        .get(server.url(&proxy_path(&id, port, "/nope.html")))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(!missing.text().await.unwrap().contains("\"code\""));
    assert_eq!(server.delete(&format!("/sandboxes/{id}")).await.status, 200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_streams_requests_headers_and_websockets() {
    let server = TestServer::start().await;
    let id = mock_sandbox(&server).await;
    let port = free_port();
    echo_server(port).await;

    let echoed: Value = server
        .client
        .get(server.url(&proxy_path(&id, port, "/a/b?x=1&y=two")))
        .header("x-custom", "kept")
        .header("x-api-key", "secret-not-forwarded")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(echoed["method"], "GET");
    assert_eq!(echoed["uri"], "/a/b?x=1&y=two");
    assert_eq!(echoed["headers"]["x-custom"], "kept");
    assert_eq!(echoed["headers"]["host"], format!("localhost:{port}"));
    assert!(echoed["headers"].get("x-api-key").is_none(), "{echoed}");

    // The path form without a trailing path is the root.
    let root: Value = server
        .client
        .get(server.url(&proxy_path(&id, port, "")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(root["uri"], "/");

    // Requests one after another reuse the proxy's connection to the port (by path and host).
    let mut peers = Vec::new();
    for host in [None, Some(format!("{port}-{id}.localhost")), None] {
        let request = match &host {
            None => server
                .client
                .get(server.url(&proxy_path(&id, port, "/again"))),
            Some(host) => server
                .client
                .get(format!("{}/again", server.base))
                .header("host", host),
        };
        let echoed: Value = request.send().await.unwrap().json().await.unwrap();
        peers.push(echoed["peer"].clone());
    }
    assert!(
        peers.iter().all(|p| p == &root["peer"]),
        "{peers:?} vs {}",
        root["peer"]
    );

    // A 20 MB upload streams through (past server.max_body_bytes would not matter either).
    let body: Vec<u8> = (0..20 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let sum: u64 = body.iter().map(|b| u64::from(*b)).sum();
    let posted: Value = server
        .client
        .put(server.url(&proxy_path(&id, port, "/upload")))
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(posted["method"], "PUT");
    assert_eq!(posted["body_len"], 20 * 1024 * 1024);
    assert_eq!(posted["body_sum"], sum);

    // A WebSocket echo through the proxy, by path and by host.
    let ws_url = format!(
        "{}/api/v1/sandboxes/{id}/proxy/{port}/ws",
        server.base.replace("http://", "ws://")
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
    for i in 0..3 {
        socket.send(Message::text(format!("m{i}"))).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(reply.into_text().unwrap().as_str(), format!("echo:m{i}"));
    }
    socket.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    let reply = socket.next().await.unwrap().unwrap();
    assert_eq!(reply.into_data().as_ref(), &[1u8, 2, 3]);
    socket.close(None).await.unwrap();

    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
            "{}/ws",
            server.base.replace("http://", "ws://")
        ))
        .unwrap();
    request
        .headers_mut()
        .insert("host", format!("{port}-{id}.localhost").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    socket.send(Message::text("by host")).await.unwrap();
    let reply = socket.next().await.unwrap().unwrap();
    assert_eq!(reply.into_text().unwrap().as_str(), "echo:by host");

    // Nothing listening: 502 bad_gateway, as JSON.
    let closed = free_port();
    server
        .get(&proxy_path(&id, closed, "/"))
        .await
        .assert_error(502, "bad_gateway");
    // A port that is not one: 400; an unknown sandbox: 404.
    server
        .get(&proxy_path(&id, 0, "/"))
        .await
        .assert_error(400, "bad_request");
    server
        .get(&format!("/sandboxes/{id}/proxy/http/"))
        .await
        .assert_error(400, "bad_request");
    server
        .get(&proxy_path("sb-0000000000000000", port, "/"))
        .await
        .assert_error(404, "not_found");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_preview_requests_are_served() {
    let server = TestServer::start().await;
    let id = mock_sandbox(&server).await;
    let port = free_port();
    echo_server(port).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    let requests = (0..1000).map(|i| {
        let client = client.clone();
        let url = server.url(&proxy_path(&id, port, &format!("/n/{i}")));
        async move {
            let reply = client.get(url).send().await?;
            let status = reply.status();
            let body: Value = reply.json().await?;
            Ok::<_, reqwest::Error>((status, body["uri"].as_str().unwrap_or("").to_owned()))
        }
    });
    let results = futures::stream::iter(requests)
        .buffer_unordered(1000)
        .collect::<Vec<_>>()
        .await;
    let mut ok = 0;
    for result in results {
        let (status, uri) = result.expect("request served");
        assert_eq!(status, 200, "{uri}");
        assert!(uri.starts_with("/n/"));
        ok += 1;
    }
    assert_eq!(ok, 1000);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_tokens_open_one_port_of_one_sandbox_until_they_expire() {
    const KEY: &str = "preview-test-api-key-0123456789abcdef";
    let server = TestServer::start_with(|c| {
        c.auth.enabled = true;
        c.auth.api_key = KEY.into();
    })
    .await;
    let authed = |method: Method, path: String, body: Option<Value>| {
        let server = &server;
        async move {
            server
                .call_as(&[("X-API-Key", KEY)], method, &path, body)
                .await
        }
    };
    let spawned = authed(
        Method::POST,
        "/sandboxes".into(),
        Some(json!({"provider": "mock", "ttl": "10m"})),
    )
    .await;
    let id = spawned.body["id"].as_str().unwrap().to_owned();
    let other = authed(
        Method::POST,
        "/sandboxes".into(),
        Some(json!({"provider": "mock"})),
    )
    .await
    .body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let port = free_port();
    echo_server(port).await;
    let page = proxy_path(&id, port, "/page");

    // Without credentials or token: 401; with credentials: through.
    server.get(&page).await.assert_error(401, "unauthorized");
    let with_key = authed(Method::GET, page.clone(), None).await;
    assert_eq!(with_key.status, 200, "{}", with_key.body);

    // Issuing: port and ttl are checked.
    let issue = |body: Value| {
        authed(
            Method::POST,
            format!("/sandboxes/{id}/preview-tokens"),
            Some(body),
        )
    };
    issue(json!({"port": 0, "ttl": "1m"}))
        .await
        .assert_error(400, "bad_request");
    issue(json!({"port": port, "ttl": "0s"}))
        .await
        .assert_error(400, "bad_request");
    issue(json!({"port": port, "ttl": "11m"}))
        .await
        .assert_error(400, "bad_request");
    issue(json!({"port": port}))
        .await
        .assert_error(400, "bad_request");
    server
        .post(
            &format!("/sandboxes/{id}/preview-tokens"),
            json!({"port": port, "ttl": "1m"}),
        )
        .await
        .assert_error(401, "unauthorized");
    let grant = issue(json!({"port": port, "ttl": "5m"})).await;
    assert_eq!(grant.status, 200, "{}", grant.body);
    crate::harness::assert_schema("PreviewToken", &grant.body);
    let token = grant.body["token"].as_str().unwrap().to_owned();
    assert_eq!(grant.body["url"], format!("http://{port}-{id}.localhost/"));
    assert!(grant.body["expires_at"].is_string());

    // The token works in the query (and is not passed on), then as the cookie it set.
    let first = server
        .client
        .get(server.url(&format!("{page}?a=1&svc_preview_token={token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let cookie = first.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.starts_with(&format!("svc_preview_token={token}")),
        "{cookie}"
    );
    assert!(
        cookie.contains(&format!("Path=/api/v1/sandboxes/{id}/proxy/{port}/")),
        "{cookie}"
    );
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    let echoed: Value = first.json().await.unwrap();
    assert_eq!(echoed["uri"], "/page?a=1");
    let by_cookie = server
        .client
        .get(server.url(&page))
        .header("cookie", format!("theme=dark; svc_preview_token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_cookie.status(), 200);
    let echoed: Value = by_cookie.json().await.unwrap();
    assert_eq!(echoed["headers"]["cookie"], "theme=dark", "{echoed}");
    // By host name too.
    let by_host = server
        .client
        .get(format!("{}/x?svc_preview_token={token}", server.base))
        .header("host", format!("{port}-{id}.localhost"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_host.status(), 200);
    assert!(by_host.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Path=/;"));

    // Another port, another sandbox, garbage: 401.
    let wrong_port = proxy_path(&id, port + 1, &format!("/?svc_preview_token={token}"));
    server
        .get(&wrong_port)
        .await
        .assert_error(401, "unauthorized");
    let wrong_sandbox = proxy_path(&other, port, &format!("/?svc_preview_token={token}"));
    server
        .get(&wrong_sandbox)
        .await
        .assert_error(401, "unauthorized");
    server
        .get(&format!("{page}?svc_preview_token=not-a-token"))
        .await
        .assert_error(401, "unauthorized");

    // Past its expiry: 401.
    server.clock.advance(Duration::from_secs(6 * 60));
    let expired = server
        .get(&format!("{page}?svc_preview_token={token}"))
        .await;
    let message = expired.assert_error(401, "unauthorized");
    assert!(message.contains("expired"), "{message}");
    server.shutdown().await;
}

/// A busybox `httpd` started in sandbox `id` is reached through both preview forms, and a port
/// with nothing listening is 502 (docker and microVM tests).
pub async fn assert_previews_of_busybox_httpd(server: &TestServer, id: &str) {
    let written = server
        .post(
            &format!("/sandboxes/{id}/files"),
            json!({"path": "/tmp/www/index.html", "content": "served by busybox"}),
        )
        .await;
    assert!(written.status.is_success(), "{}", written.body);
    let started = server
        .post(
            &format!("/sandboxes/{id}/exec"),
            json!({"command": "exec httpd -f -p 8080 -h /tmp/www", "background": true}),
        )
        .await;
    assert_eq!(started.status, 202, "{}", started.body);
    let page = server.url(&format!("/sandboxes/{id}/proxy/8080/index.html"));
    wait_for("busybox httpd", Duration::from_secs(20), || async {
        server
            .client
            .get(&page)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    let by_path = server.client.get(&page).send().await.unwrap();
    assert_eq!(by_path.text().await.unwrap(), "served by busybox");
    let by_host = server
        .client
        .get(format!("{}/index.html", server.base))
        .header("host", format!("8080-{id}.localhost"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_host.status(), 200);
    assert_eq!(by_host.text().await.unwrap(), "served by busybox");
    server
        .get(&format!("/sandboxes/{id}/proxy/8081/"))
        .await
        .assert_error(502, "bad_gateway");
}
