//! The E2B listener's wire format, black-box over HTTP (decisions §20): E2B's REST answers and
//! error bodies, connect-rpc unary and streaming framing, routing by `E2b-Sandbox-Id`,
//! sandbox access tokens with authentication, and svc's governance applying unchanged. The
//! unmodified SDKs run against it in `clients/e2b` (see sdks.rs).

use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::TestServer;

const API_KEY: &str = "e2b-api-key-0123456789abcdef0123";

async fn e2b_server(adjust: impl FnOnce(&mut svc_core::config::Config)) -> (TestServer, String) {
    let server = TestServer::start_with(|c| {
        c.e2b.enabled = true;
        c.e2b.port = 0;
        adjust(c);
    })
    .await;
    let e2b = server.e2b.clone().expect("the E2B listener runs");
    (server, e2b)
}

/// One connect-rpc envelope.
fn envelope(flags: u8, json: &Value) -> Vec<u8> {
    let payload = json.to_string().into_bytes();
    let mut framed = vec![flags];
    framed.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(&payload);
    framed
}

/// The envelopes of a streamed answer: (flags, JSON).
fn envelopes(mut body: &[u8]) -> Vec<(u8, Value)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        out.push((
            body[0],
            serde_json::from_slice(&body[5..5 + length]).unwrap(),
        ));
        body = &body[5 + length..];
    }
    assert!(body.is_empty(), "a torn envelope");
    out
}

