//! The shared harness: starts `svc` through `svc::start` on `127.0.0.1:0` with a fresh store in
//! a temporary directory, and offers small HTTP helpers. Later issues reuse it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use svc::{RunningServer, ShutdownReport};
use svc_core::config::Config;

/// A running server and what it needs.
pub struct TestServer {
    pub base: String,
    /// The E2B listener's base URL, when `e2b.enabled`.
    pub e2b: Option<String>,
    /// The node-to-node listener's base URL, when `worker.rpc.enabled`.
    pub rpc: Option<String>,
    /// The server's clock; TTL tests move it instead of sleeping.
    pub clock: Arc<svc_core::ManualClock>,
    pub client: reqwest::Client,
    server: Option<RunningServer>,
    pub dir: Arc<tempfile::TempDir>,
    pub config: Config,
}

/// A response: status, headers and the JSON body (`Value::Null` when not JSON).
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    /// Asserts an error reply with `status` and `code`; returns the message.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_schema("ErrorBody", &self.body);
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.body
        );
        assert_eq!(
            self.body["code"], code,
            "unexpected code; body: {}",
            self.body
        );
        let message = self.body["message"]
            .as_str()
            .expect("error message")
            .to_owned();
        assert!(!message.is_empty());
        message
    }
}

fn test_config(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.database.path = dir.join("svc.db").display().to_string();
    config.providers.mock.root_dir = dir.join("mock");
    config.providers.docker.enabled = false;
    config.server.port = 0;
    // Its own egress proxy port (docker tests enable docker): servers of other tests run at
    // the same time on the same bridge.
    config.providers.docker.egress_proxy_port = crate::cli::free_port();
    config
}

static LOGS: std::sync::Once = std::sync::Once::new();

impl TestServer {
    /// A server on the default configuration (fresh store, mock provider).
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// A server whose configuration `adjust` changes first.
    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Self {
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        let mut config = test_config(dir.path());
        adjust(&mut config);
        let clock = Arc::new(svc_core::ManualClock::new(svc_core::Clock::now(
            &svc_core::clock::SystemClock,
        )));
        Self::start_in(dir, config, clock).await
    }

