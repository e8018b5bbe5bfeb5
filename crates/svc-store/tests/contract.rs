//! The store contract: one suite of behavioural cases over `&dyn Store`, expanded by a macro into
//! one test per case per backend: SQLite (a file, and in memory) and PostgreSQL (a fresh schema
//! per case, dropped afterwards) when `SVC_TEST_POSTGRES_DSN` names a database. Without it the
//! PostgreSQL tests skip loudly, or fail when `SVC_TEST_REQUIRE_POSTGRES` or `CI` is set.

// Contract cases are plain async functions shared by the generated tests.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use svc_core::access::Role;
use svc_core::audit::{AuditEntry, AuditFilter, AuditOutcome};
use svc_core::build::{BuildStatus, TemplateBuild};
use svc_core::clock::add_duration;
use svc_core::error::{LimitReason, Resource};
use svc_core::quota::{GlobalLimits, QuotaLimits};
use svc_core::sandbox::{Ending, Sandbox, SandboxState, StateReason};
use svc_core::template::Template;
use svc_core::tenant::{Member, Policy, PolicyEffect, PolicyResource, Tenant, DEFAULT_TENANT};
use svc_core::worker::{LeaseAcquire, WorkerCapacity, WorkerHeartbeat, WorkerStatus};
use svc_core::{BuildId, GoDuration, OwnerId, SandboxId, Timestamp};
use svc_store::postgres::PgStore;
use svc_store::sqlite::SqliteStore;
use svc_store::{
    BuildEnding, EndedState, KeyPage, SandboxFilter, SandboxPosition, StateFilter, Store,
    StoreError, StoreResult, StoredExec,
};

/// A backend under test and whatever keeps it alive (a temporary directory, a schema).
struct Backend {
    store: Box<dyn Store>,
    _guard: Option<Box<dyn Send>>,
}

async fn sqlite_file() -> Option<Backend> {
    let file = SqliteFile::new();
    Some(Backend {
        store: file.open().await.unwrap(),
        _guard: Some(Box::new(file)),
    })
}

async fn sqlite_memory() -> Option<Backend> {
    Some(Backend {
        store: Box::new(SqliteStore::open(":memory:").await.unwrap()),
        _guard: None,
    })
}

async fn postgres() -> Option<Backend> {
    let schema = PgSchema::new()?;
    Some(Backend {
        store: schema.open().await.unwrap(),
        _guard: Some(Box::new(schema)),
    })
}

/// A store that outlives its connections: it can be opened again, and written behind the
/// store's back (as a newer binary or a manual edit could).
#[async_trait]
trait Persistent: Send + Sync {
    async fn open(&self) -> StoreResult<Box<dyn Store>>;
    /// (current, latest) schema versions, read through a store of its own.
    async fn schema_version(&self) -> (i64, i64);
    /// Runs SQL on a connection of its own.
    async fn raw(&self, sql: &str);
    /// SQL that makes the schema look written by a newer binary.
    fn newer_schema_sql(&self) -> &'static str;
}

/// A SQLite file in a temporary directory.
struct SqliteFile {
    dir: tempfile::TempDir,
}

impl SqliteFile {
    fn new() -> Self {
        SqliteFile {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("svc.db")
    }
}

#[async_trait]
impl Persistent for SqliteFile {
    async fn open(&self) -> StoreResult<Box<dyn Store>> {
        Ok(Box::new(SqliteStore::open(self.path()).await?))
    }

    async fn schema_version(&self) -> (i64, i64) {
        let store = SqliteStore::open(self.path()).await.unwrap();
        let versions = store.schema_version().await.unwrap();
        store.close().await;
        versions
    }

    async fn raw(&self, sql: &str) {
        rusqlite::Connection::open(self.path())
            .unwrap()
            .execute_batch(sql)
            .unwrap();
    }

    fn newer_schema_sql(&self) -> &'static str {
        "PRAGMA user_version = 999"
    }
}

/// Connections each PostgreSQL store of the suite pools: enough for the concurrency cases to
/// race for real, few enough for two cases at a time within the server's default limit.
const PG_POOL_SIZE: usize = 8;

/// A schema of its own in the database `SVC_TEST_POSTGRES_DSN` names, dropped when this is
/// (even after a failed case).
struct PgSchema {
    dsn: String,
    schema: String,
}

impl PgSchema {
    /// A fresh schema name, or a loud skip when no database is configured (a failure when one
    /// is required).
    fn new() -> Option<Self> {
        let Some(dsn) = std::env::var("SVC_TEST_POSTGRES_DSN")
            .ok()
            .filter(|dsn| !dsn.is_empty())
        else {
            if std::env::var_os("SVC_TEST_REQUIRE_POSTGRES").is_some()
                || std::env::var_os("CI").is_some()
            {
                panic!("PostgreSQL is required here but SVC_TEST_POSTGRES_DSN is not set");
            }
            eprintln!(
                "SKIPPED (loudly): this PostgreSQL case did not run: SVC_TEST_POSTGRES_DSN is not \
                 set (e.g. postgres://svc:svc@127.0.0.1:5432/svc_test)"
            );
            return None;
        };
        let unique: String = SandboxId::generate()
            .as_str()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        Some(PgSchema {
            dsn,
            schema: format!("svc_test_{unique}").to_ascii_lowercase(),
        })
    }

    async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.dsn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }
}

#[async_trait]
impl Persistent for PgSchema {
    async fn open(&self) -> StoreResult<Box<dyn Store>> {
        Ok(Box::new(
            PgStore::connect_in_schema(&self.dsn, &self.schema, PG_POOL_SIZE).await?,
        ))
    }

    async fn schema_version(&self) -> (i64, i64) {
        let store = PgStore::connect_in_schema(&self.dsn, &self.schema, 1)
            .await
            .unwrap();
        let versions = store.schema_version().await.unwrap();
        store.close().await;
        versions
    }

    async fn raw(&self, sql: &str) {
        self.client()
            .await
            .batch_execute(&format!("SET search_path = {}; {sql}", self.schema))
            .await
            .unwrap();
    }

    fn newer_schema_sql(&self) -> &'static str {
        "INSERT INTO schema_migrations (version) VALUES (999)"
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let (dsn, schema) = (self.dsn.clone(), self.schema.clone());
        // Drop cannot await; a short-lived runtime on its own thread drops the schema.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (client, connection) =
                    tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test schema {}: {dropped:?}", self.schema);
        }
    }
}

fn t0() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

fn at(secs: u64) -> Timestamp {
    add_duration(t0(), Duration::from_secs(secs))
}

fn sandbox(owner: &str, provider: &str, created: Timestamp) -> Sandbox {
    let id = SandboxId::generate();
    Sandbox {
        preview_domain: format!("{id}.localhost"),
        id,
        state: SandboxState::Running,
        provider: provider.into(),
        image: "alpine:latest".into(),
        memory_mb: 512,
        vcpus: 1,
        created_at: created,
        expires_at: add_duration(created, Duration::from_secs(1800)),
        metadata: BTreeMap::from([
            ("team".into(), "ml".into()),
            ("unicode".into(), "héllo ✓".into()),
        ]),
        worker_id: Some("local".into()),
        tenant_id: "default".into(),
        owner_id: OwnerId::parse(owner).ok(),
        template: None,
        network: Some("bridge".into()),
        destroyed_at: None,
        state_reason: None,
        state_message: None,
        paused_at: None,
        paused_for: std::time::Duration::ZERO,
        egress: svc_core::egress::Egress {
            mode: svc_core::egress::EgressMode::Allowlist,
            allow: vec!["example.com:443".into(), "10.0.0.0/8".into()],
        },
        env: BTreeMap::from([("A".into(), "1".into())]),
        exec_path: None,
    }
}

/// Ends `id` as destroyed by request at `at`.
async fn destroy(store: &dyn Store, id: &SandboxId, at: Timestamp) -> Option<Sandbox> {
    store
        .end_sandbox(
            id,
            EndedState::Destroyed,
            &Ending::because(StateReason::DestroyedByRequest),
            at,
        )
        .await
        .unwrap()
}

fn template(name: &str) -> Template {
    Template {
        name: name.into(),
        tenant_id: None,
        image: "python:3.12".into(),
        memory_mb: 1024,
        vcpus: 2,
        ttl: GoDuration::from_secs(3600),
        provider: "mock".into(),
        metadata: BTreeMap::from([("k".into(), "v".into())]),
        egress: svc_core::egress::Egress {
            mode: svc_core::egress::EgressMode::None,
            allow: Vec::new(),
        },
        warm_pool: 2,
        warm_ready: 0,
        created_at: at(0),
        updated_at: at(0),
    }
}

async fn sandbox_round_trips(store: &dyn Store) {
    let sb = sandbox("alice", "mock", at(0));
    store.insert_sandbox(&sb).await.unwrap();
    assert_eq!(store.get_sandbox(&sb.id).await.unwrap(), Some(sb.clone()));
    assert_eq!(
        store.get_sandbox(&SandboxId::generate()).await.unwrap(),
        None
    );
    let err = store.insert_sandbox(&sb).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                entity: Resource::Sandbox,
                ..
            }
        ),
        "{err:?}"
    );
}

async fn list_filters_and_orders_newest_first(store: &dyn Store) {
    let a = sandbox("alice", "mock", at(1));
    let b = sandbox("bob", "docker", at(2));
    let c = sandbox("alice", "docker", at(3));
    for sb in [&a, &b, &c] {
        store.insert_sandbox(sb).await.unwrap();
    }
    destroy(store, &b.id, at(4)).await;
    let ids = |list: Vec<Sandbox>| list.into_iter().map(|s| s.id).collect::<Vec<_>>();
    let all_active = store
        .list_sandboxes(&SandboxFilter::default())
        .await
        .unwrap();
    assert_eq!(ids(all_active), vec![c.id.clone(), a.id.clone()]);
    let everything = SandboxFilter {
        state: StateFilter::All,
        ..SandboxFilter::default()
    };
    assert_eq!(
        ids(store.list_sandboxes(&everything).await.unwrap()),
        vec![c.id.clone(), b.id.clone(), a.id.clone()]
    );
    let destroyed = SandboxFilter {
        state: StateFilter::Only(SandboxState::Destroyed),
        ..SandboxFilter::default()
    };
    assert_eq!(
        ids(store.list_sandboxes(&destroyed).await.unwrap()),
        vec![b.id.clone()]
    );
    let alice_docker = SandboxFilter {
        owner_id: Some("alice".into()),
        provider: Some("docker".into()),
        ..SandboxFilter::default()
    };
    assert_eq!(
        ids(store.list_sandboxes(&alice_docker).await.unwrap()),
        vec![c.id.clone()]
    );
    let other_tenant = SandboxFilter {
        tenant_id: Some("acme".into()),
        ..SandboxFilter::default()
    };
    assert!(store
        .list_sandboxes(&other_tenant)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.count_active_sandboxes(None).await.unwrap(), 2);
    assert_eq!(
        store.count_active_sandboxes(Some("alice")).await.unwrap(),
        2
    );
    assert_eq!(store.count_active_sandboxes(Some("bob")).await.unwrap(), 0);
    assert_eq!(
        store.count_sandboxes_on_provider("docker").await.unwrap(),
        1
    );
    assert_eq!(store.count_sandboxes_on_provider("mock").await.unwrap(), 1);
    assert_eq!(
        store
            .count_sandboxes_on_provider("firecracker")
            .await
            .unwrap(),
        0
    );
}

