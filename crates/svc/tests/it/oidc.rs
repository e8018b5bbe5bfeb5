//! OIDC bearer tokens over HTTP (interface Authentication 4–7; decisions §5) against the test
//! identity provider: every algorithm accepted, every tampering refused, the JWKS refreshed on
//! an unknown kid at most once per 30 s, groups and memberships mapped to roles, mixed and
//! OIDC-only modes.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};
use crate::idp::{bearer, claims, compact, now, Idp, Key};

const API_KEY: &str = "oidc-test-api-key-0123456789abcdef";

async fn server(idp: &Idp) -> TestServer {
    TestServer::start_with(|c| idp.configure(c)).await
}

async fn get_as(server: &TestServer, token: &str, path: &str) -> Reply {
    server
        .call_as(
            &[("Authorization", &bearer(token))],
            Method::GET,
            path,
            None,
        )
        .await
}

pub async fn call_with(
    server: &TestServer,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    server
        .call_as(&[("Authorization", &bearer(token))], method, path, body)
        .await
}

#[tokio::test]
async fn every_algorithm_is_accepted() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    for kid in ["rs", "es256", "es384", "es512"] {
        let token = idp.mint(kid, &claims("alice", &["viewers"], None));
        let reply = get_as(&server, &token, "/sandboxes").await;
        assert_eq!(reply.status, 200, "{kid}: {}", reply.body);
    }
}

#[tokio::test]
async fn a_static_pem_key_verifies_without_jwks() {
    let idp = Idp::start().await;
    for kid in ["rs", "es512"] {
        let key = idp.key(kid).clone();
        let pem_path = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(pem_path.path(), key.public_pem()).unwrap();
        let path = pem_path.path().to_owned();
        let server = TestServer::start_with(|c| {
            idp.configure(c);
            c.auth.oidc_jwks_url = String::new();
            c.auth.oidc_public_key_file = path;
        })
        .await;
        let token = compact(
            &json!({"alg": key.alg(), "typ": "JWT"}),
            &claims("alice", &["viewers"], None),
            |m| key.sign(m),
        );
        assert_eq!(
            get_as(&server, &token, "/sandboxes").await.status,
            200,
            "{kid}"
        );
        // Another key of the provider does not verify against the configured one.
        let other = idp.mint("es256", &claims("alice", &["viewers"], None));
        get_as(&server, &other, "/sandboxes")
            .await
            .assert_error(401, "unauthorized");
    }
}

