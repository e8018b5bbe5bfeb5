//! Isolation (decisions §30): owners under OIDC are their tokens' subjects, quotas show a bound
//! caller only its own, pool mode's sandboxes answer only their owners, sizes and networks stay
//! inside what the operator allows, and authentication turns the mock (host processes) off
//! unless the configuration names it.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};
use crate::idp::{bearer, Idp};

const API_KEY: &str = "isolation-api-key-0123456789abcdef";
const ADMIN_KEY: &str = "isolation-admin-key-0123456789abcdef";

/// A server taking both API keys and bearer tokens from `idp`.
async fn server(idp: &Idp, adjust: impl FnOnce(&mut svc_core::config::Config)) -> TestServer {
    TestServer::start_with(|c| {
        idp.configure(c);
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
        c.auth.admin_api_key = svc_core::config::Secret::new(ADMIN_KEY);
        adjust(c);
    })
    .await
}

/// A call with a bearer token and, when given, an `X-User-ID`.
async fn as_token(
    server: &TestServer,
    token: &str,
    user: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let auth = bearer(token);
    let mut headers = vec![("Authorization", auth.as_str())];
    headers.extend(user.map(|u| ("X-User-ID", u)));
    server.call_as(&headers, method, path, body).await
}

async fn as_key(
    server: &TestServer,
    key: (&str, &str),
    user: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let mut headers = vec![key];
    headers.extend(user.map(|u| ("X-User-ID", u)));
    server.call_as(&headers, method, path, body).await
}

const ADMIN: (&str, &str) = ("X-Admin-API-Key", ADMIN_KEY);
const API: (&str, &str) = ("X-API-Key", API_KEY);