async fn destroy_happens_once(store: &dyn Store) {
    let sb = sandbox("", "mock", at(0));
    store.insert_sandbox(&sb).await.unwrap();
    let destroyed = destroy(store, &sb.id, at(10)).await.unwrap();
    assert_eq!(destroyed.state, SandboxState::Destroyed);
    assert_eq!(destroyed.destroyed_at, Some(at(10)));
    assert_eq!(
        destroyed.state_reason,
        Some(StateReason::DestroyedByRequest)
    );
    assert_eq!(destroyed.state_message.as_deref(), Some(""));
    assert_eq!(destroy(store, &sb.id, at(11)).await, None);
    assert_eq!(destroy(store, &SandboxId::generate(), at(11)).await, None);
    assert_eq!(
        store
            .get_sandbox(&sb.id)
            .await
            .unwrap()
            .unwrap()
            .destroyed_at,
        Some(at(10))
    );
    assert_eq!(
        store.set_sandbox_expiry(&sb.id, at(99)).await.unwrap(),
        None,
        "destroyed sandboxes cannot be extended"
    );
}

async fn expiry_and_purge(store: &dyn Store) {
    let early = sandbox("", "mock", at(0));
    let mut late = sandbox("", "mock", at(0));
    late.expires_at = at(7200);
    store.insert_sandbox(&early).await.unwrap();
    store.insert_sandbox(&late).await.unwrap();
    let expired = store.list_expired_sandboxes(at(1800)).await.unwrap();
    assert_eq!(
        expired.iter().map(|s| &s.id).collect::<Vec<_>>(),
        vec![&early.id]
    );
    let extended = store
        .set_sandbox_expiry(&early.id, at(9000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(extended.expires_at, at(9000));
    assert!(store
        .list_expired_sandboxes(at(1800))
        .await
        .unwrap()
        .is_empty());
    destroy(store, &early.id, at(100)).await;
    let failed = creating("", at(0));
    store.insert_sandbox(&failed).await.unwrap();
    let failed = store
        .end_sandbox(
            &failed.id,
            EndedState::Error,
            &Ending {
                reason: StateReason::SpawnFailed,
                message: "engine said no".into(),
            },
            at(100),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(failed.state, SandboxState::Error);
    assert_eq!(failed.destroyed_at, None, "only destroyed ones carry it");
    assert_eq!(failed.state_message.as_deref(), Some("engine said no"));
    assert_eq!(store.purge_destroyed_before(at(100)).await.unwrap(), 0);
    assert_eq!(store.purge_destroyed_before(at(101)).await.unwrap(), 2);
    assert_eq!(store.get_sandbox(&early.id).await.unwrap(), None);
    assert_eq!(store.get_sandbox(&failed.id).await.unwrap(), None);
    assert!(
        store.get_sandbox(&late.id).await.unwrap().is_some(),
        "running sandboxes are never purged"
    );
}

/// Pause and resume (decisions §7): a paused sandbox holds its runtime and does not expire;
/// resume moves its expiry and adds to its paused total; both happen once.
async fn pause_and_resume(store: &dyn Store) {
    let sandbox = sandbox("pauser", "mock", at(0));
    store.insert_sandbox(&sandbox).await.unwrap();
    let paused = store
        .pause_sandbox(&sandbox.id, at(100))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(paused.state, SandboxState::Paused);
    assert_eq!(paused.paused_at, Some(at(100)));
    assert_eq!(
        store.pause_sandbox(&sandbox.id, at(101)).await.unwrap(),
        None
    );
    assert_eq!(
        store.count_active_sandboxes(Some("pauser")).await.unwrap(),
        1
    );
    assert!(
        store
            .list_expired_sandboxes(sandbox.expires_at)
            .await
            .unwrap()
            .iter()
            .all(|s| s.id != sandbox.id),
        "a paused sandbox does not expire"
    );
    let filter = SandboxFilter {
        state: StateFilter::Only(SandboxState::Paused),
        ..SandboxFilter::default()
    };
    assert_eq!(store.list_sandboxes(&filter).await.unwrap().len(), 1);
    assert_eq!(
        store.get_sandbox(&sandbox.id).await.unwrap().unwrap(),
        paused
    );

    let resumed = store
        .resume_sandbox(&sandbox.id, at(130))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resumed.state, SandboxState::Running);
    assert_eq!(resumed.paused_at, None);
    assert_eq!(
        resumed.expires_at,
        add_duration(sandbox.expires_at, Duration::from_secs(30))
    );
    assert_eq!(resumed.paused_for, Duration::from_secs(30));
    assert_eq!(
        resumed,
        store.get_sandbox(&sandbox.id).await.unwrap().unwrap(),
        "the answer is the stored record"
    );
    assert_eq!(
        store.resume_sandbox(&sandbox.id, at(131)).await.unwrap(),
        None
    );
    // A second pause adds to the total; a paused sandbox can be destroyed.
    store
        .pause_sandbox(&sandbox.id, at(200))
        .await
        .unwrap()
        .unwrap();
    let again = store
        .resume_sandbox(&sandbox.id, at(210))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.paused_for, Duration::from_secs(40));
    store
        .pause_sandbox(&sandbox.id, at(300))
        .await
        .unwrap()
        .unwrap();
    assert!(destroy(store, &sandbox.id, at(301)).await.is_some());
    assert_eq!(
        store.count_active_sandboxes(Some("pauser")).await.unwrap(),
        0
    );
}

async fn template_crud(store: &dyn Store) {
    let t = template("py");
    store.insert_template(&t).await.unwrap();
    let err = store.insert_template(&t).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                entity: Resource::Template,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(store.get_template("py").await.unwrap(), Some(t.clone()));
    store.insert_template(&template("alpha")).await.unwrap();
    let names: Vec<_> = store
        .list_templates(&KeyPage::ALL, None)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["alpha", "py"]);
    let mut changed = t.clone();
    changed.image = "node:22".into();
    changed.warm_pool = 0;
    changed.created_at = at(500);
    changed.updated_at = at(60);
    let stored = store.update_template(&changed).await.unwrap().unwrap();
    assert_eq!(stored.image, "node:22");
    assert_eq!(stored.warm_pool, 0, "update writes warm_pool");
    assert_eq!(stored.created_at, t.created_at, "update keeps created_at");
    assert_eq!(stored.updated_at, at(60));
    assert_eq!(
        store.update_template(&template("missing")).await.unwrap(),
        None
    );
    assert!(store.delete_template("py", None).await.unwrap());
    assert!(!store.delete_template("py", None).await.unwrap());
    assert_eq!(store.get_template("py").await.unwrap(), None);
}

fn tenant_template(name: &str, tenant: Option<&str>) -> Template {
    Template {
        tenant_id: tenant.map(str::to_owned),
        ..template(name)
    }
}

/// Templates belong to a tenant or to none (decisions §30): names are unique across tenants, a
/// tenant's list holds the global templates and its own in name order, page by page, and an
/// update or delete applies only to the template of the tenant it names.
async fn templates_belong_to_tenants(store: &dyn Store) {
    for (name, tenant) in [
        ("alpha", Some("acme")),
        ("beta", Some("globex")),
        ("delta", Some("acme")),
        ("gamma", None),
        ("omega", None),
    ] {
        store
            .insert_template(&tenant_template(name, tenant))
            .await
            .unwrap();
    }
    let err = store
        .insert_template(&tenant_template("alpha", Some("globex")))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                entity: Resource::Template,
                ..
            }
        ),
        "a name is taken across tenants: {err:?}"
    );
    assert_eq!(
        store.get_template("alpha").await.unwrap(),
        Some(tenant_template("alpha", Some("acme")))
    );
    let names = |templates: Vec<Template>| -> Vec<String> {
        templates.into_iter().map(|t| t.name).collect()
    };
    let page = |after: Option<&str>, limit: Option<u32>| KeyPage {
        after: after.map(str::to_owned),
        limit,
    };
    for (tenant, wanted) in [
        (None, &["alpha", "beta", "delta", "gamma", "omega"][..]),
        (Some("acme"), &["alpha", "delta", "gamma", "omega"][..]),
        (Some("globex"), &["beta", "gamma", "omega"][..]),
        (Some("initech"), &["gamma", "omega"][..]),
    ] {
        let listed = store.list_templates(&KeyPage::ALL, tenant).await.unwrap();
        assert_eq!(names(listed), wanted, "{tenant:?}");
    }
    let acme = Some("acme");
    let first = store
        .list_templates(&page(None, Some(2)), acme)
        .await
        .unwrap();
    assert_eq!(names(first), ["alpha", "delta"]);
    let second = store
        .list_templates(&page(Some("delta"), Some(2)), acme)
        .await
        .unwrap();
    assert_eq!(names(second), ["gamma", "omega"]);
    let after_last = store
        .list_templates(&page(Some("omega"), Some(2)), acme)
        .await
        .unwrap();
    assert!(after_last.is_empty());

    // An update matches the tenant too, and keeps it.
    for wrong in [Some("globex"), None] {
        let mut other = tenant_template("alpha", wrong);
        other.image = "evil:1".into();
        assert_eq!(
            store.update_template(&other).await.unwrap(),
            None,
            "{wrong:?}"
        );
    }
    let mut changed = tenant_template("alpha", acme);
    changed.image = "node:22".into();
    let stored = store.update_template(&changed).await.unwrap().unwrap();
    assert_eq!(stored.image, "node:22");
    assert_eq!(stored.tenant_id.as_deref(), acme);
    let mut global = tenant_template("gamma", None);
    global.image = "node:22".into();
    let stored = store.update_template(&global).await.unwrap().unwrap();
    assert_eq!(stored.tenant_id, None, "a global template stays global");

    // A delete naming another tenant deletes nothing, builds included.
    let kept = build("alpha", 1);
    store.insert_build(&kept, "w1").await.unwrap();
    for wrong in [Some("globex"), None] {
        assert!(
            !store.delete_template("alpha", wrong).await.unwrap(),
            "{wrong:?}"
        );
    }
    assert_eq!(
        store.get_template("alpha").await.unwrap().map(|t| t.image),
        Some("node:22".to_owned())
    );
    assert_eq!(
        store.get_build("alpha", &kept.build_id).await.unwrap(),
        Some(kept.clone())
    );
    assert!(!store.delete_template("gamma", acme).await.unwrap());
    assert!(store.delete_template("alpha", acme).await.unwrap());
    assert_eq!(
        store.get_build("alpha", &kept.build_id).await.unwrap(),
        None
    );
    assert!(store.delete_template("gamma", None).await.unwrap());
    let listed = store.list_templates(&KeyPage::ALL, acme).await.unwrap();
    assert_eq!(names(listed), ["delta", "omega"]);
}