#[tokio::test]
async fn every_tampering_is_refused() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    let good = claims("mallory", &["admins"], None);
    let with = |field: &str, value: Value| {
        let mut c = good.clone();
        c[field] = value;
        c
    };
    let es256 = idp.key("es256").clone();
    let rsa = idp.key("rs").clone();
    let flip_last = |token: String| {
        let mut bytes = token.into_bytes();
        let at = bytes.len() - 2;
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        String::from_utf8(bytes).unwrap()
    };
    // HMAC keyed with the RSA public key: the classic RS256 → HS256 confusion.
    let hs_confusion = {
        use sha2::Digest;
        let secret = rsa.public_pem();
        compact(&json!({"alg": "HS256", "kid": "rs"}), &good, |m| {
            // HMAC-SHA256 by hand (RFC 2104), so no MAC crate is needed for one test.
            let mut key = secret.as_bytes().to_vec();
            if key.len() > 64 {
                key = sha2::Sha256::digest(&key).to_vec();
            }
            key.resize(64, 0);
            let pad = |byte: u8| key.iter().map(|k| k ^ byte).collect::<Vec<u8>>();
            let inner = sha2::Sha256::digest([pad(0x36), m.to_vec()].concat());
            sha2::Sha256::digest([pad(0x5c), inner.to_vec()].concat()).to_vec()
        })
    };
    let foreign = Key::generate("ES256");
    let cases: Vec<(&str, String)> = vec![
        ("bad signature", flip_last(idp.mint("es256", &good))),
        (
            "wrong issuer",
            idp.mint("es256", &with("iss", json!("https://evil.test"))),
        ),
        (
            "wrong audience",
            idp.mint("es256", &with("aud", json!("other-app"))),
        ),
        (
            "audience list without us",
            idp.mint("es256", &with("aud", json!(["a", "b"]))),
        ),
        (
            "expired",
            idp.mint("es256", &with("exp", json!(now() - 3600))),
        ),
        ("no expiry", {
            let mut c = good.clone();
            c.as_object_mut().unwrap().remove("exp");
            idp.mint("es256", &c)
        }),
        (
            "not yet valid",
            idp.mint("es256", &with("nbf", json!(now() + 3600))),
        ),
        ("no subject", idp.mint("es256", &with("sub", json!("")))),
        (
            "unknown kid",
            compact(&json!({"alg": "ES256", "kid": "nope"}), &good, |m| {
                es256.sign(m)
            }),
        ),
        (
            "alg none",
            compact(&json!({"alg": "none", "kid": "es256"}), &good, |_| {
                Vec::new()
            }),
        ),
        ("RS256 to HS256 confusion", hs_confusion),
        (
            "key from another JWKS under a known kid",
            compact(&json!({"alg": "ES256", "kid": "es256"}), &good, |m| {
                foreign.sign(m)
            }),
        ),
        (
            "ES256 header on an RSA key",
            compact(&json!({"alg": "ES256", "kid": "rs"}), &good, |m| {
                es256.sign(m)
            }),
        ),
        (
            "ES384 signature claimed as ES256",
            compact(&json!({"alg": "ES256", "kid": "es384"}), &good, |m| {
                idp.key("es384").sign(m)
            }),
        ),
        ("garbage", "not-a-token".to_owned()),
        ("two parts", "abc.def".to_owned()),
        (
            "critical header",
            compact(
                &json!({"alg": "ES256", "kid": "es256", "crit": ["exp"]}),
                &good,
                |m| es256.sign(m),
            ),
        ),
    ];
    for (what, token) in cases {
        let reply = get_as(&server, &token, "/sandboxes").await;
        let message = reply.assert_error(401, "unauthorized");
        assert!(!message.contains(&token), "{what}: the token is echoed");
        assert!(message.contains("bearer token"), "{what}: {message}");
    }
    // The untampered token works, so the refusals above are the tampering's doing.
    assert_eq!(
        get_as(&server, &idp.mint("es256", &good), "/sandboxes")
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn unknown_kids_refresh_the_keys_at_most_once_per_30s() {
    let mut idp = Idp::start().await;
    let server = server(&idp).await;
    let first = idp.token("alice", &["viewers"], None);
    assert_eq!(get_as(&server, &first, "/sandboxes").await.status, 200);
    crate::harness::wait_for("the start-up fetch", Duration::from_secs(10), || async {
        idp.fetches() >= 1
    })
    .await;
    let fetches = idp.fetches();
    // A key rotates in: within 30 s of the last fetch it is not looked up.
    idp.publish("rotated", Key::generate("ES384"));
    let rotated = idp.mint("rotated", &claims("alice", &["viewers"], None));
    get_as(&server, &rotated, "/sandboxes")
        .await
        .assert_error(401, "unauthorized");
    assert_eq!(idp.fetches(), fetches, "refetched within 30 s");
    // Cached tokens never fetch.
    for _ in 0..5 {
        assert_eq!(get_as(&server, &first, "/sandboxes").await.status, 200);
    }
    assert_eq!(idp.fetches(), fetches);
    server.clock.advance(Duration::from_secs(31));
    assert_eq!(get_as(&server, &rotated, "/sandboxes").await.status, 200);
    assert_eq!(idp.fetches(), fetches + 1);
    // Another unknown kid right away: refused without a fetch.
    let unknown = compact(
        &json!({"alg": "ES256", "kid": "other"}),
        &claims("a", &["viewers"], None),
        |m| idp.key("es256").sign(m),
    );
    let message = get_as(&server, &unknown, "/sandboxes")
        .await
        .assert_error(401, "unauthorized");
    assert!(message.contains("kid"), "{message}");
    assert_eq!(idp.fetches(), fetches + 1);
}

#[tokio::test]
async fn a_remembered_token_goes_when_its_key_leaves_the_jwks() {
    let mut idp = Idp::start().await;
    let server = server(&idp).await;
    let token = idp.token("alice", &["viewers"], None);
    let other = idp.mint("es384", &claims("bob", &["viewers"], None));
    for remembered in [&token, &other] {
        assert_eq!(get_as(&server, remembered, "/sandboxes").await.status, 200);
    }
    crate::harness::wait_for("the start-up fetch", Duration::from_secs(10), || async {
        idp.fetches() >= 1
    })
    .await;
    let fetches = idp.fetches();
    // The identity provider removes the key; the next fetch (here the one an unknown kid asks
    // for, past the 30 s between fetches) learns it.
    idp.withdraw("es256");
    idp.publish("rotated", Key::generate("ES256"));
    server.clock.advance(Duration::from_secs(31));
    let rotated = idp.mint("rotated", &claims("carol", &["viewers"], None));
    assert_eq!(get_as(&server, &rotated, "/sandboxes").await.status, 200);
    assert_eq!(idp.fetches(), fetches + 1);
    let message = get_as(&server, &token, "/sandboxes")
        .await
        .assert_error(401, "unauthorized");
    assert!(
        message.contains("kid") || message.contains("signature"),
        "{message}"
    );
    // Tokens of keys still published stay remembered.
    assert_eq!(get_as(&server, &other, "/sandboxes").await.status, 200);
}

#[tokio::test]
async fn a_remembered_token_still_expires() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    let mut c = claims("alice", &["viewers"], None);
    c["exp"] = json!(now() + 120);
    let token = idp.mint("es256", &c);
    assert_eq!(get_as(&server, &token, "/sandboxes").await.status, 200);
    // Past exp but within the 60 s skew: still valid.
    server.clock.advance(Duration::from_secs(150));
    assert_eq!(get_as(&server, &token, "/sandboxes").await.status, 200);
    server.clock.advance(Duration::from_secs(60));
    let message = get_as(&server, &token, "/sandboxes")
        .await
        .assert_error(401, "unauthorized");
    assert!(message.contains("expired"), "{message}");
}