#[tokio::test]
async fn oidc_viewers_and_operators_act_only_as_their_own_subject() {
    let idp = Idp::start().await;
    let server = server(&idp, |_| {}).await;
    let quota = as_key(
        &server,
        ADMIN,
        None,
        Method::PUT,
        "/quotas/carol",
        Some(json!({"max_sandboxes": 2})),
    )
    .await;
    assert_eq!(quota.status, 200, "{}", quota.body);
    let bob = idp.token("bob", &["operators"], None);

    // Spoofing carol by header or by body: 403 naming which.
    let spoofed = as_token(
        &server,
        &bob,
        Some("carol"),
        Method::POST,
        "/sandboxes",
        Some(json!({})),
    )
    .await;
    let message = spoofed.assert_error(403, "forbidden");
    assert!(
        message.contains("X-User-ID") && message.contains("carol"),
        "{message}"
    );
    let spoofed = as_token(
        &server,
        &bob,
        None,
        Method::POST,
        "/sandboxes",
        Some(json!({"owner_id": "carol"})),
    )
    .await;
    let message = spoofed.assert_error(403, "forbidden");
    assert!(message.contains("owner_id"), "{message}");
    // Reads are refused the same way: the header names whom the call acts for.
    let viewer = idp.token("vera", &["viewers"], None);
    as_token(
        &server,
        &viewer,
        Some("carol"),
        Method::GET,
        "/sandboxes",
        None,
    )
    .await
    .assert_error(403, "forbidden");

    // Naming itself is accepted, by header or body.
    for (user, body) in [(Some("bob"), json!({})), (None, json!({"owner_id": "bob"}))] {
        let own = as_token(&server, &bob, user, Method::POST, "/sandboxes", Some(body)).await;
        assert_eq!(own.status, 201, "{}", own.body);
        assert_eq!(own.body["owner_id"], "bob");
    }

    // Carol was never charged for bob's attempts: both her sandboxes are hers to spawn.
    let carol = idp.token("carol", &["operators"], None);
    for _ in 0..2 {
        let reply = as_token(
            &server,
            &carol,
            None,
            Method::POST,
            "/sandboxes",
            Some(json!({})),
        )
        .await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        assert_eq!(reply.body["owner_id"], "carol");
    }

    // A tenant admin may act for anyone in its tenant; API-key services for anyone.
    let lead = idp.token("lena", &["leads"], None);
    let reply = as_token(
        &server,
        &lead,
        Some("dave"),
        Method::POST,
        "/sandboxes",
        Some(json!({})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(reply.body["owner_id"], "dave");
    for key in [API, ADMIN] {
        let reply = as_key(
            &server,
            key,
            Some("erin"),
            Method::POST,
            "/sandboxes",
            Some(json!({})),
        )
        .await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        assert_eq!(reply.body["owner_id"], "erin");
    }
    // Without credentials the header changes nothing: 401.
    let anonymous = server
        .call_as(
            &[("X-User-ID", "carol")],
            Method::POST,
            "/sandboxes",
            Some(json!({})),
        )
        .await;
    anonymous.assert_error(401, "unauthorized");
    server.shutdown().await;
}

#[tokio::test]
async fn oidc_viewers_and_operators_see_only_their_own_quota() {
    let idp = Idp::start().await;
    let server = server(&idp, |_| {}).await;
    for (owner, max) in [("bob", 3), ("carol", 2)] {
        let reply = as_key(
            &server,
            ADMIN,
            None,
            Method::PUT,
            &format!("/quotas/{owner}"),
            Some(json!({"max_sandboxes": max})),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    for groups in [["viewers"], ["operators"]] {
        let bob = idp.token("bob", &groups, None);
        for path in [
            "/quotas/carol",
            "/quotas/carol/usage",
            "/admin/quotas/carol",
        ] {
            let reply = as_token(&server, &bob, None, Method::GET, path, None).await;
            if path.starts_with("/admin") {
                // Admin routes stay closed to them altogether.
                assert_eq!(reply.status, 403, "{path}: {}", reply.body);
            } else {
                reply.assert_error(404, "not_found");
            }
        }
        let own = as_token(&server, &bob, None, Method::GET, "/quotas/bob", None).await;
        assert_eq!(own.status, 200, "{}", own.body);
        assert_eq!(own.body["max_sandboxes"], 3);
        let usage = as_token(&server, &bob, None, Method::GET, "/quotas/bob/usage", None).await;
        assert_eq!(usage.status, 200, "{}", usage.body);
        let listed = as_token(&server, &bob, None, Method::GET, "/quotas", None).await;
        assert_eq!(listed.status, 200, "{}", listed.body);
        let owners: Vec<&str> = listed
            .body
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["owner_id"].as_str().unwrap())
            .collect();
        assert_eq!(owners, ["bob"], "{groups:?}");
        let summary = as_token(&server, &bob, None, Method::GET, "/quotas/summary", None).await;
        assert_eq!(summary.body["total"], 1, "{}", summary.body);
    }
    // Others still see every owner's.
    let all = as_key(&server, API, None, Method::GET, "/quotas", None).await;
    assert_eq!(all.body.as_array().unwrap().len(), 2, "{}", all.body);
    let lead = idp.token("lena", &["leads"], None);
    let carol = as_token(&server, &lead, None, Method::GET, "/quotas/carol", None).await;
    assert_eq!(carol.status, 200, "{}", carol.body);
    server.shutdown().await;
}

#[tokio::test]
async fn pool_sandboxes_answer_only_their_owner() {
    let idp = Idp::start().await;
    let server = crate::pool::mock_pool(|c| {
        crate::pool::pool(c, 1, 4);
        idp.configure(c);
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
        c.auth.admin_api_key = svc_core::config::Secret::new(ADMIN_KEY);
    })
    .await;
    // Bob listens from the start; he hears only of his own sandboxes.
    let mut bob_events = server
        .events_as(&[API, ("X-User-ID", "bob")], "", None)
        .await;
    let spawned = as_key(
        &server,
        API,
        Some("alice"),
        Method::POST,
        "/sandboxes",
        Some(json!({})),
    )
    .await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    let alice = spawned.body["id"].as_str().unwrap().to_owned();
    let write = as_key(
        &server,
        API,
        Some("alice"),
        Method::POST,
        &format!("/sandboxes/{alice}/files"),
        Some(json!({"path": "/workspace/alice/secret.txt", "content": "alice's"})),
    )
    .await;
    assert_eq!(write.status, 200, "{}", write.body);

    // Bob, through the same trusted service, and a same-tenant OIDC user: as if it did not exist.
    let mallory = idp.token("mallory", &["operators"], None);
    let routes = [
        (Method::GET, format!("/sandboxes/{alice}"), None),
        (
            Method::POST,
            format!("/sandboxes/{alice}/exec"),
            Some(json!({"command": "true"})),
        ),
        (
            Method::GET,
            format!("/sandboxes/{alice}/files?path=/workspace/alice/secret.txt"),
            None,
        ),
        (
            Method::GET,
            format!("/sandboxes/{alice}/files/list?path=/workspace/alice"),
            None,
        ),
        (Method::GET, format!("/sandboxes/{alice}/logs"), None),
        (Method::DELETE, format!("/sandboxes/{alice}"), None),
    ];
    for (method, path, body) in &routes {
        let by_bob = as_key(
            &server,
            API,
            Some("bob"),
            method.clone(),
            path,
            body.clone(),
        )
        .await;
        assert_eq!(by_bob.status, 404, "bob {method} {path}: {}", by_bob.body);
        assert!(!by_bob.body.to_string().contains("alice's"));
        let by_mallory =
            as_token(&server, &mallory, None, method.clone(), path, body.clone()).await;
        assert_eq!(
            by_mallory.status, 404,
            "mallory {method} {path}: {}",
            by_mallory.body
        );
    }
    for query in ["", "?owner_id=alice"] {
        let listed = as_key(
            &server,
            API,
            Some("bob"),
            Method::GET,
            &format!("/sandboxes{query}"),
            None,
        )
        .await;
        assert_eq!(listed.status, 200, "{}", listed.body);
        assert!(
            !listed.body.to_string().contains(&alice),
            "bob lists alice's: {}",
            listed.body
        );
    }

    // Bob's own sandbox: its creation is the first event his stream carries, though alice's
    // came before it.
    let own = as_key(
        &server,
        API,
        Some("bob"),
        Method::POST,
        "/sandboxes",
        Some(json!({})),
    )
    .await;
    assert_eq!(own.status, 201, "{}", own.body);
    let seen = bob_events
        .until("sandbox.created", std::time::Duration::from_secs(30))
        .await;
    assert!(
        seen.iter().all(|e| e.data["sandbox_id"] == own.body["id"]),
        "bob hears of others' sandboxes: {seen:?}"
    );

    // Alice, an admin and her tenant's admin still reach it.
    let read = server
        .client
        .get(server.url(&format!(
            "/sandboxes/{alice}/files?path=/workspace/alice/secret.txt"
        )))
        .header("X-API-Key", API_KEY)
        .header("X-User-ID", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.text().await.unwrap(), "alice's");
    let exec = as_key(
        &server,
        API,
        Some("alice"),
        Method::POST,
        &format!("/sandboxes/{alice}/exec"),
        Some(json!({"command": "true"})),
    )
    .await;
    assert_eq!(exec.status, 200, "{}", exec.body);
    let listed = as_key(&server, API, Some("alice"), Method::GET, "/sandboxes", None).await;
    assert!(listed.body.to_string().contains(&alice), "{}", listed.body);
    let by_admin = as_key(
        &server,
        ADMIN,
        Some("ops"),
        Method::GET,
        &format!("/sandboxes/{alice}"),
        None,
    )
    .await;
    assert_eq!(by_admin.status, 200, "{}", by_admin.body);
    let lead = idp.token("lena", &["leads"], None);
    let by_lead = as_token(
        &server,
        &lead,
        None,
        Method::GET,
        &format!("/sandboxes/{alice}"),
        None,
    )
    .await;
    assert_eq!(by_lead.status, 200, "{}", by_lead.body);

    // The one-per-user 409 names the sandbox to its owner's tenant only.
    let again = as_key(
        &server,
        API,
        Some("alice"),
        Method::POST,
        "/sandboxes",
        Some(json!({})),
    )
    .await;
    let message = again.assert_error(409, "conflict");
    assert!(message.contains(&alice), "{message}");
    let created = as_key(
        &server,
        ADMIN,
        None,
        Method::POST,
        "/admin/tenants",
        Some(json!({"id": "globex", "name": "globex"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let other_lead = idp.token("olga", &["leads"], Some("globex"));
    let across = as_token(
        &server,
        &other_lead,
        Some("alice"),
        Method::POST,
        "/sandboxes",
        Some(json!({})),
    )
    .await;
    assert_eq!(across.status, 409, "{}", across.body);
    assert!(
        !across.body.to_string().contains(&alice),
        "another tenant learns the ID: {}",
        across.body
    );
    server.shutdown().await;
}

#[tokio::test]
async fn sizes_beyond_the_limits_are_refused_naming_the_field_and_limit() {
    let server = TestServer::start().await;
    for (body, field, limit) in [
        (
            json!({"memory_mb": 4_294_967_295_u64}),
            "memory_mb",
            "16384",
        ),
        (
            json!({"memory_mb": 16385}),
            "memory_mb",
            "defaults.max_memory_mb",
        ),
        (json!({"vcpus": 1_000_000}), "vcpus", "defaults.max_vcpus"),
        (json!({"vcpus": 9}), "vcpus", "8"),
    ] {
        let reply = server
            .call(Method::POST, "/sandboxes", Some(body.clone()))
            .await;
        let message = reply.assert_error(400, "bad_request");
        assert!(
            message.contains(field) && message.contains(limit),
            "{body}: {message}"
        );
        let template = server
            .call(Method::POST, "/templates", Some(json!({"name": "big", "memory_mb": body.get("memory_mb"), "vcpus": body.get("vcpus")})))
            .await;
        assert_eq!(template.status, 400, "{body}: {}", template.body);
    }
    assert!(
        server.listed_ids("?state=all").await.is_empty(),
        "nothing half made"
    );
    // Within the limits the mock takes any size.
    let small = server
        .call(Method::POST, "/sandboxes", Some(json!({"memory_mb": 1})))
        .await;
    assert_eq!(small.status, 201, "{}", small.body);
    server.shutdown().await;

    // No more vCPUs than the host has, whatever the ceiling.
    let host = std::thread::available_parallelism().unwrap().get() as u64;
    let server =
        TestServer::start_with(|c| c.defaults.max_vcpus = u32::try_from(host + 1).unwrap()).await;
    let reply = server
        .call(Method::POST, "/sandboxes", Some(json!({"vcpus": host + 1})))
        .await;
    let message = reply.assert_error(400, "bad_request");
    assert!(
        message.contains("vcpus") && message.contains("CPUs"),
        "{message}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn docker_networks_egress_and_memory_stay_inside_what_the_operator_allows() {
    let name = format!("svc-isolation-{}", std::process::id());
    let missing = format!("{name}-missing");
    let Some((server, docker)) = crate::docker::docker_server(|c| {
        c.providers.docker.allowed_networks = vec![name.clone(), missing.clone()];
    })
    .await
    else {
        return;
    };
    let spawn = |extra: Value| {
        let mut body = json!({"provider": "docker", "image": crate::docker::IMAGE});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        server.call(Method::POST, "/sandboxes", Some(body))
    };
    let victim = spawn(json!({})).await;
    assert_eq!(victim.status, 201, "{}", victim.body);
    let victim = victim.body["id"].as_str().unwrap().to_owned();
    for network in [
        "host".to_owned(),
        format!("container:svc-{victim}"),
        "none-such".to_owned(),
    ] {
        let reply = spawn(json!({"network": network})).await;
        let message = reply.assert_error(400, "bad_request");
        assert!(
            message.contains("network") && message.contains("allowed_networks"),
            "{network}: {message}"
        );
    }
    // Listed but missing: the caller's mistake, not the server's.
    let message = spawn(json!({"network": missing}))
        .await
        .assert_error(400, "bad_request");
    assert!(
        message.contains("network") && message.contains("does not exist"),
        "{message}"
    );
    // Listed and present: the container joins it.
    docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: name.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let joined = spawn(json!({"network": name})).await;
    assert_eq!(joined.status, 201, "{}", joined.body);
    let joined_id = joined.body["id"].as_str().unwrap();
    let inspect = docker
        .inspect_container(&format!("svc-{joined_id}"), None)
        .await
        .unwrap();
    assert_eq!(
        inspect.host_config.unwrap().network_mode.as_deref(),
        Some(name.as_str())
    );
    // Below the engine's minimum memory: 400, not the engine's 500.
    let message = spawn(json!({"memory_mb": 1}))
        .await
        .assert_error(400, "bad_request");
    assert!(
        message.contains("memory_mb") && message.contains("minimum"),
        "{message}"
    );
    // An allowlist may not reach the host's loopback or link-local addresses.
    for entry in [
        "localhost:7423",
        "127.0.0.1:5432",
        "169.254.169.254:80",
        "0.0.0.0/0",
    ] {
        let reply = spawn(json!({"egress": {"mode": "allowlist", "allow": [entry]}})).await;
        let message = reply.assert_error(400, "bad_request");
        assert!(
            message.contains("egress.allow") && message.contains("egress_allow_host"),
            "{entry}: {message}"
        );
    }
    crate::docker::finish(server, &docker).await;
    let _ = docker.remove_network(&name).await;

    // The operator may open the host on purpose.
    let Some((server, docker)) = crate::docker::docker_server(|c| {
        c.providers.docker.egress_allow_host = true;
    })
    .await
    else {
        return;
    };
    let reply = server
        .call(
            Method::POST,
            "/sandboxes",
            Some(json!({"provider": "docker", "image": crate::docker::IMAGE, "egress": {"mode": "allowlist", "allow": ["localhost:7423"]}})),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    crate::docker::finish(server, &docker).await;
}

/// `POST /sandboxes` on the mock of a `svc serve` on `port`: the status and body.
async fn spawn_on_mock(port: u16) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/api/v1/sandboxes"))
        .header("X-API-Key", API_KEY)
        .json(&json!({"provider": "mock"}))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn authentication_turns_the_mock_off_unless_the_configuration_names_it() {
    use crate::cli::{free_port, serve_in, stop, wait_until_serving};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut command = serve_in(dir.path(), port);
    command
        .env_remove("SVC_PROVIDERS__MOCK__ENABLED")
        .env("SVC_AUTH__ENABLED", "true")
        .env("SVC_AUTH__API_KEY", API_KEY);
    let child = command.spawn().unwrap();
    wait_until_serving(port);
    let (status, body) = spawn_on_mock(port).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("mock"), "{body}");
    let output = stop(child);
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("the mock provider is off"), "{log}");

    // Named by the operator, it runs, with a warning when another provider runs beside it.
    let port = free_port();
    let mut command = serve_in(dir.path(), port);
    command
        .env("SVC_AUTH__ENABLED", "true")
        .env("SVC_AUTH__API_KEY", API_KEY)
        .env("SVC_PROVIDERS__DOCKER__ENABLED", "true")
        .env(
            "SVC_PROVIDERS__DOCKER__EGRESS_PROXY_PORT",
            free_port().to_string(),
        );
    let child = command.spawn().unwrap();
    wait_until_serving(port);
    let (status, body) = spawn_on_mock(port).await;
    assert_eq!(status, 201, "{body}");
    let output = stop(child);
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.contains("the mock provider is enabled beside another"),
        "{log}"
    );
}

#[tokio::test]
async fn an_archive_of_the_whole_sandbox_skips_the_kernels_files() {
    let Some((server, docker)) =
        crate::docker::docker_server_on(crate::docker::ExecPath::Agent, |_| {}).await
    else {
        return;
    };
    let id = server
        .spawn(json!({"provider": "docker", "image": crate::docker::IMAGE}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let response = server
        .client
        .get(server.url(&format!("/sandboxes/{id}/files/archive?path=/")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.expect("the whole archive arrives");
    let mut archive = tar::Archive::new(body.as_ref());
    let names: Vec<String> = archive
        .entries()
        .expect("a tar")
        .map(|entry| {
            entry
                .expect("a whole entry")
                .path()
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    assert!(
        names.iter().any(|n| n == "bin/busybox"),
        "{} entries: {:?}",
        names.len(),
        &names[..names.len().min(20)]
    );
    assert!(names.iter().any(|n| n == "proc"), "the mount point stays");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("proc/") || n.starts_with("sys/")),
        "the kernel's files are left out"
    );
    crate::docker::finish(server, &docker).await;
}

#[tokio::test]
async fn the_e2b_listener_authenticates_before_reading_and_bounds_bodies() {
    let server = TestServer::start_with(|c| {
        c.e2b.enabled = true;
        c.e2b.port = 0;
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
        c.server.max_body_bytes = 4096;
    })
    .await;
    let e2b = server.e2b.clone().expect("the E2B listener runs");
    // JSON whitespace past the limit: read first, it would be 400 or 413; unread, 401.
    let big = vec![b' '; 64 * 1024];
    let post = |path: &str, key: Option<&str>| {
        let mut request = server
            .client
            .post(format!("{e2b}{path}"))
            .header("content-type", "application/json")
            .body(big.clone());
        if let Some(key) = key {
            request = request.header("X-API-KEY", key);
        }
        request.send()
    };
    for path in [
        "/v2/sandboxes",
        "/sandboxes",
        "/sandboxes/sb-0000000000000000/timeout",
        "/sandboxes/sb-0000000000000000/connect",
    ] {
        let response = post(path, None).await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
        let response = post(path, Some("a-wrong-key")).await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    let response = post("/v2/sandboxes", Some(API_KEY)).await.unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], 413, "{body}");
    // Uploads stream and are not JSON bodies: a multipart part past that limit is written.
    let created: Value = server
        .client
        .post(format!("{e2b}/sandboxes"))
        .header("X-API-KEY", API_KEY)
        .json(&json!({"templateID": "base"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let boundary = "svc-isolation-boundary";
    let mut form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.txt\"\r\n\r\n"
    )
    .into_bytes();
    form.extend(std::iter::repeat_n(b'x', 64 * 1024));
    form.extend(format!("\r\n--{boundary}--\r\n").into_bytes());
    let uploaded = server
        .client
        .post(format!("{e2b}/files?path=/tmp/big.txt"))
        .header("E2b-Sandbox-Id", created["sandboxID"].as_str().unwrap())
        .header(
            "X-Access-Token",
            created["envdAccessToken"].as_str().unwrap(),
        )
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), 200, "{}", uploaded.text().await.unwrap());
    server.shutdown().await;
}

#[tokio::test]
async fn without_authentication_only_the_allowed_hosts_reach_the_server() {
    let server = TestServer::start_with(|c| {
        c.e2b.enabled = true;
        c.e2b.port = 0;
    })
    .await;
    let e2b = server.e2b.clone().expect("the E2B listener runs");
    let call = |method: Method, url: String, host: &'static str| {
        server
            .client
            .request(method, url)
            .header("Host", host)
            .json(&json!({}))
            .send()
    };
    // A page reaching the server by DNS rebinding names its own host: refused before anything.
    let refused = call(Method::POST, server.url("/sandboxes"), "evil.example:7423")
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "forbidden", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("evil.example"),
        "{body}"
    );
    assert!(
        server.listed_ids("?state=all").await.is_empty(),
        "nothing ran"
    );
    let refused = call(Method::GET, format!("{e2b}/v2/sandboxes"), "evil.example")
        .await
        .unwrap();
    assert_eq!(refused.status(), 403, "the E2B listener checks too");
    for host in ["localhost:7423", "127.0.0.1", "[::1]:80", "LOCALHOST"] {
        let allowed = call(Method::GET, server.url("/sandboxes"), host)
            .await
            .unwrap();
        assert_eq!(allowed.status(), 200, "{host}");
    }
    server.shutdown().await;

    // `*` opens it; so does authentication, which makes the check moot.
    let open = TestServer::start_with(|c| c.server.allowed_hosts = vec!["*".to_owned()]).await;
    let reply = open
        .client
        .get(open.url("/sandboxes"))
        .header("Host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    open.shutdown().await;
    let keyed = TestServer::start_with(|c| {
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
    })
    .await;
    let reply = keyed
        .client
        .get(keyed.url("/sandboxes"))
        .header("Host", "evil.example")
        .header("X-API-Key", API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    keyed.shutdown().await;
}

#[tokio::test]
async fn buffered_output_held_in_memory_is_bounded_for_the_whole_server() {
    let server = TestServer::start_with(|c| c.exec.buffered_memory_bytes = 1000).await;
    let id = server.spawn(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/sandboxes/{id}/exec");
    let exec = |command: &str| server.call(Method::POST, &path, Some(json!({"command": command})));
    let big = exec("head -c 5000 /dev/zero | tr '\\0' a").await;
    assert_eq!(big.status, 200, "{}", big.body);
    assert_eq!(
        big.body["stdout"].as_str().unwrap().len(),
        1000,
        "what fits is kept"
    );
    assert_eq!(big.body["truncated"], true, "{}", big.body);
    assert_eq!(big.body["exit_code"], 0);
    // The budget came back when that exec answered; output that fits is whole, unflagged.
    let small = exec("echo hello").await;
    assert_eq!(small.body["stdout"], "hello\n", "{}", small.body);
    assert!(small.body.get("truncated").is_none(), "{}", small.body);
    server.shutdown().await;
}