fn build(template: &str, started: u64) -> TemplateBuild {
    TemplateBuild {
        build_id: BuildId::generate(),
        template: template.to_owned(),
        status: BuildStatus::Running,
        image: None,
        started_at: at(started),
        ended_at: None,
        error: None,
    }
}

/// Builds are listed newest first, end once (one caller wins), keep only the newest ended
/// ones with their logs, and go with their template.
async fn template_builds_end_once_and_are_trimmed(store: &dyn Store) {
    store.insert_template(&template("web")).await.unwrap();
    let first = build("web", 10);
    store.insert_build(&first, "w1").await.unwrap();
    let err = store.insert_build(&first, "w1").await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                entity: Resource::Build,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        store.get_build("web", &first.build_id).await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        store.get_build("other", &first.build_id).await.unwrap(),
        None,
        "a build is found under its own template only"
    );
    let lines: Vec<String> = (0..3).map(|i| format!("{{\"n\":{i}}}")).collect();
    store
        .append_build_log(&first.build_id, &lines[..2])
        .await
        .unwrap();
    store
        .append_build_log(&first.build_id, &lines[2..])
        .await
        .unwrap();
    let log = store.build_log_after(&first.build_id, 0, 10).await.unwrap();
    assert_eq!(
        log.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>(),
        lines,
        "lines come back in the order appended"
    );
    let rest = store
        .build_log_after(&first.build_id, log[0].0, 1)
        .await
        .unwrap();
    assert_eq!(
        rest,
        vec![log[1].clone()],
        "after a position, at most limit"
    );

    let second = build("web", 20);
    store.insert_build(&second, "w2").await.unwrap();
    let running = store.list_running_builds("w1").await.unwrap();
    assert_eq!(running, vec![first.clone()], "only w1's running builds");
    let listed = store.list_builds("web", 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|b| &b.build_id).collect::<Vec<_>>(),
        [&second.build_id, &first.build_id],
        "newest first"
    );

    let ending = BuildEnding {
        status: BuildStatus::Failed,
        image: None,
        error: Some("step 2 failed".into()),
        at: at(30),
    };
    let ended = store
        .end_build(&first.build_id, &ending, 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, BuildStatus::Failed);
    assert_eq!(ended.error.as_deref(), Some("step 2 failed"));
    assert_eq!(ended.ended_at, Some(at(30)));
    assert_eq!(
        store.end_build(&first.build_id, &ending, 1).await.unwrap(),
        None,
        "a build ends once"
    );
    assert!(store.list_running_builds("w1").await.unwrap().is_empty());

    // Ending the second keeps only the newest ended build: the first goes with its log.
    let succeeded = BuildEnding {
        status: BuildStatus::Succeeded,
        image: Some("svc-templates/web:x".into()),
        error: None,
        at: at(40),
    };
    store
        .end_build(&second.build_id, &succeeded, 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.get_build("web", &first.build_id).await.unwrap(),
        None,
        "older ended builds are trimmed"
    );
    assert!(store
        .build_log_after(&first.build_id, 0, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .get_build("web", &second.build_id)
            .await
            .unwrap()
            .unwrap()
            .image
            .as_deref(),
        Some("svc-templates/web:x")
    );

    assert_eq!(
        store.list_built_images("w2").await.unwrap(),
        ["svc-templates/web:x"],
        "a succeeded build's image is recorded for the worker that ran it"
    );
    assert!(store.list_built_images("w1").await.unwrap().is_empty());
    store
        .append_build_log(&second.build_id, &lines)
        .await
        .unwrap();
    assert!(store.delete_template("web", None).await.unwrap());
    assert_eq!(
        store.list_built_images("w2").await.unwrap(),
        ["svc-templates/web:x"],
        "the image outlives its template until it is removed"
    );
    assert!(store
        .forget_built_image("svc-templates/web:x")
        .await
        .unwrap());
    assert!(!store
        .forget_built_image("svc-templates/web:x")
        .await
        .unwrap());
    assert!(store.list_built_images("w2").await.unwrap().is_empty());
    assert!(store.list_builds("web", 10).await.unwrap().is_empty());
    assert!(store
        .build_log_after(&second.build_id, 0, 10)
        .await
        .unwrap()
        .is_empty());
}

/// A creating sandbox shows how far its pull is until it runs.
async fn creating_messages_last_until_running(store: &dyn Store) {
    let mut creating = sandbox("puller", "docker", at(1));
    creating.state = SandboxState::Creating;
    store.insert_sandbox(&creating).await.unwrap();
    assert!(store
        .set_creating_message(&creating.id, "pulling image a: 1 of 2 MB")
        .await
        .unwrap());
    let shown = store.get_sandbox(&creating.id).await.unwrap().unwrap();
    assert_eq!(
        shown.state_message.as_deref(),
        Some("pulling image a: 1 of 2 MB")
    );
    let running = store
        .mark_sandbox_running(&creating.id, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running.state_message, None, "running clears it");
    assert!(!store
        .set_creating_message(&creating.id, "late")
        .await
        .unwrap());
}

/// The images of sandboxes holding a runtime, each once.
async fn active_images_are_those_of_live_sandboxes(store: &dyn Store) {
    let mut live = sandbox("img-a", "docker", at(1));
    live.image = "svc-templates/a:1".into();
    store.insert_sandbox(&live).await.unwrap();
    let mut twin = sandbox("img-b", "docker", at(1));
    twin.image = "svc-templates/a:1".into();
    store.insert_sandbox(&twin).await.unwrap();
    let mut gone = sandbox("img-c", "docker", at(1));
    gone.image = "svc-templates/a:0".into();
    store.insert_sandbox(&gone).await.unwrap();
    destroy(store, &gone.id, at(100)).await.unwrap();
    let images = store.active_images().await.unwrap();
    assert_eq!(images, ["svc-templates/a:1"]);
}

/// Keyset pages of templates: each starts after the previous page's last name, so names
/// inserted or deleted between pages shift nothing.
async fn template_pages_are_stable_under_inserts_and_deletes(store: &dyn Store) {
    for name in ["a", "b", "c", "d", "e"] {
        store.insert_template(&template(name)).await.unwrap();
    }
    let names = |templates: Vec<Template>| -> Vec<String> {
        templates.into_iter().map(|t| t.name).collect()
    };
    let page = |after: Option<&str>| KeyPage {
        after: after.map(str::to_owned),
        limit: Some(2),
    };
    let first = store.list_templates(&page(None), None).await.unwrap();
    assert_eq!(names(first), ["a", "b"]);
    store.delete_template("c", None).await.unwrap();
    store.insert_template(&template("bb")).await.unwrap();
    store.insert_template(&template("0")).await.unwrap();
    let second = store.list_templates(&page(Some("b")), None).await.unwrap();
    assert_eq!(
        names(second),
        ["bb", "d"],
        "after b: the new bb, not c (gone)"
    );
    let last = store.list_templates(&page(Some("d")), None).await.unwrap();
    assert_eq!(names(last), ["e"]);
}

async fn concurrent_writes_are_all_kept(store: &dyn Store) {
    let sandboxes: Vec<_> = (0..64).map(|i| sandbox("", "mock", at(i))).collect();
    futures_join_all(sandboxes.iter().map(|sb| store.insert_sandbox(sb))).await;
    assert_eq!(store.count_active_sandboxes(None).await.unwrap(), 64);
    let expired = Ending::because(StateReason::Expired);
    let destroyed = futures_join_all(
        sandboxes
            .iter()
            .map(|sb| store.end_sandbox(&sb.id, EndedState::Destroyed, &expired, at(100))),
    )
    .await;
    assert_eq!(destroyed.into_iter().filter(|r| r.is_some()).count(), 64);
    assert_eq!(store.count_active_sandboxes(None).await.unwrap(), 0);
}

fn creating(owner: &str, created: Timestamp) -> Sandbox {
    Sandbox {
        state: SandboxState::Creating,
        ..sandbox(owner, "mock", created)
    }
}

fn capacity(max_sandboxes: u64, per_owner: u64) -> GlobalLimits {
    GlobalLimits {
        max_sandboxes,
        max_sandboxes_per_owner: per_owner,
        max_ttl: GoDuration::from_secs(3600),
        max_exec_timeout: GoDuration::ZERO,
    }
}

const MINUTE: Duration = Duration::from_secs(60);