    async fn start_in(
        dir: Arc<tempfile::TempDir>,
        config: Config,
        clock: Arc<svc_core::ManualClock>,
    ) -> Self {
        LOGS.call_once(|| {
            let _ = tracing_subscriber_init();
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind ephemeral port");
        // Every JSON answer of every test's server is checked against the OpenAPI document: a
        // mismatch becomes a 500 naming it (svc_api::check_responses).
        svc_api::check_responses();
        let server = svc::start_with_clock(config.clone(), listener, clock.clone())
            .await
            .expect("server starts");
        TestServer {
            base: format!("http://{}", server.addr),
            e2b: server.e2b_addr.map(|addr| format!("http://{addr}")),
            rpc: server.rpc_addr.map(|addr| format!("http://{addr}")),
            clock,
            client: reqwest::Client::new(),
            server: Some(server),
            dir,
            config,
        }
    }

    /// Shuts down and starts again on the same directory (and so the same store).
    pub async fn restart(mut self) -> Self {
        let report = self
            .server
            .take()
            .expect("running")
            .shutdown()
            .await
            .expect("clean shutdown");
        assert!(report.drained);
        Self::start_in(
            Arc::clone(&self.dir),
            self.config.clone(),
            Arc::clone(&self.clock),
        )
        .await
    }

    /// Shuts down gracefully.
    pub async fn shutdown(mut self) -> ShutdownReport {
        self.server
            .take()
            .expect("running")
            .shutdown()
            .await
            .expect("clean shutdown")
    }

    /// The control plane, for tests that publish or inspect directly.
    pub fn plane(&self) -> &svc_control::ControlPlane {
        self.server
            .as_ref()
            .expect("the server is running")
            .control_plane()
    }

    /// The directory of the mock provider's sandboxes.
    pub fn mock_root(&self) -> PathBuf {
        self.config.providers.mock.root_dir.clone()
    }

    /// The full URL of an API path (`/sandboxes`).
    pub fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    /// Sends a request with an optional JSON body.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        let mut request = self.client.request(method, self.url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        Self::reply(request.send().await.expect("request sent")).await
    }

    /// Sends a request with extra headers (credentials) and an optional JSON body.
    pub async fn call_as(
        &self,
        headers: &[(&str, &str)],
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut request = self.client.request(method, self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Self::reply(request.send().await.expect("request sent")).await
    }

    /// Sends raw bytes as the body.
    pub async fn call_raw(
        &self,
        method: Method,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> Reply {
        let response = self
            .client
            .request(method, self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request sent");
        Self::reply(response).await
    }

    pub async fn reply(response: reqwest::Response) -> Reply {
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.call(Method::DELETE, path, None).await
    }

    /// Spawns with `body`, asserting 201; returns the sandbox.
    pub async fn spawn(&self, body: Value) -> Value {
        let reply = self.post("/sandboxes", body).await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "spawn failed: {}",
            reply.body
        );
        reply.body
    }

    /// IDs of the listed sandboxes for a query string (`?state=all`).
    pub async fn listed_ids(&self, query: &str) -> Vec<String> {
        let reply = self.get(&format!("/sandboxes{query}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        reply
            .body
            .as_array()
            .expect("array")
            .iter()
            .inspect(|s| assert_schema("Sandbox", s))
            .map(|s| s["id"].as_str().expect("id").to_owned())
            .collect()
    }

    /// Opens `GET /events` with a query string; the subscription is live once this returns.
    pub async fn events(&self, query: &str, last_event_id: Option<&str>) -> SseClient {
        self.events_as(&[], query, last_event_id).await
    }

    /// [`TestServer::events`] with extra headers (credentials).
    pub async fn events_as(
        &self,
        headers: &[(&str, &str)],
        query: &str,
        last_event_id: Option<&str>,
    ) -> SseClient {
        let mut request = self.client.get(self.url(&format!("/events{query}")));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.expect("events request");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        SseClient {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }
}

fn tracing_subscriber_init() -> Result<(), ()> {
    // Quiet by default; RUST_LOG=debug shows the server's logs for a failing test.
    if std::env::var_os("RUST_LOG").is_some() {
        svc::init_test_logging();
    }
    Ok(())
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct SseMessage {
    pub id: Option<String>,
    pub data: Value,
}

/// Reads server-sent events from a response body.
pub struct SseClient {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl SseClient {
    /// The next event (comments skipped), or `None` at the deadline or end of stream.
    pub async fn next(&mut self, within: Duration) -> Option<SseMessage> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        id = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                let data = serde_json::from_str(&data).expect("event data is JSON");
                return Some(SseMessage { id, data });
            }
            let remaining = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(remaining, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return None,
            }
        }
    }

    /// Collects events until one of `event_type` arrives; panics at the deadline.
    pub async fn until(&mut self, event_type: &str, within: Duration) -> Vec<SseMessage> {
        let mut seen = Vec::new();
        let deadline = Instant::now() + within;
        loop {
            let remaining = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or_else(|| panic!("no {event_type} event in time; saw {seen:?}"));
            let Some(event) = self.next(remaining).await else {
                panic!("no {event_type} event in time; saw {seen:?}");
            };
            let done = event.data["type"] == event_type;
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}

/// Waits for `condition` with a deadline.
pub async fn wait_for<F, Fut>(what: &str, within: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Checks a response object against a component schema of the OpenAPI document (the same
/// check every JSON answer gets, `svc_api::check_responses`).
#[track_caller]
pub fn assert_schema(schema_name: &str, value: &Value) {
    if let Err(problem) = svc_api::conforms_to(schema_name, value) {
        panic!("{schema_name}: {problem} in {value}");
    }
}