#[tokio::test]
async fn groups_map_to_roles_and_the_highest_wins() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    let viewer = idp.token("v", &["viewers", "unrelated"], None);
    let operator = idp.token("o", &["viewers", "operators"], None);
    let admin = idp.token("a", &["operators", "admins"], None);
    let nobody = idp.token("n", &["unrelated"], None);
    let spawn = |token: String| {
        let server = &server;
        async move { call_with(server, &token, Method::POST, "/sandboxes", Some(json!({}))).await }
    };
    spawn(viewer.clone()).await.assert_error(403, "forbidden");
    assert_eq!(get_as(&server, &viewer, "/sandboxes").await.status, 200);
    assert_eq!(spawn(operator.clone()).await.status, 201);
    get_as(&server, &operator, "/admin/tenants")
        .await
        .assert_error(403, "forbidden");
    assert_eq!(get_as(&server, &admin, "/admin/tenants").await.status, 200);
    // A valid token whose groups map to no role: 403, not 401.
    let message = get_as(&server, &nobody, "/sandboxes")
        .await
        .assert_error(403, "forbidden");
    assert!(message.contains("no role"), "{message}");
    // A single group as a string works too.
    let mut c = claims("s", &[], None);
    c["groups"] = json!("operators");
    assert_eq!(spawn(idp.mint("es256", &c)).await.status, 201);
}