async fn admission_counts_and_records_in_one_write(store: &dyn Store) {
    let limits = capacity(3, 2);
    let a1 = creating("alice", at(1));
    let admitted = store
        .admit_sandbox(&a1, MINUTE, limits, MINUTE)
        .await
        .unwrap();
    assert!(admitted.allowed, "{admitted:?}");
    assert_eq!(
        store.get_sandbox(&a1.id).await.unwrap().unwrap().state,
        SandboxState::Creating,
        "recorded as creating"
    );
    let a2 = creating("alice", at(2));
    assert!(
        store
            .admit_sandbox(&a2, MINUTE, limits, MINUTE)
            .await
            .unwrap()
            .allowed
    );
    let a3 = creating("alice", at(3));
    let denied = store
        .admit_sandbox(&a3, MINUTE, limits, MINUTE)
        .await
        .unwrap();
    assert_eq!(denied.reason, Some(LimitReason::MaxOwnerSandboxes));
    assert_eq!(
        (denied.active_owner_sandboxes, denied.max_owner_sandboxes),
        (2, 2)
    );
    assert_eq!(
        store.get_sandbox(&a3.id).await.unwrap(),
        None,
        "nothing written"
    );
    assert!(
        store
            .admit_sandbox(&creating("", at(4)), MINUTE, limits, MINUTE)
            .await
            .unwrap()
            .allowed
    );
    let full = store
        .admit_sandbox(&creating("bob", at(5)), MINUTE, limits, MINUTE)
        .await
        .unwrap();
    assert_eq!(full.reason, Some(LimitReason::MaxSandboxes));
    // Ended sandboxes free capacity; creating ones hold it like running ones.
    let running = store
        .mark_sandbox_running(&a1.id, Some("agent"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running.state, SandboxState::Running);
    assert_eq!(running.exec_path.as_deref(), Some("agent"));
    assert_eq!(
        store.get_sandbox(&a1.id).await.unwrap().unwrap().exec_path,
        running.exec_path,
        "the exec path is kept"
    );
    assert_eq!(
        store.mark_sandbox_running(&a1.id, None).await.unwrap(),
        None
    );
    store
        .end_sandbox(
            &a2.id,
            EndedState::Error,
            &Ending::because(StateReason::SpawnFailed),
            at(6),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.count_active_sandboxes(None).await.unwrap(), 2);
    assert!(
        store
            .admit_sandbox(&creating("bob", at(7)), MINUTE, limits, MINUTE)
            .await
            .unwrap()
            .allowed
    );
    let err = store
        .admit_sandbox(&a1, MINUTE, capacity(0, 0), MINUTE)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
}

async fn admission_applies_owner_quotas_in_order(store: &dyn Store) {
    let limits = capacity(10, 1);
    let quota = QuotaLimits {
        max_sandboxes: 2,
        max_ttl: GoDuration::from_secs(120),
        max_exec_timeout: GoDuration::ZERO,
    };
    store.put_quota("carol", quota, at(0)).await.unwrap();
    let carol = OwnerId::parse("carol").unwrap();
    // TTL first: the quota's 2m replaces the global 1h, and a TTL denial wins over capacity.
    let too_long = store
        .check_admission(Some(&carol), Duration::from_secs(121), limits)
        .await
        .unwrap();
    assert_eq!(too_long.reason, Some(LimitReason::MaxTtl));
    assert_eq!(too_long.max_ttl, GoDuration::from_secs(120));
    for i in 0..2 {
        assert!(
            store
                .admit_sandbox(&creating("carol", at(i)), MINUTE, limits, MINUTE)
                .await
                .unwrap()
                .allowed
        );
    }
    let check = store
        .check_admission(Some(&carol), MINUTE, limits)
        .await
        .unwrap();
    assert_eq!(check.reason, Some(LimitReason::MaxOwnerSandboxes));
    assert_eq!(
        (
            check.active_sandboxes,
            check.max_sandboxes,
            check.active_owner_sandboxes,
            check.max_owner_sandboxes
        ),
        (2, 10, 2, 2),
        "every count is reported"
    );
    // Without the quota the global per-owner limit (1) applies again.
    assert!(store.delete_quota("carol").await.unwrap());
    let global = store
        .check_admission(Some(&carol), MINUTE, limits)
        .await
        .unwrap();
    assert_eq!(global.max_owner_sandboxes, 1);
    assert_eq!(global.max_ttl, GoDuration::from_secs(3600));
    let anonymous = store.check_admission(None, MINUTE, limits).await.unwrap();
    assert!(anonymous.allowed, "{anonymous:?}");
    assert_eq!(anonymous.active_owner_sandboxes, 0);
    assert_eq!(anonymous.active_sandboxes, 2);
}

async fn quota_crud(store: &dyn Store) {
    assert_eq!(store.get_quota("dave").await.unwrap(), None);
    assert!(!store.delete_quota("dave").await.unwrap());
    let first = QuotaLimits {
        max_sandboxes: 3,
        max_ttl: GoDuration::ZERO,
        max_exec_timeout: GoDuration::from_secs(30),
    };
    let saved = store.put_quota("dave", first, at(1)).await.unwrap();
    assert_eq!(saved.owner_id, "dave");
    assert_eq!(saved.limits(), first);
    assert_eq!((saved.created_at, saved.updated_at), (at(1), at(1)));
    let second = QuotaLimits {
        max_sandboxes: 0,
        max_ttl: GoDuration::from_secs(7200),
        max_exec_timeout: GoDuration::ZERO,
    };
    let replaced = store.put_quota("dave", second, at(5)).await.unwrap();
    assert_eq!(replaced.limits(), second);
    assert_eq!(
        (replaced.created_at, replaced.updated_at),
        (at(1), at(5)),
        "created_at kept"
    );
    assert_eq!(store.get_quota("dave").await.unwrap(), Some(replaced));
    store.put_quota("erin", first, at(2)).await.unwrap();
    let listed: Vec<String> = store
        .list_quotas(&KeyPage::ALL)
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.owner_id)
        .collect();
    assert_eq!(listed, ["dave", "erin"]);
    let first = KeyPage {
        after: None,
        limit: Some(1),
    };
    let listed: Vec<String> = store
        .list_quotas(&first)
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.owner_id)
        .collect();
    assert_eq!(listed, ["dave"], "a page of quotas stops at its limit");
    let summary = store.quota_summary().await.unwrap();
    assert_eq!(
        (
            summary.total,
            summary.with_max_sandboxes,
            summary.with_max_ttl,
            summary.with_max_exec_timeout
        ),
        (2, 1, 1, 1)
    );
    assert!(store.delete_quota("dave").await.unwrap());
    assert_eq!(store.get_quota("dave").await.unwrap(), None);
    assert_eq!(store.quota_summary().await.unwrap().total, 1);
}

async fn concurrent_admission_never_over_admits(store: &dyn Store) {
    let candidates: Vec<_> = (0..40).map(|i| creating("x", at(i))).collect();
    let outcomes = futures_join_all(
        candidates
            .iter()
            .map(|sb| store.admit_sandbox(sb, MINUTE, capacity(5, 0), MINUTE)),
    )
    .await;
    let admitted = outcomes.iter().filter(|o| o.allowed).count();
    assert_eq!(admitted, 5);
    assert_eq!(store.count_active_sandboxes(None).await.unwrap(), 5);
}

/// Only the owner's quota limits: the store must still serialise its admissions.
async fn concurrent_admission_respects_a_quota_alone(store: &dyn Store) {
    let limits = QuotaLimits {
        max_sandboxes: 3,
        max_ttl: GoDuration::from_secs(0),
        max_exec_timeout: GoDuration::from_secs(0),
    };
    store.put_quota("q", limits, at(0)).await.unwrap();
    let candidates: Vec<_> = (0..30).map(|i| creating("q", at(i))).collect();
    let outcomes = futures_join_all(
        candidates
            .iter()
            .map(|sb| store.admit_sandbox(sb, MINUTE, capacity(0, 0), MINUTE)),
    )
    .await;
    assert_eq!(outcomes.iter().filter(|o| o.allowed).count(), 3);
    // Without any count limit, every admission goes through.
    let free: Vec<_> = (0..10).map(|i| creating("free", at(100 + i))).collect();
    let outcomes = futures_join_all(
        free.iter()
            .map(|sb| store.admit_sandbox(sb, MINUTE, capacity(0, 0), MINUTE)),
    )
    .await;
    assert!(outcomes.iter().all(|o| o.allowed));
    assert_eq!(store.count_active_sandboxes(None).await.unwrap(), 13);
}

fn heartbeat(hostname: &str, providers: &[&str]) -> WorkerHeartbeat {
    WorkerHeartbeat {
        hostname: hostname.to_owned(),
        status: WorkerStatus::Online,
        providers: providers.iter().map(|p| (*p).to_owned()).collect(),
        capabilities: vec!["spawn".to_owned()],
        capacity: WorkerCapacity {
            max_sandboxes: 4,
            max_sandboxes_per_owner: 0,
        },
        url: None,
    }
}