async fn create(
    client: &reqwest::Client,
    e2b: &str,
    key: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = client.post(format!("{e2b}/v2/sandboxes")).json(&body);
    if let Some(key) = key {
        request = request.header("X-API-KEY", key);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_e2b_listener_speaks_e2bs_rest_and_connect_rpc() {
    let (server, e2b) = e2b_server(|c| c.defaults.max_sandboxes = 1).await;
    let client = &server.client;
    let created = create(
        client,
        &e2b,
        None,
        json!({"templateID": "base", "timeout": 60, "metadata": {"a": "1"}, "envVars": {"E": "x"}}),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let body: Value = created.json().await.unwrap();
    let id = body["sandboxID"].as_str().unwrap().to_owned();
    assert_eq!(body["templateID"], "base");
    assert_eq!(body["envdVersion"], "0.5.7");
    assert!(body["clientID"].is_string());
    assert!(
        body.get("envdAccessToken").is_none(),
        "no token without authentication"
    );
    // The sandbox is svc's own: its API and events see it, its TTL is E2B's timeout.
    let own = server.get(&format!("/sandboxes/{id}")).await;
    assert_eq!(own.status, 200);
    assert_eq!(own.body["metadata"]["a"], "1");
    let lifetime = chrono::DateTime::parse_from_rfc3339(own.body["expires_at"].as_str().unwrap())
        .unwrap()
        - chrono::DateTime::parse_from_rfc3339(own.body["created_at"].as_str().unwrap()).unwrap();
    assert!((55..=65).contains(&lifetime.num_seconds()), "{lifetime}");
    // svc's quota applies to E2B's creates: E2B's error body, an integer code.
    let refused = create(client, &e2b, None, json!({"templateID": "base"})).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_e2b_error(refused, StatusCode::TOO_MANY_REQUESTS).await;
    // Every error on this listener is E2B's shape, axum's own rejections included.
    let malformed = client
        .post(format!("{e2b}/v2/sandboxes"))
        .header("content-type", "application/json")
        .body("{not json");
    let wrong_method = client.put(format!("{e2b}/v2/sandboxes"));
    let no_route = client.get(format!("{e2b}/no/such/route"));
    let bad_query = client.get(format!("{e2b}/v2/sandboxes?limit=many"));
    let missing = client.get(format!("{e2b}/sandboxes/sb-0000000000000000"));
    for (request, status) in [
        (malformed, StatusCode::BAD_REQUEST),
        (wrong_method, StatusCode::METHOD_NOT_ALLOWED),
        (no_route, StatusCode::NOT_FOUND),
        (bad_query, StatusCode::BAD_REQUEST),
        (missing, StatusCode::NOT_FOUND),
    ] {
        assert_e2b_error(request.send().await.unwrap(), status).await;
    }
    let detail: Value = client
        .get(format!("{e2b}/sandboxes/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for key in [
        "templateID",
        "sandboxID",
        "clientID",
        "startedAt",
        "endAt",
        "cpuCount",
        "memoryMB",
        "diskSizeMB",
        "state",
        "envdVersion",
    ] {
        assert!(detail.get(key).is_some(), "{key} missing from {detail}");
    }
    assert_eq!(detail["state"], "running");

    // In-sandbox calls: routed by E2b-Sandbox-Id, connect-rpc with the JSON codec.
    let rpc = |method: &str| client.post(format!("{e2b}/process.Process/{method}"));
    let unrouted = rpc("List").json(&json!({})).send().await.unwrap();
    assert_eq!(unrouted.status(), StatusCode::BAD_REQUEST);
    let unrouted: Value = unrouted.json().await.unwrap();
    assert_eq!(unrouted["code"], "invalid_argument");
    assert!(unrouted["message"]
        .as_str()
        .unwrap()
        .contains("E2b-Sandbox-Id"));
    let listed: Value = rpc("List")
        .header("E2b-Sandbox-Id", &id)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, json!({"processes": []}));
    let start = json!({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi $E; exit 7"]}, "stdin": false});
    let started = rpc("Start")
        .header("E2b-Sandbox-Id", &id)
        .header("Content-Type", "application/connect+json")
        .header("Connect-Protocol-Version", "1")
        .body(envelope(0, &start))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), StatusCode::OK);
    assert_eq!(
        started.headers()["content-type"],
        "application/connect+json"
    );
    let events = envelopes(&started.bytes().await.unwrap());
    assert!(
        events[0].1["event"]["start"]["pid"].as_u64().unwrap() > 0,
        "{events:?}"
    );
    let stdout: Vec<u8> = events
        .iter()
        .filter_map(|(_, e)| e["event"]["data"]["stdout"].as_str())
        .flat_map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
        .collect();
    assert_eq!(stdout, b"hi x\n", "the sandbox's env reaches the command");
    let end = &events[events.len() - 2];
    assert_eq!(end.1["event"]["end"]["exitCode"], 7);
    assert_eq!(
        events.last().unwrap(),
        &(2, json!({})),
        "the end-stream envelope"
    );
    // A stream's error comes in its end-stream envelope with 200.
    let gone = rpc("Start")
        .header("E2b-Sandbox-Id", "sb-0000000000000000")
        .header("Content-Type", "application/connect+json")
        .body(envelope(0, &start))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), StatusCode::OK);
    let gone = envelopes(&gone.bytes().await.unwrap());
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].0, 2);
    assert_eq!(gone[0].1["error"]["code"], "unavailable");
    assert!(gone[0].1["error"]["message"]
        .as_str()
        .unwrap()
        .contains("was not found"));

    // Pause, a second pause (409), connect resumes (201), kill (204), then not found (404).
    let pause = |c: &reqwest::Client| c.post(format!("{e2b}/sandboxes/{id}/pause")).send();
    assert_eq!(
        pause(client).await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        server.get(&format!("/sandboxes/{id}")).await.body["state"],
        "paused"
    );
    let again = pause(client).await.unwrap();
    assert_e2b_error(again, StatusCode::CONFLICT).await;
    let resumed = client
        .post(format!("{e2b}/v2/sandboxes/{id}/connect"))
        .json(&json!({"timeout": 30}))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::CREATED);
    // A timeout too large to be a time is refused with an answer, on both routes (decisions
    // §30: it panicked the handler and dropped the connection).
    for route in [
        format!("{e2b}/v2/sandboxes/{id}/connect"),
        format!("{e2b}/sandboxes/{id}/connect"),
    ] {
        let huge = client
            .post(&route)
            .json(&json!({"timeout": u64::MAX}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{route} answered nothing: {e}"));
        let body = assert_e2b_error(huge, StatusCode::BAD_REQUEST).await;
        assert!(body.to_string().contains("out of range"), "{body}");
    }
    let running = client
        .post(format!("{e2b}/v2/sandboxes/{id}/connect"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(running.status(), StatusCode::OK);
    let killed = client
        .delete(format!("{e2b}/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(killed.status(), StatusCode::NO_CONTENT);
    let killed = client
        .delete(format!("{e2b}/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(killed.status(), StatusCode::NOT_FOUND);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2b_templates_are_svc_templates_by_name() {
    let (server, e2b) = e2b_server(|_| {}).await;
    let template = json!({"name": "data-science", "image": "python:3.12", "memory_mb": 1024, "metadata": {"team": "ml"}});
    assert_eq!(server.post("/templates", template).await.status, 201);
    let created = create(
        &server.client,
        &e2b,
        None,
        json!({"templateID": "data-science", "timeout": 120, "metadata": {"run": "7"}}),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let body: Value = created.json().await.unwrap();
    assert_eq!(body["templateID"], "data-science");
    let id = body["sandboxID"].as_str().unwrap();
    let own = server.get(&format!("/sandboxes/{id}")).await.body;
    assert_eq!(own["template"], "data-science");
    assert_eq!(own["image"], "python:3.12");
    assert_eq!(own["memory_mb"], 1024);
    // The template's metadata and the create's both; E2B sees its own keys only.
    let detail: Value = server
        .client
        .get(format!("{e2b}/sandboxes/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["metadata"], json!({"team": "ml", "run": "7"}));
    assert_eq!(detail["templateID"], "data-science");
    // An unknown template name spawns the default image, and is shown as asked.
    let other: Value = create(
        &server.client,
        &e2b,
        None,
        json!({"templateID": "no-such-template"}),
    )
    .await
    .json()
    .await
    .unwrap();
    let other_id = other["sandboxID"].as_str().unwrap();
    assert_eq!(other["templateID"], "no-such-template");
    assert_eq!(
        server.get(&format!("/sandboxes/{other_id}")).await.body["image"],
        server.config.defaults.image
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_authentication_e2b_needs_the_api_key_and_sandboxes_their_access_token() {
    let (server, e2b) = e2b_server(|c| {
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
    })
    .await;
    let client = &server.client;
    let anonymous = create(client, &e2b, None, json!({"templateID": "base"})).await;
    assert_e2b_error(anonymous, StatusCode::UNAUTHORIZED).await;
    let mut tokens = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let created = create(client, &e2b, Some(API_KEY), json!({"templateID": "base"})).await;
        assert_eq!(created.status(), StatusCode::CREATED);
        let body: Value = created.json().await.unwrap();
        tokens.push(
            body["envdAccessToken"]
                .as_str()
                .expect("a token with authentication")
                .to_owned(),
        );
        ids.push(body["sandboxID"].as_str().unwrap().to_owned());
    }
    let list = |id: &str, token: Option<&str>| {
        let mut request = client
            .post(format!("{e2b}/process.Process/List"))
            .header("E2b-Sandbox-Id", id)
            .json(&json!({}));
        if let Some(token) = token {
            request = request.header("X-Access-Token", token);
        }
        request.send()
    };
    let without = list(&ids[0], None).await.unwrap();
    assert_eq!(without.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        without.json::<Value>().await.unwrap()["code"],
        "unauthenticated"
    );
    let foreign = list(&ids[0], Some(&tokens[1])).await.unwrap();
    assert_eq!(
        foreign.status(),
        StatusCode::UNAUTHORIZED,
        "a token opens its own sandbox only"
    );
    let own = list(&ids[0], Some(&tokens[0])).await.unwrap();
    assert_eq!(own.status(), StatusCode::OK);
    // The API key does not open in-sandbox services, and a token does not open the control plane.
    let by_key = client
        .get(format!("{e2b}/files?path=/x"))
        .header("E2b-Sandbox-Id", &ids[0])
        .header("X-API-KEY", API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(by_key.status(), StatusCode::UNAUTHORIZED);
    let by_token = client
        .get(format!("{e2b}/sandboxes/{}", ids[0]))
        .header("X-Access-Token", &tokens[0])
        .send()
        .await
        .unwrap();
    assert_eq!(by_token.status(), StatusCode::UNAUTHORIZED);
    for id in &ids {
        let killed = client
            .delete(format!("{e2b}/sandboxes/{id}"))
            .header("X-API-KEY", API_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(killed.status(), StatusCode::NO_CONTENT);
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn svcs_rate_limit_applies_on_the_e2b_listener() {
    let (server, e2b) = e2b_server(|c| {
        c.rate_limit.enabled = true;
        c.rate_limit.requests_per_minute = 60;
        c.rate_limit.burst = 2;
    })
    .await;
    let mut statuses = Vec::new();
    let mut last = None;
    for _ in 0..3 {
        let reply = server
            .client
            .get(format!("{e2b}/v2/sandboxes"))
            .send()
            .await
            .unwrap();
        statuses.push(reply.status().as_u16());
        last = Some(reply);
    }
    assert_eq!(statuses, [200, 200, 429]);
    let refused = last.unwrap();
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(refused.headers()["x-ratelimit-remaining"], "0");
    assert_e2b_error(refused, StatusCode::TOO_MANY_REQUESTS).await;
    // The buckets are the API's: the address's is spent there too.
    server
        .get("/sandboxes")
        .await
        .assert_error(429, "resource_limit");
    // A bearer token is a bucket of its own, whether or not an empty API key comes with it.
    let mut bearer = Vec::new();
    for api_key in ["", "", ""] {
        let reply = server
            .client
            .get(format!("{e2b}/v2/sandboxes"))
            .header("authorization", "Bearer token-1")
            .header("x-api-key", api_key)
            .send()
            .await
            .unwrap();
        bearer.push(reply.status().as_u16());
    }
    assert_eq!(bearer, [200, 200, 429]);
    // Health is not limited (the SDKs probe it after a failure).
    let health = server
        .client
        .get(format!("{e2b}/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::NO_CONTENT);
    server.shutdown().await;
}

/// An E2B error: `status`, and a body `{code: <the status as a number>, message}`.
async fn assert_e2b_error(response: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], status.as_u16(), "{body}");
    assert!(body["message"].is_string(), "{body}");
    body
}

/// `GET /v2/sandboxes` pages with svc's own cursor as `nextToken`: following the tokens while
/// sandboxes are destroyed and created lists every sandbox that lived throughout exactly once,
/// and the metadata filter still fills a page from further down the list.
#[tokio::test]
async fn the_e2b_list_pages_neither_skip_nor_repeat_while_sandboxes_change() {
    let (server, e2b) = e2b_server(|_| {}).await;
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..7 {
        // A second apart, so the list's order (newest first) is their order of creation.
        server.clock.advance(std::time::Duration::from_secs(1));
        let metadata = if i < 2 {
            json!({"kind": "marked"})
        } else {
            json!({})
        };
        let created = create(
            &client,
            &e2b,
            None,
            json!({"templateID": "base", "metadata": metadata}),
        )
        .await;
        assert_eq!(created.status(), StatusCode::CREATED);
        let body: Value = created.json().await.unwrap();
        ids.push(body["sandboxID"].as_str().unwrap().to_owned());
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut url = format!("{e2b}/v2/sandboxes?limit=2");
        if let Some(token) = &token {
            url.push_str(&format!("&nextToken={token}"));
        }
        let answer = client.get(url).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        token = answer
            .headers()
            .get("x-next-token")
            .map(|v| v.to_str().unwrap().to_owned());
        let page: Vec<Value> = answer.json().await.unwrap();
        assert!(page.len() <= 2, "{page:?}");
        seen.extend(
            page.iter()
                .map(|s| s["sandboxID"].as_str().unwrap().to_owned()),
        );
        pages += 1;
        if pages == 1 {
            // Newest first: destroying one not yet listed and creating one mid-way changes
            // neither what was listed nor what is still to come.
            let gone = &ids[0];
            let killed = client
                .delete(format!("{e2b}/sandboxes/{gone}"))
                .send()
                .await
                .unwrap();
            assert_eq!(killed.status(), StatusCode::NO_CONTENT);
            server.clock.advance(std::time::Duration::from_secs(1));
            create(&client, &e2b, None, json!({"templateID": "base"})).await;
        }
        if token.is_none() {
            break;
        }
    }
    let mut expected: Vec<String> = ids[1..].to_vec();
    expected.sort();
    let mut listed = seen.clone();
    listed.sort();
    listed.dedup();
    assert_eq!(
        listed.len(),
        seen.len(),
        "a sandbox was listed twice: {seen:?}"
    );
    assert_eq!(listed, expected, "pages listed {seen:?}");

    // Two marked sandboxes lie at the bottom of the list (the oldest); one survives. A page of
    // the filter is filled from there, not left empty by the unmarked ones above it.
    let marked = client
        .get(format!("{e2b}/v2/sandboxes?limit=1&metadata=kind%3Dmarked"))
        .send()
        .await
        .unwrap();
    let page: Vec<Value> = marked.json().await.unwrap();
    assert_eq!(page.len(), 1, "{page:?}");
    assert_eq!(page[0]["sandboxID"], ids[1].as_str());

    let bad = client
        .get(format!("{e2b}/v2/sandboxes?nextToken=not-a-token"))
        .send()
        .await
        .unwrap();
    assert_e2b_error(bad, StatusCode::BAD_REQUEST).await;
    server.shutdown().await;
}

/// A connect's timeout counts from the service's clock (which tests move), not the host's:
/// with the clock 50 s on, a 30 s timeout ends a 60 s sandbox 80 s after it began.
#[tokio::test]
async fn an_e2b_timeout_counts_from_the_service_clock() {
    let (server, e2b) = e2b_server(|_| {}).await;
    let client = &server.client;
    let created = create(
        client,
        &e2b,
        None,
        json!({"templateID": "base", "timeout": 60}),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let body: Value = created.json().await.unwrap();
    let id = body["sandboxID"].as_str().unwrap().to_owned();
    server.clock.advance(std::time::Duration::from_secs(50));
    let connected = client
        .post(format!("{e2b}/v2/sandboxes/{id}/connect"))
        .json(&json!({"timeout": 30}))
        .send()
        .await
        .unwrap();
    assert_eq!(connected.status(), StatusCode::OK);
    let own = server.get(&format!("/sandboxes/{id}")).await;
    let at = |field: &str| {
        chrono::DateTime::parse_from_rfc3339(own.body[field].as_str().unwrap()).unwrap()
    };
    assert_eq!(
        (at("expires_at") - at("created_at")).num_seconds(),
        80,
        "{}",
        own.body
    );
    server.shutdown().await;
}