#[tokio::test]
async fn members_add_roles_inside_their_tenant() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    let admin = idp.token("root", &["admins"], None);
    let carol = idp.token("carol", &[], Some("acme"));
    let carol_elsewhere = idp.token("carol", &[], Some("globex"));
    get_as(&server, &carol, "/sandboxes")
        .await
        .assert_error(403, "forbidden");
    let reply = call_with(
        &server,
        &admin,
        Method::POST,
        "/admin/tenants",
        Some(json!({"id": "acme", "name": "Acme"})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let reply = call_with(
        &server,
        &admin,
        Method::PUT,
        "/admin/tenants/acme/members/carol",
        Some(json!({"role": "operator"})),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["role"], "operator");
    assert_eq!(reply.body["tenant_id"], "acme");
    assert_eq!(reply.body["subject"], "carol");
    // The membership takes effect at once, in that tenant only.
    let spawned = call_with(&server, &carol, Method::POST, "/sandboxes", Some(json!({}))).await;
    assert_eq!(spawned.status, 201, "{}", spawned.body);
    assert_eq!(spawned.body["tenant_id"], "acme");
    assert_eq!(spawned.body["owner_id"], "carol");
    get_as(&server, &carol_elsewhere, "/sandboxes")
        .await
        .assert_error(403, "forbidden");
    // Groups and membership: the higher wins.
    let viewer_member = idp.token("carol", &["viewers"], Some("acme"));
    assert_eq!(
        call_with(
            &server,
            &viewer_member,
            Method::POST,
            "/sandboxes",
            Some(json!({}))
        )
        .await
        .status,
        201
    );
    // Removed: back to nothing.
    let reply = call_with(
        &server,
        &admin,
        Method::DELETE,
        "/admin/tenants/acme/members/carol",
        None,
    )
    .await;
    assert_eq!(reply.status, 200);
    get_as(&server, &carol, "/sandboxes")
        .await
        .assert_error(403, "forbidden");
    // Only member roles can be granted.
    call_with(
        &server,
        &admin,
        Method::PUT,
        "/admin/tenants/acme/members/dave",
        Some(json!({"role": "admin"})),
    )
    .await
    .assert_error(400, "bad_request");
}

#[tokio::test]
async fn mixed_mode_accepts_a_bearer_token_or_an_api_key() {
    let idp = Idp::start().await;
    let server = TestServer::start_with(|c| {
        idp.configure(c);
        c.auth.enabled = true;
        c.auth.api_key = svc_core::config::Secret::new(API_KEY);
    })
    .await;
    let viewer = idp.token("v", &["viewers"], None);
    assert_eq!(get_as(&server, &viewer, "/sandboxes").await.status, 200);
    let reply = server
        .call_as(&[("X-API-Key", API_KEY)], Method::GET, "/sandboxes", None)
        .await;
    assert_eq!(reply.status, 200);
    server
        .get("/sandboxes")
        .await
        .assert_error(401, "unauthorized");
    // Admin scope holds for bearer callers: a viewer is 403 on admin routes.
    get_as(&server, &viewer, "/admin/quotas")
        .await
        .assert_error(403, "forbidden");
    // A bad bearer token is not rescued by the absence of a key.
    get_as(&server, "x.y.z", "/sandboxes")
        .await
        .assert_error(401, "unauthorized");
}

#[tokio::test]
async fn oidc_only_mode_requires_a_token_and_enforces_admin_scope() {
    let idp = Idp::start().await;
    let server = server(&idp).await;
    let message = server
        .get("/sandboxes")
        .await
        .assert_error(401, "unauthorized");
    assert!(message.contains("bearer"), "{message}");
    // API keys mean nothing without auth.enabled.
    server
        .call_as(
            &[("X-API-Key", "anything")],
            Method::GET,
            "/sandboxes",
            None,
        )
        .await
        .assert_error(401, "unauthorized");
    for path in [
        "/admin/quotas",
        "/admin/tenants",
        "/admin/audit",
        "/admin/providers",
    ] {
        let operator = idp.token("o", &["operators"], None);
        get_as(&server, &operator, path)
            .await
            .assert_error(403, "forbidden");
        let admin = idp.token("a", &["admins"], None);
        assert_eq!(get_as(&server, &admin, path).await.status, 200, "{path}");
    }
    // Probes stay open.
    assert_eq!(server.get("/health").await.status, 200);
}

#[tokio::test]
async fn unusable_key_sources_stop_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = svc_core::config::Config::default();
    config.database.path = dir.path().join("svc.db").display().to_string();
    config.auth.oidc_issuer = crate::idp::ISSUER.to_owned();
    config.auth.oidc_jwks_url = "http://idp.example.com/jwks".to_owned();
    config.auth.oidc_viewer_groups = vec!["v".to_owned()];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let Err(err) = svc::start(config.clone(), listener).await else {
        panic!("started with a plain-http JWKS URL");
    };
    assert!(format!("{err:#}").contains("auth.oidc_jwks_url"), "{err:#}");
    // A key file that is missing or holds no public key stops start-up too.
    let not_a_key = dir.path().join("not-a-key.pem");
    std::fs::write(
        &not_a_key,
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    )
    .unwrap();
    for file in [dir.path().join("missing.pem"), not_a_key] {
        config.auth.oidc_jwks_url = String::new();
        config.auth.oidc_public_key_file = file;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let Err(err) = svc::start(config.clone(), listener).await else {
            panic!("started without a usable public key");
        };
        assert!(
            format!("{err:#}").contains("auth.oidc_public_key_file"),
            "{err:#}"
        );
    }
}