async fn worker_registry(store: &dyn Store) {
    assert_eq!(store.get_worker("w1").await.unwrap(), None);
    let first = store
        .upsert_worker("w1", &heartbeat("host-a", &["mock"]), at(1))
        .await
        .unwrap();
    assert_eq!(first.id, "w1");
    assert_eq!(first.providers, ["mock"]);
    assert_eq!(first.capacity.max_sandboxes, 4);
    assert_eq!(
        (first.created_at, first.updated_at, first.last_heartbeat),
        (at(1), at(1), at(1))
    );
    let again = store
        .upsert_worker(
            "w1",
            &WorkerHeartbeat {
                url: Some("https://w1:7424".to_owned()),
                ..heartbeat("host-b", &["mock", "docker"])
            },
            at(9),
        )
        .await
        .unwrap();
    assert_eq!(again.created_at, at(1), "created_at kept");
    assert_eq!((again.last_heartbeat, again.updated_at), (at(9), at(9)));
    assert_eq!(again.hostname, "host-b");
    assert_eq!(again.url.as_deref(), Some("https://w1:7424"));
    assert_eq!(store.get_worker("w1").await.unwrap(), Some(again.clone()));
    let offline = store
        .set_worker_status("w1", WorkerStatus::Offline, at(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(offline.status, WorkerStatus::Offline);
    assert_eq!(
        offline.last_heartbeat,
        at(9),
        "a status change is not a heartbeat"
    );
    assert_eq!(
        store
            .set_worker_status("nobody", WorkerStatus::Offline, at(10))
            .await
            .unwrap(),
        None
    );
    // Drained, a worker stays draining while its heartbeats say online; another status (and
    // undraining) is taken.
    store
        .set_worker_status("w1", WorkerStatus::Draining, at(11))
        .await
        .unwrap();
    let beat = |status| WorkerHeartbeat {
        status,
        ..heartbeat("host-b", &["mock"])
    };
    let kept = store
        .upsert_worker("w1", &beat(WorkerStatus::Online), at(12))
        .await
        .unwrap();
    assert_eq!(
        (kept.status, kept.last_heartbeat),
        (WorkerStatus::Draining, at(12))
    );
    let failing = store
        .upsert_worker("w1", &beat(WorkerStatus::Unhealthy), at(13))
        .await
        .unwrap();
    assert_eq!(failing.status, WorkerStatus::Unhealthy);
    store
        .set_worker_status("w1", WorkerStatus::Draining, at(14))
        .await
        .unwrap();
    store
        .set_worker_status("w1", WorkerStatus::Online, at(15))
        .await
        .unwrap();
    let undrained = store
        .upsert_worker("w1", &beat(WorkerStatus::Online), at(16))
        .await
        .unwrap();
    assert_eq!(undrained.status, WorkerStatus::Online);
    store
        .upsert_worker("w0", &heartbeat("host-c", &[]), at(2))
        .await
        .unwrap();
    let ids: Vec<String> = store
        .list_workers(&KeyPage::ALL)
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(ids, ["w0", "w1"]);
    let page = KeyPage {
        after: Some("w0".into()),
        limit: Some(5),
    };
    let ids: Vec<String> = store
        .list_workers(&page)
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(ids, ["w1"], "a page of workers starts after its key");
    assert!(store.delete_worker("w0").await.unwrap());
    assert!(!store.delete_worker("w0").await.unwrap());
}

fn acquired(outcome: LeaseAcquire) -> svc_core::worker::Lease {
    match outcome {
        LeaseAcquire::Acquired(lease) => lease,
        LeaseAcquire::Held(lease) => panic!("expected to acquire, held: {lease:?}"),
    }
}

async fn leases_are_holder_and_expiry_aware(store: &dyn Store) {
    let ttl = Duration::from_secs(10);
    let first = acquired(store.acquire_lease("r1", "a", ttl, at(0)).await.unwrap());
    assert_eq!((first.holder_id.as_str(), first.generation), ("a", 1));
    assert_eq!(first.expires_at, at(10));
    // The holder again: the same generation, a later expiry.
    let again = acquired(store.acquire_lease("r1", "a", ttl, at(5)).await.unwrap());
    assert_eq!((again.generation, again.expires_at), (1, at(15)));
    // Another worker while it is active: refused, told who holds it.
    match store.acquire_lease("r1", "b", ttl, at(14)).await.unwrap() {
        LeaseAcquire::Held(held) => assert_eq!(held.holder_id, "a"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.renew_lease("r1", "b", ttl, at(14)).await.unwrap(),
        None,
        "renew by a non-holder"
    );
    let renewed = store
        .renew_lease("r1", "a", ttl, at(14))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((renewed.generation, renewed.expires_at), (1, at(24)));
    // Expiry, then takeover: the generation grows.
    assert_eq!(
        store.renew_lease("r1", "a", ttl, at(24)).await.unwrap(),
        None,
        "expired"
    );
    let taken = acquired(store.acquire_lease("r1", "b", ttl, at(24)).await.unwrap());
    assert_eq!((taken.holder_id.as_str(), taken.generation), ("b", 2));
    // Release: holder only; the generation is kept for the next holder.
    assert!(!store.release_lease("r1", "a", at(25)).await.unwrap());
    assert!(store.release_lease("r1", "b", at(25)).await.unwrap());
    let released = store.get_lease("r1").await.unwrap().unwrap();
    assert!(!released.active_at(at(25)));
    let next = acquired(store.acquire_lease("r1", "a", ttl, at(25)).await.unwrap());
    assert_eq!(next.generation, 3);
    // Renewing everything a holder holds (the heartbeat).
    acquired(store.acquire_lease("r2", "a", ttl, at(25)).await.unwrap());
    acquired(store.acquire_lease("r3", "c", ttl, at(25)).await.unwrap());
    assert_eq!(
        store.renew_leases_held_by("a", ttl, at(30)).await.unwrap(),
        2
    );
    assert_eq!(
        store.get_lease("r2").await.unwrap().unwrap().expires_at,
        at(40)
    );
    let counts = store.lease_counts(at(36)).await.unwrap();
    assert_eq!((counts.total, counts.active, counts.expired), (3, 2, 1));
    assert_eq!(counts.by_holder.get("a"), Some(&2));
    assert_eq!(
        counts.by_holder.get("c"),
        None,
        "expired leases are not held"
    );
    let listed: Vec<String> = store
        .list_leases()
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.resource_id)
        .collect();
    assert_eq!(listed, ["r1", "r2", "r3"]);
}

async fn lease_races_have_one_winner_and_growing_generations(store: &dyn Store) {
    let ttl = Duration::from_secs(10);
    let mut last_generation = 0;
    for round in 0..3u64 {
        // Every round starts after the previous holder's lease lapsed.
        let now = at(round * 100);
        let holders: Vec<String> = (0..50).map(|i| format!("w{round}-{i}")).collect();
        let outcomes = futures_join_all(
            holders
                .iter()
                .map(|h| store.acquire_lease("race", h, ttl, now)),
        )
        .await;
        let winners: Vec<_> = outcomes
            .into_iter()
            .filter_map(|o| match o {
                LeaseAcquire::Acquired(lease) => Some(lease),
                LeaseAcquire::Held(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: exactly one acquirer wins");
        assert!(winners[0].generation > last_generation);
        last_generation = winners[0].generation;
    }
}

async fn a_sandbox_lease_lives_with_its_record(store: &dyn Store) {
    let sb = creating("", at(1));
    assert!(
        store
            .admit_sandbox(&sb, MINUTE, capacity(0, 0), Duration::from_secs(30))
            .await
            .unwrap()
            .allowed
    );
    let lease = store.get_lease(sb.id.as_str()).await.unwrap().unwrap();
    assert_eq!(lease.holder_id, "local", "taken for the sandbox's worker");
    assert_eq!(
        lease.expires_at,
        add_duration(at(1), Duration::from_secs(30))
    );
    let refused = creating("", at(2));
    assert!(
        !store
            .admit_sandbox(&refused, MINUTE, capacity(1, 0), MINUTE)
            .await
            .unwrap()
            .allowed
    );
    assert_eq!(
        store.get_lease(refused.id.as_str()).await.unwrap(),
        None,
        "no lease for a denial"
    );
    destroy(store, &sb.id, at(5)).await.unwrap();
    let ended = store.get_lease(sb.id.as_str()).await.unwrap().unwrap();
    assert!(
        !ended.active_at(at(5)),
        "ending the sandbox lets its lease lapse"
    );
    assert_eq!(ended.generation, 1);
    assert_eq!(store.purge_destroyed_before(at(1000)).await.unwrap(), 1);
    assert_eq!(
        store.get_lease(sb.id.as_str()).await.unwrap(),
        None,
        "purged with the record"
    );
}

/// Keyset pages: every sandbox exactly once, newest first, while others are created and
/// destroyed between the pages; ties on `created_at` ordered by ID.
async fn pages_are_stable_under_inserts_and_deletes(store: &dyn Store) {
    let mut made = Vec::new();
    for i in 0..10 {
        // Two per second: equal creation times are told apart by ID.
        let sandbox = sandbox("pager", "mock", at(100 + i / 2));
        store.insert_sandbox(&sandbox).await.unwrap();
        made.push(sandbox);
    }
    let page = |after: Option<SandboxPosition>| SandboxFilter {
        owner_id: Some("pager".into()),
        after,
        limit: Some(3),
        ..SandboxFilter::default()
    };
    let whole: Vec<SandboxId> = store
        .list_sandboxes(&SandboxFilter {
            owner_id: Some("pager".into()),
            ..SandboxFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(whole.len(), 10);
    let mut seen = Vec::new();
    let mut after = None;
    let mut round = 0;
    loop {
        let items = store.list_sandboxes(&page(after.clone())).await.unwrap();
        assert!(items.len() <= 3);
        if items.is_empty() {
            break;
        }
        let last = items.last().unwrap();
        after = Some(SandboxPosition {
            created_at: last.created_at,
            id: last.id.to_string(),
        });
        seen.extend(items.iter().map(|s| s.id.clone()));
        // Meanwhile: a newer sandbox appears (before the cursor), and one not yet listed goes.
        store
            .insert_sandbox(&sandbox("pager", "mock", at(500 + round)))
            .await
            .unwrap();
        if round == 0 {
            destroy(store, &whole[9], at(600)).await;
        }
        round += 1;
    }
    let expected: Vec<SandboxId> = whole[..9].to_vec();
    assert_eq!(
        seen, expected,
        "no sandbox skipped or repeated, newest first"
    );
}

/// Each combination of filters (a statement of its own in both backends) selects what the
/// filters name, newest first, from a cursor on and up to a limit.
async fn every_filter_combination_lists_what_it_names(store: &dyn Store) {
    let mut made = Vec::new();
    for i in 0..24u64 {
        let mut sandbox = sandbox(
            ["alice", "bob", "carol"][(i % 3) as usize],
            ["mock", "docker"][(i % 2) as usize],
            // Pairs share a creation time: the ID orders them.
            at(100 + i / 2),
        );
        sandbox.tenant_id = ["default", "acme"][(i / 3 % 2) as usize].into();
        sandbox.worker_id =
            [Some("w1".into()), Some("w2".into()), None][(i / 4 % 3) as usize].clone();
        store.insert_sandbox(&sandbox).await.unwrap();
        if i % 5 == 0 {
            destroy(store, &sandbox.id, at(200)).await;
        }
        made.push(sandbox);
    }
    let everything = store
        .list_sandboxes(&SandboxFilter {
            state: StateFilter::All,
            ..SandboxFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(everything.len(), made.len());
    let cursor = SandboxPosition {
        created_at: everything[7].created_at,
        id: everything[7].id.to_string(),
    };
    let states = [
        StateFilter::Active,
        StateFilter::All,
        StateFilter::Only(SandboxState::Running),
        StateFilter::Only(SandboxState::Destroyed),
    ];
    let mut checked = 0;
    for state in states {
        for mask in 0..16u8 {
            for (after, limit) in [(None, None), (Some(cursor.clone()), Some(4))] {
                let filter = SandboxFilter {
                    state,
                    owner_id: (mask & 1 != 0).then(|| "alice".into()),
                    provider: (mask & 2 != 0).then(|| "docker".into()),
                    tenant_id: (mask & 4 != 0).then(|| "acme".into()),
                    worker_id: (mask & 8 != 0).then(|| "w1".into()),
                    after,
                    limit,
                };
                let expected: Vec<SandboxId> = everything
                    .iter()
                    .filter(|s| match filter.state {
                        StateFilter::Active => s.state != SandboxState::Destroyed,
                        StateFilter::All => true,
                        StateFilter::Only(state) => s.state == state,
                    })
                    .filter(|s| {
                        filter
                            .owner_id
                            .as_ref()
                            .is_none_or(|o| *o == s.owner_id.as_ref().map_or("", OwnerId::as_str))
                    })
                    .filter(|s| filter.provider.as_ref().is_none_or(|p| *p == s.provider))
                    .filter(|s| filter.tenant_id.as_ref().is_none_or(|t| *t == s.tenant_id))
                    .filter(|s| {
                        filter
                            .worker_id
                            .as_ref()
                            .is_none_or(|w| Some(w) == s.worker_id.as_ref())
                    })
                    .filter(|s| {
                        filter.after.as_ref().is_none_or(|after| {
                            (s.created_at, s.id.to_string()) < (after.created_at, after.id.clone())
                        })
                    })
                    .take(filter.limit.map_or(usize::MAX, |l| l as usize))
                    .map(|s| s.id.clone())
                    .collect();
                let listed: Vec<SandboxId> = store
                    .list_sandboxes(&filter)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
                assert_eq!(listed, expected, "{filter:?}");
                checked += usize::from(!expected.is_empty());
            }
        }
    }
    assert!(
        checked > 40,
        "most combinations select something ({checked})"
    );
}

/// An owner's newest sandbox holding a runtime: `creating`, `running` or `paused`, never an
/// ended one however new, never another owner's.
async fn an_owners_newest_active_sandbox(store: &dyn Store) {
    let newest = |owner: &'static str| async move {
        store
            .newest_active_sandbox_of_owner(owner)
            .await
            .unwrap()
            .map(|s| s.id)
    };
    assert_eq!(newest("alice").await, None);
    let first = creating("alice", at(1));
    let second = sandbox("alice", "mock", at(2));
    // Same creation time as `second`: the ID decides which is newer.
    let twin = sandbox("alice", "mock", at(2));
    let ended = sandbox("alice", "mock", at(3));
    let failed = sandbox("alice", "mock", at(4));
    let others = sandbox("bob", "mock", at(5));
    for sandbox in [&first, &second, &twin, &ended, &failed, &others] {
        store.insert_sandbox(sandbox).await.unwrap();
    }
    destroy(store, &ended.id, at(10)).await;
    store
        .end_sandbox(
            &failed.id,
            EndedState::Error,
            &Ending::because(StateReason::ProviderFailed),
            at(10),
        )
        .await
        .unwrap()
        .unwrap();
    let (higher, lower) = if twin.id.to_string() > second.id.to_string() {
        (&twin, &second)
    } else {
        (&second, &twin)
    };
    let found = store
        .newest_active_sandbox_of_owner("alice")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found, store.get_sandbox(&higher.id).await.unwrap().unwrap());
    store
        .pause_sandbox(&higher.id, at(11))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        newest("alice").await,
        Some(higher.id.clone()),
        "paused holds a runtime"
    );
    destroy(store, &higher.id, at(12)).await;
    assert_eq!(newest("alice").await, Some(lower.id.clone()));
    destroy(store, &lower.id, at(12)).await;
    assert_eq!(
        newest("alice").await,
        Some(first.id.clone()),
        "creating holds one"
    );
    destroy(store, &first.id, at(12)).await;
    assert_eq!(newest("alice").await, None);
    assert_eq!(newest("bob").await, Some(others.id.clone()));
}

/// Sandboxes holding a runtime, counted per worker in one query; ended ones and workers with
/// none are left out.
async fn active_sandboxes_are_counted_per_worker(store: &dyn Store) {
    assert!(store
        .count_active_sandboxes_by_worker()
        .await
        .unwrap()
        .is_empty());
    let on = |worker: Option<&str>, state: SandboxState, secs: u64| Sandbox {
        worker_id: worker.map(str::to_owned),
        state,
        ..sandbox("", "mock", at(secs))
    };
    let kept = [
        on(Some("w1"), SandboxState::Running, 1),
        on(Some("w1"), SandboxState::Creating, 2),
        on(Some("w2"), SandboxState::Running, 3),
        on(None, SandboxState::Running, 4),
    ];
    let gone = [
        on(Some("w2"), SandboxState::Running, 5),
        on(Some("w3"), SandboxState::Running, 6),
    ];
    for sandbox in kept.iter().chain(&gone) {
        store.insert_sandbox(sandbox).await.unwrap();
    }
    store
        .pause_sandbox(&kept[2].id, at(7))
        .await
        .unwrap()
        .unwrap();
    destroy(store, &gone[0].id, at(8)).await;
    store
        .end_sandbox(
            &gone[1].id,
            EndedState::Error,
            &Ending::because(StateReason::ProviderFailed),
            at(8),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.count_active_sandboxes_by_worker().await.unwrap(),
        BTreeMap::from([("".into(), 1), ("w1".into(), 2), ("w2".into(), 1)])
    );
}

async fn worker_and_state_filters(store: &dyn Store) {
    let mine = creating("", at(1));
    let mut theirs = creating("", at(2));
    theirs.worker_id = Some("w2".into());
    store.insert_sandbox(&mine).await.unwrap();
    store.insert_sandbox(&theirs).await.unwrap();
    let filter = SandboxFilter {
        state: StateFilter::Only(SandboxState::Creating),
        worker_id: Some("local".into()),
        ..SandboxFilter::default()
    };
    let found: Vec<_> = store
        .list_sandboxes(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(found, vec![mine.id.clone()]);
    assert!(
        store
            .set_sandbox_expiry(&mine.id, at(99))
            .await
            .unwrap()
            .is_none(),
        "a creating sandbox cannot be extended yet"
    );
    assert!(store
        .list_expired_sandboxes(at(100_000))
        .await
        .unwrap()
        .is_empty());
}

async fn reassigning_a_sandbox_has_one_winner(store: &dyn Store) {
    let mut orphan = sandbox("", "mock", at(1));
    orphan.worker_id = Some("dead".into());
    store.insert_sandbox(&orphan).await.unwrap();
    let takers = ["w1", "w2", "w3", "w4"];
    let outcomes = futures_join_all(
        takers
            .iter()
            .map(|to| store.reassign_sandbox(&orphan.id, "dead", to)),
    )
    .await;
    let winners: Vec<_> = outcomes.into_iter().flatten().collect();
    assert_eq!(winners.len(), 1, "exactly one taker wins");
    let winner = winners[0].worker_id.clone().unwrap();
    assert!(takers.contains(&winner.as_str()));
    let stored = store.get_sandbox(&orphan.id).await.unwrap().unwrap();
    assert_eq!(stored.worker_id.as_deref(), Some(winner.as_str()));
    assert_eq!(
        store
            .reassign_sandbox(&orphan.id, "dead", "w9")
            .await
            .unwrap(),
        None,
        "no longer the dead worker's"
    );
    let mut pending = creating("", at(2));
    pending.worker_id = Some("dead".into());
    store.insert_sandbox(&pending).await.unwrap();
    assert_eq!(
        store
            .reassign_sandbox(&pending.id, "dead", "w1")
            .await
            .unwrap(),
        None,
        "only running and paused sandboxes move"
    );
    let mut frozen = sandbox("", "mock", at(2));
    frozen.worker_id = Some("dead".into());
    store.insert_sandbox(&frozen).await.unwrap();
    store
        .pause_sandbox(&frozen.id, at(3))
        .await
        .unwrap()
        .unwrap();
    let moved = store
        .reassign_sandbox(&frozen.id, "dead", "w1")
        .await
        .unwrap()
        .expect("a paused sandbox moves");
    assert_eq!(
        (moved.state, moved.worker_id.as_deref()),
        (SandboxState::Paused, Some("w1"))
    );
    destroy(store, &stored.id, at(3)).await.unwrap();
    assert_eq!(
        store
            .reassign_sandbox(&stored.id, &winner, "w1")
            .await
            .unwrap(),
        None,
        "an ended sandbox stays where it ended"
    );
}

fn tenant(id: &str, created: Timestamp) -> Tenant {
    Tenant {
        id: id.to_owned(),
        name: format!("Team {id}"),
        created_at: created,
    }
}

fn member(tenant_id: &str, subject: &str, role: Role, created: Timestamp) -> Member {
    Member {
        tenant_id: tenant_id.to_owned(),
        subject: subject.to_owned(),
        role,
        created_at: created,
    }
}

fn policy(tenant_id: &str, id: &str, priority: i64, effect: PolicyEffect) -> Policy {
    Policy {
        id: id.to_owned(),
        tenant_id: tenant_id.to_owned(),
        name: format!("rule {id}"),
        resource: PolicyResource::Image,
        pattern: "docker.io/library/*".to_owned(),
        effect,
        priority,
        created_at: at(0),
        updated_at: at(0),
    }
}

async fn tenant_crud(store: &dyn Store) {
    let default = store.get_tenant(DEFAULT_TENANT).await.unwrap().unwrap();
    assert_eq!(
        (default.id.as_str(), default.name.as_str()),
        ("default", "Default"),
        "the migration creates the default tenant"
    );
    let age = svc_core::Clock::now(&svc_core::clock::SystemClock) - default.created_at;
    assert!(
        age >= chrono::TimeDelta::zero() && age < chrono::TimeDelta::minutes(5),
        "created when migrated: {}",
        default.created_at
    );
    assert_eq!(store.get_tenant("acme").await.unwrap(), None);
    let acme = tenant("acme", at(1));
    store.create_tenant(&acme).await.unwrap();
    assert_eq!(store.get_tenant("acme").await.unwrap(), Some(acme.clone()));
    let err = store
        .create_tenant(&tenant("acme", at(2)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Conflict { entity: Resource::Tenant, key } if key == "acme"),
        "{err:?}"
    );
    store.create_tenant(&tenant("beta", at(3))).await.unwrap();
    let ids: Vec<String> = store
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, ["acme", "beta", "default"]);
    assert!(store.delete_tenant("beta").await.unwrap());
    assert!(!store.delete_tenant("beta").await.unwrap(), "already gone");
    assert!(!store.delete_tenant("nobody").await.unwrap());
    assert_eq!(store.get_tenant("beta").await.unwrap(), None);
    assert_eq!(store.list_tenants().await.unwrap().len(), 2);
}

async fn deleting_a_tenant_deletes_its_members_and_policies(store: &dyn Store) {
    for id in ["acme", "beta"] {
        store.create_tenant(&tenant(id, at(0))).await.unwrap();
        store
            .put_member(&member(id, "alice", Role::Operator, at(1)))
            .await
            .unwrap();
        store
            .create_policy(&policy(id, &format!("pol-{id}"), 1, PolicyEffect::Deny))
            .await
            .unwrap();
    }
    assert!(store.delete_tenant("acme").await.unwrap());
    assert!(store.list_members("acme").await.unwrap().is_empty());
    assert_eq!(store.member_role("acme", "alice").await.unwrap(), None);
    assert!(store.list_policies("acme").await.unwrap().is_empty());
    assert_eq!(store.get_policy("acme", "pol-acme").await.unwrap(), None);
    // The other tenant keeps everything.
    assert_eq!(
        store.member_role("beta", "alice").await.unwrap(),
        Some(Role::Operator)
    );
    assert_eq!(
        store
            .list_policies("beta")
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.id)
            .collect::<Vec<_>>(),
        ["pol-beta"]
    );
    // A re-created tenant starts empty, and its old policy ID is free again.
    store.create_tenant(&tenant("acme", at(9))).await.unwrap();
    assert!(store.list_members("acme").await.unwrap().is_empty());
    store
        .create_policy(&policy("acme", "pol-acme", 1, PolicyEffect::Allow))
        .await
        .unwrap();
}

async fn member_upsert_keeps_created_at(store: &dyn Store) {
    store.create_tenant(&tenant("acme", at(0))).await.unwrap();
    assert!(store.list_members("acme").await.unwrap().is_empty());
    assert_eq!(store.member_role("acme", "bob").await.unwrap(), None);
    let first = store
        .put_member(&member("acme", "bob", Role::Viewer, at(1)))
        .await
        .unwrap();
    assert_eq!(first, member("acme", "bob", Role::Viewer, at(1)));
    let changed = store
        .put_member(&member("acme", "bob", Role::TenantAdmin, at(7)))
        .await
        .unwrap();
    assert_eq!(changed.role, Role::TenantAdmin, "the role changes");
    assert_eq!(changed.created_at, at(1), "created_at kept");
    assert_eq!(
        store.member_role("acme", "bob").await.unwrap(),
        Some(Role::TenantAdmin)
    );
    assert_eq!(
        store.member_role(DEFAULT_TENANT, "bob").await.unwrap(),
        None,
        "memberships are per tenant"
    );
    store
        .put_member(&member("acme", "alice", Role::Operator, at(2)))
        .await
        .unwrap();
    store
        .put_member(&member(DEFAULT_TENANT, "carol", Role::Viewer, at(3)))
        .await
        .unwrap();
    assert_eq!(
        store.list_members("acme").await.unwrap(),
        vec![
            member("acme", "alice", Role::Operator, at(2)),
            member("acme", "bob", Role::TenantAdmin, at(1)),
        ]
    );
    assert!(store.delete_member("acme", "bob").await.unwrap());
    assert!(!store.delete_member("acme", "bob").await.unwrap());
    assert!(
        !store.delete_member("acme", "carol").await.unwrap(),
        "carol is a member of another tenant"
    );
    assert_eq!(store.member_role("acme", "bob").await.unwrap(), None);
    assert_eq!(
        store.member_role(DEFAULT_TENANT, "carol").await.unwrap(),
        Some(Role::Viewer)
    );
}

async fn policy_crud_and_order(store: &dyn Store) {
    store.create_tenant(&tenant("acme", at(0))).await.unwrap();
    let low = policy("acme", "pol-b", 0, PolicyEffect::Allow);
    let high = policy("acme", "pol-c", 10, PolicyEffect::Deny);
    let tied = Policy {
        resource: PolicyResource::Network,
        pattern: "host".to_owned(),
        ..policy("acme", "pol-a", 10, PolicyEffect::Allow)
    };
    let negative = policy("acme", "pol-0", -5, PolicyEffect::Deny);
    for p in [&low, &high, &tied, &negative] {
        store.create_policy(p).await.unwrap();
    }
    let other = policy(DEFAULT_TENANT, "pol-z", 100, PolicyEffect::Deny);
    store.create_policy(&other).await.unwrap();
    let err = store
        .create_policy(&policy("acme", "pol-b", 3, PolicyEffect::Deny))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Conflict { entity: Resource::Policy, key } if key == "pol-b"),
        "{err:?}"
    );
    assert_eq!(
        store.get_policy("acme", "pol-a").await.unwrap(),
        Some(tied.clone())
    );
    assert_eq!(
        store.get_policy(DEFAULT_TENANT, "pol-a").await.unwrap(),
        None,
        "another tenant's policy is not found"
    );
    assert_eq!(
        store.list_policies("acme").await.unwrap(),
        vec![tied.clone(), high.clone(), low.clone(), negative.clone()],
        "priority DESC, then ID"
    );
    assert_eq!(
        store.list_policies(DEFAULT_TENANT).await.unwrap(),
        vec![other.clone()]
    );
    let changed = Policy {
        name: "renamed".to_owned(),
        resource: PolicyResource::Provider,
        pattern: "docker".to_owned(),
        effect: PolicyEffect::Deny,
        priority: 50,
        created_at: at(500),
        updated_at: at(60),
        ..low.clone()
    };
    let stored = store.update_policy(&changed).await.unwrap().unwrap();
    assert_eq!(
        stored,
        Policy {
            created_at: low.created_at,
            ..changed.clone()
        },
        "update keeps created_at"
    );
    assert_eq!(
        store.get_policy("acme", "pol-b").await.unwrap(),
        Some(stored.clone())
    );
    assert_eq!(
        store
            .list_policies("acme")
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.id)
            .collect::<Vec<_>>(),
        ["pol-b", "pol-a", "pol-c", "pol-0"]
    );
    assert_eq!(
        store
            .update_policy(&policy("acme", "pol-missing", 1, PolicyEffect::Allow))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .update_policy(&Policy {
                tenant_id: "acme".to_owned(),
                ..other.clone()
            })
            .await
            .unwrap(),
        None,
        "matched on tenant and ID"
    );
    assert!(!store.delete_policy("acme", "pol-z").await.unwrap());
    assert_eq!(
        store.get_policy(DEFAULT_TENANT, "pol-z").await.unwrap(),
        Some(other),
        "untouched by another tenant's update and delete"
    );
    assert!(store.delete_policy("acme", "pol-b").await.unwrap());
    assert!(!store.delete_policy("acme", "pol-b").await.unwrap());
    assert_eq!(store.get_policy("acme", "pol-b").await.unwrap(), None);
    assert_eq!(store.list_policies("acme").await.unwrap().len(), 3);
}

fn audit_entry(id: &str, secs: u64, actor: &str, tenant_id: &str, action: &str) -> AuditEntry {
    AuditEntry {
        id: id.to_owned(),
        timestamp: at(secs),
        actor: actor.to_owned(),
        role: "admin".to_owned(),
        tenant_id: tenant_id.to_owned(),
        action: action.to_owned(),
        resource: format!("/admin/{id}"),
        outcome: AuditOutcome::Success,
        details: serde_json::Map::new(),
    }
}

fn audit_filter(limit: u32) -> AuditFilter {
    AuditFilter {
        limit,
        ..AuditFilter::default()
    }
}

async fn audit_ids(store: &dyn Store, filter: AuditFilter) -> Vec<String> {
    store
        .list_audit(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect()
}

fn stored_exec(sandbox: &Sandbox, n: u64, ended: bool) -> StoredExec {
    StoredExec {
        exec_id: format!("ex-{n:016x}"),
        sandbox_id: sandbox.id.clone(),
        started_at: at(n),
        ended,
        handle: n.is_multiple_of(2).then(|| format!("handle-{n}")),
        record: format!("{{\"n\":{n},\"ended\":{ended}}}"),
    }
}

async fn exec_records_are_kept_trimmed_and_listed_per_worker(store: &dyn Store) {
    let ours = sandbox("alice", "docker", at(0));
    let mut theirs = sandbox("bob", "docker", at(0));
    theirs.worker_id = Some("elsewhere".into());
    let gone = sandbox("carol", "docker", at(0));
    for sb in [&ours, &theirs, &gone] {
        store.insert_sandbox(sb).await.unwrap();
    }
    for n in 1..=4 {
        store
            .save_exec(&stored_exec(&ours, n, true), 2)
            .await
            .unwrap();
    }
    let running = stored_exec(&ours, 5, false);
    store.save_exec(&running, 2).await.unwrap();
    store
        .save_exec(&stored_exec(&theirs, 6, true), 2)
        .await
        .unwrap();
    store
        .save_exec(&stored_exec(&gone, 7, true), 2)
        .await
        .unwrap();
    destroy(store, &gone.id, at(10)).await.unwrap();
    let listed = store.list_execs_on_worker("local").await.unwrap();
    assert_eq!(
        listed,
        vec![
            stored_exec(&ours, 3, true),
            stored_exec(&ours, 4, true),
            running.clone()
        ],
        "the 2 newest ended and the running one, oldest first; not other workers' or ended sandboxes'"
    );
    // The running one ends: replaced in place, and the oldest ended one goes.
    let ended = stored_exec(&ours, 5, true);
    store.save_exec(&ended, 2).await.unwrap();
    assert_eq!(
        store.list_execs_on_worker("local").await.unwrap(),
        vec![stored_exec(&ours, 4, true), ended]
    );
    assert_eq!(store.delete_execs(&ours.id).await.unwrap(), 2);
    assert!(store
        .list_execs_on_worker("local")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.list_execs_on_worker("elsewhere").await.unwrap().len(),
        1
    );
}

async fn audit_log_filters_newest_first(store: &dyn Store) {
    assert!(store
        .list_audit(&audit_filter(100))
        .await
        .unwrap()
        .is_empty());
    let details = serde_json::json!({
        "status": 403,
        "code": "policy_denied",
        "value": "ghcr.io/x/y:1 ✓",
        "nested": {"list": [1, 2.5, null, true], "empty": {}},
    });
    let serde_json::Value::Object(details) = details else {
        unreachable!()
    };
    let denied = AuditEntry {
        role: "operator".to_owned(),
        outcome: AuditOutcome::Denied,
        details: details.clone(),
        ..audit_entry("aud-3", 20, "alice", "acme", "policy.denied")
    };
    // Inserted out of time order; aud-4 and aud-5 share a timestamp (insertion order decides).
    for entry in [
        audit_entry("aud-2", 10, "bob", DEFAULT_TENANT, "quota.save"),
        audit_entry("aud-1", 5, "alice", "acme", "tenant.create"),
        denied.clone(),
        audit_entry("aud-4", 30, "system", "acme", "policy.update"),
        AuditEntry {
            outcome: AuditOutcome::Failure,
            ..audit_entry("aud-5", 30, "bob", "acme", "policy.update")
        },
    ] {
        store.insert_audit(&entry).await.unwrap();
    }
    let err = store
        .insert_audit(&audit_entry("aud-1", 99, "x", "acme", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                entity: Resource::AuditEntry,
                ..
            }
        ),
        "{err:?}"
    );

    let all = store.list_audit(&audit_filter(100)).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["aud-5", "aud-4", "aud-3", "aud-2", "aud-1"],
        "newest first, later inserts first within a timestamp"
    );
    assert_eq!(all[2], denied, "every field round-trips, details included");
    assert_eq!(all[0].outcome, AuditOutcome::Failure);
    assert_eq!(all[2].details["nested"]["list"][1], serde_json::json!(2.5));

    let acme = AuditFilter {
        tenant_id: Some("acme".to_owned()),
        ..audit_filter(100)
    };
    assert_eq!(
        audit_ids(store, acme.clone()).await,
        ["aud-5", "aud-4", "aud-3", "aud-1"]
    );
    assert_eq!(
        audit_ids(
            store,
            AuditFilter {
                tenant_id: Some("nobody".to_owned()),
                ..audit_filter(100)
            }
        )
        .await,
        Vec::<String>::new()
    );
    let bob = AuditFilter {
        actor: Some("bob".to_owned()),
        ..audit_filter(100)
    };
    assert_eq!(audit_ids(store, bob.clone()).await, ["aud-5", "aud-2"]);
    let updates = AuditFilter {
        action: Some("policy.update".to_owned()),
        ..audit_filter(100)
    };
    assert_eq!(audit_ids(store, updates.clone()).await, ["aud-5", "aud-4"]);
    // Bounds are inclusive.
    let since = AuditFilter {
        since: Some(at(10)),
        ..audit_filter(100)
    };
    assert_eq!(
        audit_ids(store, since.clone()).await,
        ["aud-5", "aud-4", "aud-3", "aud-2"]
    );
    let until = AuditFilter {
        until: Some(at(20)),
        ..audit_filter(100)
    };
    assert_eq!(
        audit_ids(store, until.clone()).await,
        ["aud-3", "aud-2", "aud-1"]
    );
    let window = AuditFilter {
        since: Some(at(10)),
        until: Some(at(20)),
        ..audit_filter(100)
    };
    assert_eq!(audit_ids(store, window).await, ["aud-3", "aud-2"]);
    let empty_window = AuditFilter {
        since: Some(at(21)),
        until: Some(at(29)),
        ..audit_filter(100)
    };
    assert!(audit_ids(store, empty_window).await.is_empty());
    // Every condition holds at once.
    assert_eq!(
        audit_ids(
            store,
            AuditFilter {
                actor: Some("bob".to_owned()),
                ..acme.clone()
            }
        )
        .await,
        ["aud-5"]
    );
    assert_eq!(
        audit_ids(
            store,
            AuditFilter {
                tenant_id: Some("acme".to_owned()),
                actor: Some("alice".to_owned()),
                action: Some("tenant.create".to_owned()),
                since: Some(at(5)),
                until: Some(at(5)),
                limit: 100,
                after: None,
            }
        )
        .await,
        ["aud-1"]
    );
    assert!(
        audit_ids(
            store,
            AuditFilter {
                action: Some("tenant.create".to_owned()),
                ..bob
            }
        )
        .await
        .is_empty(),
        "bob created no tenant"
    );
    // The limit keeps the newest.
    assert_eq!(audit_ids(store, audit_filter(2)).await, ["aud-5", "aud-4"]);
    assert_eq!(
        audit_ids(store, AuditFilter { limit: 2, ..until }).await,
        ["aud-3", "aud-2"]
    );
    assert_eq!(
        audit_ids(store, AuditFilter { limit: 1, ..acme }).await,
        ["aud-5"]
    );
    assert_eq!(
        audit_ids(store, audit_filter(0)).await,
        ["aud-5"],
        "a limit below 1 is taken as 1"
    );
}

async fn audit_limit_is_capped(store: &dyn Store) {
    for i in 0..1005u64 {
        store
            .insert_audit(&audit_entry(
                &format!("aud-{i:04}"),
                i,
                "system",
                "acme",
                "x",
            ))
            .await
            .unwrap();
    }
    let listed = audit_ids(store, audit_filter(u32::MAX)).await;
    assert_eq!(
        listed.len(),
        1001,
        "at most MAX_AUDIT_LIMIT and one more (which tells a pager that another page follows)"
    );
    assert_eq!(listed.first().map(String::as_str), Some("aud-1004"));
    assert_eq!(listed.last().map(String::as_str), Some("aud-0004"));
    assert_eq!(audit_ids(store, audit_filter(1001)).await, listed);
}

/// A page of the audit log starts after the previous page's last entry, entries of the same
/// microsecond ordered by when they were written.
async fn audit_pages_continue_after_their_last_entry(store: &dyn Store) {
    for (id, second) in [("p0", 1), ("p1", 2), ("p2", 2), ("p3", 2), ("p4", 3)] {
        let entry = audit_entry(id, second, "system", "acme", "x");
        store.insert_audit(&entry).await.unwrap();
    }
    let after = |id: &str, second: u64| AuditFilter {
        after: Some(svc_core::audit::AuditPosition {
            timestamp: at(second),
            id: id.to_owned(),
        }),
        ..audit_filter(2)
    };
    assert_eq!(audit_ids(store, audit_filter(2)).await, ["p4", "p3"]);
    // Written after p3 at its very time: it sorts before p3, so the next page leaves it out.
    let late = audit_entry("p5", 2, "system", "acme", "x");
    store.insert_audit(&late).await.unwrap();
    assert_eq!(audit_ids(store, after("p3", 2)).await, ["p2", "p1"]);
    assert_eq!(audit_ids(store, after("p1", 2)).await, ["p0"]);
    let acme = AuditFilter {
        tenant_id: Some("acme".into()),
        ..after("p3", 2)
    };
    assert_eq!(
        audit_ids(store, acme).await,
        ["p2", "p1"],
        "one tenant's too"
    );
}

async fn ping_answers(store: &dyn Store) {
    store.ping().await.unwrap();
    assert!(!store.backend().is_empty());
}

async fn meta_values_are_random_and_stable(store: &dyn Store) {
    let installation = store.installation_id().await.unwrap();
    let key = store.preview_key().await.unwrap();
    assert_eq!(store.preview_key().await.unwrap(), key, "made once");
    assert!(key.len() >= 60, "{} characters", key.len());
    assert!(key.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(key, installation);
}

/// Runs the futures concurrently and unwraps every result.
async fn futures_join_all<T, F: std::future::Future<Output = Result<T, StoreError>>>(
    futures: impl Iterator<Item = F>,
) -> Vec<T> {
    futures::future::join_all(futures)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

macro_rules! contract {
    ($backend:ident: $($case:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(backend) = super::$backend().await else {
                        return;
                    };
                    super::$case(backend.store.as_ref()).await;
                    backend.store.close().await;
                }
            )*
        }
    };
}

macro_rules! all_cases {
    ($($backend:ident),*) => {
        $(
            contract!($backend:
                sandbox_round_trips,
                list_filters_and_orders_newest_first,
                destroy_happens_once,
                expiry_and_purge,
                pause_and_resume,
                template_crud,
                templates_belong_to_tenants,
                template_builds_end_once_and_are_trimmed,
                active_images_are_those_of_live_sandboxes,
                creating_messages_last_until_running,
                meta_values_are_random_and_stable,
                concurrent_writes_are_all_kept,
                admission_counts_and_records_in_one_write,
                concurrent_admission_never_over_admits,
                concurrent_admission_respects_a_quota_alone,
                admission_applies_owner_quotas_in_order,
                quota_crud,
                worker_registry,
                leases_are_holder_and_expiry_aware,
                lease_races_have_one_winner_and_growing_generations,
                a_sandbox_lease_lives_with_its_record,
                worker_and_state_filters,
                every_filter_combination_lists_what_it_names,
                an_owners_newest_active_sandbox,
                active_sandboxes_are_counted_per_worker,
                pages_are_stable_under_inserts_and_deletes,
                template_pages_are_stable_under_inserts_and_deletes,
                audit_pages_continue_after_their_last_entry,
                reassigning_a_sandbox_has_one_winner,
                tenant_crud,
                deleting_a_tenant_deletes_its_members_and_policies,
                member_upsert_keeps_created_at,
                policy_crud_and_order,
                audit_log_filters_newest_first,
                exec_records_are_kept_trimmed_and_listed_per_worker,
                audit_limit_is_capped,
                ping_answers,
            );
        )*
    };
}

all_cases!(sqlite_file, sqlite_memory, postgres);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_checkpoints_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("svc.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    for i in 0..50 {
        store
            .insert_sandbox(&sandbox("", "mock", at(i)))
            .await
            .unwrap();
    }
    // Far below the writer's own checkpoint threshold: only the background thread copies the
    // log into the database file.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&path).unwrap().len() <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint reached the database file"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store.close().await;
    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(reopened.count_active_sandboxes(None).await.unwrap(), 50);
    reopened.close().await;
}

async fn persists_across_reopen_and_refuses_newer_schema(backend: &dyn Persistent) {
    let store = backend.open().await.unwrap();
    let sb = sandbox("", "mock", at(0));
    store.insert_sandbox(&sb).await.unwrap();
    store.close().await;
    assert!(matches!(store.ping().await, Err(StoreError::Closed)));
    let (current, latest) = backend.schema_version().await;
    assert_eq!(current, latest);
    let reopened = backend.open().await.unwrap();
    assert_eq!(reopened.get_sandbox(&sb.id).await.unwrap(), Some(sb));
    reopened.close().await;
    backend.raw(backend.newer_schema_sql()).await;
    let err = backend
        .open()
        .await
        .err()
        .expect("newer schema must be refused");
    assert!(matches!(err, StoreError::Migration { .. }), "{err:?}");
}

async fn rows_that_do_not_decode_are_corrupt(backend: &dyn Persistent) {
    let store = backend.open().await.unwrap();
    store
        .put_member(&member(DEFAULT_TENANT, "alice", Role::Viewer, at(0)))
        .await
        .unwrap();
    store
        .insert_audit(&audit_entry("aud-1", 1, "alice", DEFAULT_TENANT, "x"))
        .await
        .unwrap();
    let corrupt = |err: StoreError, expected: &str| {
        assert!(
            matches!(&err, StoreError::Corrupt { entity, .. } if *entity == expected),
            "{err:?}"
        );
    };
    backend
        .raw("UPDATE tenant_members SET role = 'owner'")
        .await;
    corrupt(
        store
            .member_role(DEFAULT_TENANT, "alice")
            .await
            .unwrap_err(),
        "member",
    );
    corrupt(
        store.list_members(DEFAULT_TENANT).await.unwrap_err(),
        "member",
    );
    backend.raw("UPDATE audit_log SET outcome = 'maybe'").await;
    corrupt(
        store.list_audit(&audit_filter(10)).await.unwrap_err(),
        "audit entry",
    );
    backend
        .raw("UPDATE audit_log SET outcome = 'success', details = '[1, 2]'")
        .await;
    corrupt(
        store.list_audit(&audit_filter(10)).await.unwrap_err(),
        "audit entry",
    );
    store.close().await;
}

/// Two stores on one database, as two control-plane replicas: admissions are serialised across
/// them and a lease has one holder, whichever store each caller uses.
async fn replicas_never_over_admit_or_share_a_lease(backend: &dyn Persistent) {
    let replicas: Vec<Arc<dyn Store>> = vec![
        Arc::from(backend.open().await.unwrap()),
        Arc::from(backend.open().await.unwrap()),
    ];
    let admissions = (0..40).map(|i| {
        let store = Arc::clone(&replicas[i % 2]);
        async move {
            store
                .admit_sandbox(&creating("x", at(i as u64)), MINUTE, capacity(7, 0), MINUTE)
                .await
        }
    });
    let admitted = futures_join_all(admissions)
        .await
        .into_iter()
        .filter(|admission| admission.allowed)
        .count();
    assert_eq!(admitted, 7);
    for store in &replicas {
        assert_eq!(store.count_active_sandboxes(None).await.unwrap(), 7);
    }
    let ttl = Duration::from_secs(10);
    let acquirers = (0..40).map(|i| {
        let store = Arc::clone(&replicas[i % 2]);
        async move {
            store
                .acquire_lease("shared", &format!("w{i}"), ttl, at(0))
                .await
        }
    });
    let winners = futures_join_all(acquirers)
        .await
        .into_iter()
        .filter(|outcome| matches!(outcome, LeaseAcquire::Acquired(_)))
        .count();
    assert_eq!(winners, 1, "exactly one acquirer wins across replicas");
    for store in replicas {
        store.close().await;
    }
}

macro_rules! persistent {
    ($backend:ident: $($case:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(backend) = super::$backend() else {
                        return;
                    };
                    super::$case(&backend).await;
                }
            )*
        }
    };
}

macro_rules! all_persistent_cases {
    ($($backend:ident),*) => {
        $(
            persistent!($backend:
                persists_across_reopen_and_refuses_newer_schema,
                rows_that_do_not_decode_are_corrupt,
                replicas_never_over_admit_or_share_a_lease,
            );
        )*
    };
}

fn sqlite_file_persistent() -> Option<SqliteFile> {
    Some(SqliteFile::new())
}

fn postgres_persistent() -> Option<PgSchema> {
    PgSchema::new()
}

all_persistent_cases!(sqlite_file_persistent, postgres_persistent);

/// Connection failures are `Unavailable`, and no error shows the connection string's password.
#[tokio::test]
async fn postgres_failures_hide_the_connection_string() {
    const SECRET: &str = "s3cret-pw";
    let chain = |err: &StoreError| {
        let mut text = format!("{err} {err:?}");
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            text.push_str(&format!(" / {cause} {cause:?}"));
            source = cause.source();
        }
        text
    };
    // Nothing listens on port 1.
    let refused = PgStore::connect(&format!("postgres://svc:{SECRET}@127.0.0.1:1/svc"), 1)
        .await
        .err()
        .expect("nothing listens there");
    assert!(
        matches!(refused, StoreError::Unavailable { .. }),
        "{refused:?}"
    );
    assert!(!chain(&refused).contains(SECRET), "{}", chain(&refused));
    let unparsable = PgStore::connect(&format!("postgres://svc:{SECRET}@127.0.0.1:port/svc"), 1)
        .await
        .err()
        .expect("the port does not parse");
    assert!(
        matches!(unparsable, StoreError::Backend { .. }),
        "{unparsable:?}"
    );
    assert!(
        !chain(&unparsable).contains(SECRET),
        "{}",
        chain(&unparsable)
    );
    let bad_schema = PgStore::connect_in_schema("host=127.0.0.1", "no; drop", 1)
        .await
        .err()
        .expect("not an identifier");
    assert!(
        matches!(bad_schema, StoreError::Backend { .. }),
        "{bad_schema:?}"
    );
    // A server that refuses the password (inside the case's schema, should it trust this host).
    let Some(schema) = PgSchema::new() else {
        return;
    };
    let config: tokio_postgres::Config = schema.dsn.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
    };
    let wrong = format!(
        "host={host} port={} user={} password={SECRET} dbname={}",
        config.get_ports().first().copied().unwrap_or(5432),
        config.get_user().unwrap_or("postgres"),
        config.get_dbname().unwrap_or("postgres"),
    );
    match PgStore::connect_in_schema(&wrong, &schema.schema, 1).await {
        Err(refused) => assert!(!chain(&refused).contains(SECRET), "{}", chain(&refused)),
        Ok(trusted) => trusted.close().await,
    }
}
