//! The PostgreSQL backend: one database shared by several control-plane replicas. Calls run on
//! a pool of connections (`deadpool-postgres` over `tokio-postgres`), each statement prepared
//! once per connection. Every method is one statement (an upsert, a conditional update, a
//! statement with data-modifying CTEs) except admission, one transaction serialised across
//! replicas by an advisory lock. Rows use the encodings of the SQLite backend and the shared
//! row codec, so both backends return the same values.

mod audit;
mod builds;
mod codec;
mod events;
mod execs;
mod migrate;
mod pool;
mod quotas;
mod tenants;
mod workers;

pub use migrate::{rehearse, Rehearsal};

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};
use svc_core::error::Resource;

use async_trait::async_trait;
use deadpool_postgres::{Client, Pool};
use svc_core::access::Role;
use svc_core::admission::Admission;
use svc_core::audit::{AuditEntry, AuditFilter};
use svc_core::build::TemplateBuild;
use svc_core::quota::{GlobalLimits, OwnerQuota, QuotaLimits, QuotaSummary};
use svc_core::sandbox::{Ending, Sandbox};
use svc_core::template::Template;
use svc_core::tenant::{Member, Policy, Tenant};
use svc_core::worker::{Lease, LeaseAcquire, LeaseCounts, Worker, WorkerHeartbeat, WorkerStatus};
use svc_core::{BuildId, OwnerId, SandboxId, Timestamp};
use tokio_postgres::types::ToSql;

use crate::rows::{
    self, micros, SandboxRow, TemplateRow, SANDBOX_COLUMNS, SANDBOX_COLUMN_COUNT, TEMPLATE_COLUMNS,
};
use crate::{
    BuildEnding, EndedState, KeyPage, SandboxFilter, Store, StoreError, StoreResult, StoredExec,
};
use codec::{backend, count_at, execute, fetch_all, fetch_opt, insert, params, query, query_one};

/// A store in a PostgreSQL database (or one schema of it).
pub struct PgStore {
    pool: Pool,
    /// The connection settings, for the event listener's own connection.
    settings: tokio_postgres::Config,
    /// Wakes the event reader; the listener behind it starts with the first wait.
    listener: std::sync::OnceLock<std::sync::Arc<tokio::sync::Notify>>,
}

impl PgStore {
    /// A value of the `meta` table, made by the migrations.
    async fn meta(&self, key: &'static str) -> StoreResult<String> {
        let client = self.client(key).await?;
        let row = query_one(
            &client,
            key,
            "SELECT value FROM meta WHERE key = $1",
            &[&key],
        )
        .await?;
        row.try_get(0).map_err(backend(key))
    }
}

impl PgStore {
    /// Connects to the database at `dsn` (a `postgres://` URL or `key=value` pairs) with up to
    /// `pool_size` connections and runs pending migrations. Tables live where the connection's
    /// `search_path` puts them.
    pub async fn connect(dsn: &str, pool_size: usize) -> StoreResult<Self> {
        Self::open(dsn, None, pool_size).await
    }

    /// Like [`PgStore::connect`], confined to `schema`: created when missing, and the
    /// `search_path` of every pooled connection. `schema` is a lowercase identifier (letters,
    /// digits, `_`, not starting with a digit, at most 63 bytes). Separate schemas are separate
    /// stores, which is how the contract suite isolates its cases.
    pub async fn connect_in_schema(dsn: &str, schema: &str, pool_size: usize) -> StoreResult<Self> {
        if !pool::valid_schema(schema) {
            return Err(StoreError::Backend {
                operation: "connect",
                source: format!(
                    "schema {schema:?} is not a lowercase identifier of at most 63 bytes"
                )
                .into(),
            });
        }
        Self::open(dsn, Some(schema), pool_size).await
    }

    async fn open(dsn: &str, schema: Option<&str>, pool_size: usize) -> StoreResult<Self> {
        let settings = pool::settings(dsn, schema)?;
        let store = PgStore {
            pool: pool::open(settings.clone(), pool_size)?,
            settings,
            listener: std::sync::OnceLock::new(),
        };
        let mut client = store.client("migrate").await?;
        migrate::run(&mut client, schema).await?;
        drop(client);
        Ok(store)
    }

    /// The schema version the database is at, and the latest one this binary knows.
    pub async fn schema_version(&self) -> StoreResult<(i64, i64)> {
        let client = self.client("schema_version").await?;
        Ok((
            migrate::current_version(&client).await?,
            migrate::latest_version(),
        ))
    }

    async fn client(&self, operation: &'static str) -> StoreResult<Client> {
        self.pool.get().await.map_err(codec::pool(operation))
    }
}

/// The states that hold a runtime and so count toward capacity.
const HOLDS_RUNTIME: &str = "state IN ('creating', 'running', 'paused')";

/// Sandbox statements that need the column list, formatted once (and prepared once per
/// connection through its statement cache).
struct SandboxSql {
    insert: String,
    get: String,
    mark_running: String,
    end: String,
    set_expiry: String,
    pause: String,
    resume: String,
    reassign: String,
    list_expired: String,
    newest_active_of_owner: String,
}

static SANDBOX_SQL: LazyLock<SandboxSql> = LazyLock::new(|| {
    SandboxSql {
    insert: {
        let placeholders: Vec<String> = (1..=SANDBOX_COLUMN_COUNT)
            .map(|i| format!("${i}"))
            .collect();
        format!(
            "INSERT INTO sandboxes ({SANDBOX_COLUMNS}) VALUES ({})",
            placeholders.join(", ")
        )
    },
    get: format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = $1"),
    mark_running: format!(
        "UPDATE sandboxes SET state = 'running', exec_path = $2, state_message = NULL WHERE id = $1 \
         AND state = 'creating' RETURNING {SANDBOX_COLUMNS}"
    ),
    // Whoever held the lease: the sandbox it fenced is gone, so it lapses in the same
    // statement (and only when this call ended the sandbox).
    end: format!(
        "WITH ended AS (UPDATE sandboxes SET state = $2, destroyed_at = $3, ended_at = $4, \
         state_reason = $5, state_message = $6 WHERE id = $1 AND {HOLDS_RUNTIME} \
         RETURNING {SANDBOX_COLUMNS}), \
         lapsed AS (UPDATE leases SET expires_at = LEAST(expires_at, $4) \
         WHERE resource_id IN (SELECT id FROM ended)) \
         SELECT {SANDBOX_COLUMNS} FROM ended"
    ),
    set_expiry: format!(
        "UPDATE sandboxes SET expires_at = $2 WHERE id = $1 AND state = 'running' \
         RETURNING {SANDBOX_COLUMNS}"
    ),
    pause: format!(
        "UPDATE sandboxes SET state = 'paused', paused_at = $2 WHERE id = $1 \
         AND state = 'running' RETURNING {SANDBOX_COLUMNS}"
    ),
    // The time spent paused moves the expiry and adds to the paused total, in one statement
    // (a clock behind the pausing replica's counts as no time).
    resume: format!(
        "UPDATE sandboxes SET state = 'running', \
         expires_at = expires_at + GREATEST($2 - paused_at, 0), \
         paused_micros = paused_micros + GREATEST($2 - paused_at, 0), paused_at = NULL \
         WHERE id = $1 AND state = 'paused' RETURNING {SANDBOX_COLUMNS}"
    ),
    reassign: format!(
        "UPDATE sandboxes SET worker_id = $3 WHERE id = $1 AND state IN ('running', 'paused') \
         AND worker_id = $2 RETURNING {SANDBOX_COLUMNS}"
    ),
    list_expired: format!(
        "SELECT {SANDBOX_COLUMNS} FROM sandboxes \
         WHERE state = 'running' AND expires_at <= $1 ORDER BY expires_at, id"
    ),
    newest_active_of_owner: format!(
        "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE owner_id = $1 AND {HOLDS_RUNTIME} \
         ORDER BY created_at DESC, id DESC LIMIT 1"
    ),
}
});

/// Runs a statement that yields at most one sandbox, decoded.
async fn one_sandbox(
    client: &Client,
    operation: &'static str,
    sql: &str,
    params: &codec::Params<'_>,
) -> StoreResult<Option<Sandbox>> {
    fetch_opt(client, operation, sql, params)
        .await?
        .map(SandboxRow::into_domain)
        .transpose()
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn installation_id(&self) -> StoreResult<String> {
        self.meta("installation_id").await
    }

    async fn preview_key(&self) -> StoreResult<String> {
        self.meta("preview_key").await
    }

    async fn ping(&self) -> StoreResult<Duration> {
        const OP: &str = "ping";
        let started = Instant::now();
        let client = self.client(OP).await?;
        query_one(&client, OP, "SELECT 1", &[]).await?;
        Ok(started.elapsed())
    }

    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()> {
        const OP: &str = "insert_sandbox";
        let row = SandboxRow::from_domain(sandbox)?;
        let client = self.client(OP).await?;
        insert(
            &client,
            OP,
            &SANDBOX_SQL.insert,
            &params(&row.values()),
            (Resource::Sandbox, &row.id),
        )
        .await
    }

    async fn admit_sandbox(
        &self,
        sandbox: &Sandbox,
        lifetime: Duration,
        limits: GlobalLimits,
        lease_ttl: Duration,
    ) -> StoreResult<Admission> {
        const OP: &str = "admit_sandbox";
        let row = SandboxRow::from_domain(sandbox)?;
        let holder = sandbox.worker_id.as_deref().unwrap_or_default();
        let mut client = self.client(OP).await?;
        let tx = client.transaction().await.map_err(backend(OP))?;
        let owner = sandbox.owner_id.as_ref();
        // With a count limit, the lock first, then every read: each later statement of this
        // (read committed) transaction sees every admission committed before the lock was
        // granted, and none can commit until this one ends. Without one (no global count limit
        // and, as the read shows, none in the owner's quota) nothing needs serialising, and
        // replicas admit in parallel.
        let admission = if limits.max_sandboxes > 0 || limits.max_sandboxes_per_owner > 0 {
            execute(&tx, OP, quotas::ADMISSION_LOCK, &[]).await?;
            quotas::decide(&tx, OP, owner, lifetime, limits, false)
                .await?
                .0
        } else {
            match quotas::decide(&tx, OP, owner, lifetime, limits, false).await? {
                (admission, false) => admission,
                (_, true) => {
                    execute(&tx, OP, quotas::ADMISSION_LOCK, &[]).await?;
                    quotas::decide(&tx, OP, owner, lifetime, limits, false)
                        .await?
                        .0
                }
            }
        };
        if !admission.allowed {
            tx.rollback().await.map_err(backend(OP))?;
            return Ok(admission);
        }
        // The lease and the record, sent together (one round trip while the lock is held). A
        // new ID's lease is free, so the lease is always acquired.
        let values = row.values();
        let sandbox_params = params(&values);
        let (lease, _) = futures::try_join!(
            workers::acquire(&tx, OP, &row.id, holder, lease_ttl, sandbox.created_at),
            insert(
                &tx,
                OP,
                &SANDBOX_SQL.insert,
                &sandbox_params,
                (Resource::Sandbox, &row.id),
            ),
        )?;
        if let rows::AcquireRow::Held(_) = lease {
            return Err(StoreError::Conflict {
                entity: Resource::Lease,
                key: row.id.clone(),
            });
        }
        tx.commit().await.map_err(backend(OP))?;
        Ok(admission)
    }

    async fn check_admission(
        &self,
        owner: Option<&OwnerId>,
        lifetime: Duration,
        limits: GlobalLimits,
    ) -> StoreResult<Admission> {
        const OP: &str = "check_admission";
        let client = self.client(OP).await?;
        // A report: the counts it shows are read even when no limit needs them.
        Ok(quotas::decide(&client, OP, owner, lifetime, limits, true)
            .await?
            .0)
    }

    async fn mark_sandbox_running(
        &self,
        id: &SandboxId,
        exec_path: Option<&str>,
    ) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "mark_sandbox_running";
        let client = self.client(OP).await?;
        one_sandbox(
            &client,
            OP,
            &SANDBOX_SQL.mark_running,
            &[&id.as_str(), &exec_path],
        )
        .await
    }

    async fn set_creating_message(&self, id: &SandboxId, message: &str) -> StoreResult<bool> {
        const OP: &str = "set_creating_message";
        let client = self.client(OP).await?;
        execute(
            &client,
            OP,
            "UPDATE sandboxes SET state_message = $2 WHERE id = $1 AND state = 'creating'",
            &[&id.as_str(), &message],
        )
        .await
        .map(|n| n > 0)
    }

    async fn end_sandbox(
        &self,
        id: &SandboxId,
        state: EndedState,
        ending: &Ending,
        at: Timestamp,
    ) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "end_sandbox";
        let destroyed_at = (state == EndedState::Destroyed).then(|| micros(at));
        let client = self.client(OP).await?;
        one_sandbox(
            &client,
            OP,
            &SANDBOX_SQL.end,
            &[
                &id.as_str(),
                &state.state().as_str(),
                &destroyed_at,
                &micros(at),
                &ending.reason.as_str(),
                &ending.message,
            ],
        )
        .await
    }

    async fn get_sandbox(&self, id: &SandboxId) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "get_sandbox";
        let client = self.client(OP).await?;
        one_sandbox(&client, OP, &SANDBOX_SQL.get, &[&id.as_str()]).await
    }

    async fn list_sandboxes(&self, filter: &SandboxFilter) -> StoreResult<Vec<Sandbox>> {
        const OP: &str = "list_sandboxes";
        // Only the filters set, so each combination is a statement of its own with a generic
        // plan fit for it ([`SandboxFilter::list_clause`]).
        let sql = format!(
            "SELECT {SANDBOX_COLUMNS} FROM sandboxes {}",
            filter.list_clause('$')
        );
        let equalities = filter.equalities();
        let (after_created, after_id) = filter.keyset();
        // PostgreSQL reads LIMIT NULL as none.
        let limit = filter.limit.map(i64::from);
        let mut values: Vec<&(dyn ToSql + Sync)> = equalities
            .iter()
            .map(|(_, value)| value as &(dyn ToSql + Sync))
            .collect();
        values.extend([&after_created as &(dyn ToSql + Sync), &after_id, &limit]);
        let client = self.client(OP).await?;
        fetch_all(&client, OP, &sql, &values, SandboxRow::into_domain).await
    }

    async fn newest_active_sandbox_of_owner(&self, owner_id: &str) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "newest_active_sandbox_of_owner";
        let client = self.client(OP).await?;
        one_sandbox(
            &client,
            OP,
            &SANDBOX_SQL.newest_active_of_owner,
            &[&owner_id],
        )
        .await
    }

    async fn count_active_sandboxes(&self, owner_id: Option<&str>) -> StoreResult<u64> {
        const OP: &str = "count_active_sandboxes";
        let client = self.client(OP).await?;
        // Two statements rather than one with `($1 IS NULL OR owner_id = $1)`: the generic plan
        // of that one cannot put the owner into the index condition.
        let row = match owner_id {
            Some(owner) => {
                query_one(
                    &client,
                    OP,
                    &format!(
                        "SELECT COUNT(*) FROM sandboxes WHERE owner_id = $1 AND {HOLDS_RUNTIME}"
                    ),
                    &[&owner],
                )
                .await?
            }
            None => {
                query_one(
                    &client,
                    OP,
                    &format!("SELECT COUNT(*) FROM sandboxes WHERE {HOLDS_RUNTIME}"),
                    &[],
                )
                .await?
            }
        };
        count_at(OP, &row, 0)
    }

    async fn count_active_sandboxes_by_worker(&self) -> StoreResult<BTreeMap<String, u64>> {
        const OP: &str = "count_active_sandboxes_by_worker";
        let client = self.client(OP).await?;
        let rows = query(
            &client,
            OP,
            &format!(
                "SELECT COALESCE(worker_id, ''), COUNT(*) FROM sandboxes \
                 WHERE {HOLDS_RUNTIME} GROUP BY COALESCE(worker_id, '')"
            ),
            &[],
        )
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<_, String>(0).map_err(backend(OP))?,
                    count_at(OP, row, 1)?,
                ))
            })
            .collect()
    }

    async fn sandbox_groups(&self) -> StoreResult<Vec<svc_core::observe::SandboxGroup>> {
        const OP: &str = "sandbox_groups";
        let client = self.client(OP).await?;
        let rows = query(
            &client,
            OP,
            "SELECT state, provider, COALESCE(worker_id, ''), COUNT(*) FROM sandboxes \
             GROUP BY state, provider, worker_id",
            &[],
        )
        .await?;
        rows.iter()
            .map(|row| {
                Ok(svc_core::observe::SandboxGroup {
                    state: row.try_get(0).map_err(backend(OP))?,
                    provider: row.try_get(1).map_err(backend(OP))?,
                    worker_id: row.try_get(2).map_err(backend(OP))?,
                    count: count_at(OP, row, 3)?,
                })
            })
            .collect()
    }

    async fn count_sandboxes_on_provider(&self, provider: &str) -> StoreResult<u64> {
        const OP: &str = "count_sandboxes_on_provider";
        let client = self.client(OP).await?;
        let row = query_one(
            &client,
            OP,
            &format!("SELECT COUNT(*) FROM sandboxes WHERE {HOLDS_RUNTIME} AND provider = $1"),
            &[&provider],
        )
        .await?;
        count_at(OP, &row, 0)
    }

    async fn set_sandbox_expiry(
        &self,
        id: &SandboxId,
        expires_at: Timestamp,
    ) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "set_sandbox_expiry";
        let client = self.client(OP).await?;
        one_sandbox(
            &client,
            OP,
            &SANDBOX_SQL.set_expiry,
            &[&id.as_str(), &micros(expires_at)],
        )
        .await
    }

    async fn pause_sandbox(&self, id: &SandboxId, at: Timestamp) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "pause_sandbox";
        let client = self.client(OP).await?;
        one_sandbox(
            &client,
            OP,
            &SANDBOX_SQL.pause,
            &[&id.as_str(), &micros(at)],
        )
        .await
    }

    async fn resume_sandbox(&self, id: &SandboxId, at: Timestamp) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "resume_sandbox";
        let client = self.client(OP).await?;
        one_sandbox(
            &client,
            OP,
            &SANDBOX_SQL.resume,
            &[&id.as_str(), &micros(at)],
        )
        .await
    }

    async fn reassign_sandbox(
        &self,
        id: &SandboxId,
        from: &str,
        to: &str,
    ) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "reassign_sandbox";
        let client = self.client(OP).await?;
        one_sandbox(
            &client,
            OP,
            &SANDBOX_SQL.reassign,
            &[&id.as_str(), &from, &to],
        )
        .await
    }

    async fn list_expired_sandboxes(&self, now: Timestamp) -> StoreResult<Vec<Sandbox>> {
        const OP: &str = "list_expired_sandboxes";
        let client = self.client(OP).await?;
        fetch_all(
            &client,
            OP,
            &SANDBOX_SQL.list_expired,
            &[&micros(now)],
            SandboxRow::into_domain,
        )
        .await
    }

    async fn purge_destroyed_before(&self, cutoff: Timestamp) -> StoreResult<u64> {
        const OP: &str = "purge_destroyed_before";
        let client = self.client(OP).await?;
        // A purged sandbox's lease goes with it: nothing can act on that ID again.
        let row = query_one(
            &client,
            OP,
            "WITH purged AS (DELETE FROM sandboxes \
             WHERE state IN ('destroyed', 'error') AND ended_at < $1 RETURNING id), \
             leases_gone AS (DELETE FROM leases WHERE resource_id IN (SELECT id FROM purged)) \
             SELECT COUNT(*) FROM purged",
            &[&micros(cutoff)],
        )
        .await?;
        count_at(OP, &row, 0)
    }

    async fn insert_template(&self, template: &Template) -> StoreResult<()> {
        const OP: &str = "insert_template";
        let row = TemplateRow::from_domain(template)?;
        let client = self.client(OP).await?;
        insert(
            &client,
            OP,
            &format!(
                "INSERT INTO templates ({TEMPLATE_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
            ),
            &params(&row.values()),
            (Resource::Template, &row.name),
        )
        .await
    }

    async fn get_template(&self, name: &str) -> StoreResult<Option<Template>> {
        const OP: &str = "get_template";
        let client = self.client(OP).await?;
        fetch_opt(
            &client,
            OP,
            &format!("SELECT {TEMPLATE_COLUMNS} FROM templates WHERE name = $1"),
            &[&name],
        )
        .await?
        .map(TemplateRow::into_domain)
        .transpose()
    }

    async fn list_templates(
        &self,
        page: &KeyPage,
        tenant: Option<&str>,
    ) -> StoreResult<Vec<Template>> {
        const OP: &str = "list_templates";
        let client = self.client(OP).await?;
        let (after, limit) = (page.after(), page.pg_limit());
        let sql = rows::template_list_sql('$', tenant.is_some());
        let bound: Vec<&(dyn ToSql + Sync)> = match &tenant {
            None => vec![&after, &limit],
            Some(tenant) => vec![&after, &limit, tenant],
        };
        fetch_all(&client, OP, &sql, &bound, TemplateRow::into_domain).await
    }

    async fn update_template(&self, template: &Template) -> StoreResult<Option<Template>> {
        const OP: &str = "update_template";
        let row = TemplateRow::from_domain(template)?;
        let values = row.values();
        let mut bound = params(&values);
        // `created_at` is kept, so not bound: PostgreSQL refuses a parameter no statement uses.
        bound.remove(7);
        let client = self.client(OP).await?;
        fetch_opt(
            &client,
            OP,
            &format!(
                "UPDATE templates SET image = $2, memory_mb = $3, vcpus = $4, ttl_nanos = $5, \
                 provider = $6, metadata = $7, updated_at = $8, warm_pool = $9, egress = $10 \
                 WHERE name = $1 AND tenant_id IS NOT DISTINCT FROM $11 \
                 RETURNING {TEMPLATE_COLUMNS}"
            ),
            &bound,
        )
        .await?
        .map(TemplateRow::into_domain)
        .transpose()
    }

    async fn delete_template(&self, name: &str, tenant_id: Option<&str>) -> StoreResult<bool> {
        const OP: &str = "delete_template";
        let mut client = self.client(OP).await?;
        let tx = client.transaction().await.map_err(backend(OP))?;
        let deleted = execute(
            &tx,
            OP,
            "DELETE FROM templates WHERE name = $1 AND tenant_id IS NOT DISTINCT FROM $2",
            &[&name, &tenant_id],
        )
        .await?;
        // Another tenant's template of that name keeps its builds.
        if deleted > 0 {
            builds::delete_of_template(&tx, name).await?;
        }
        tx.commit().await.map_err(backend(OP))?;
        Ok(deleted > 0)
    }

    async fn insert_build(&self, build: &TemplateBuild, worker_id: &str) -> StoreResult<()> {
        let client = self.client("insert_build").await?;
        builds::insert(&client, &rows::BuildRow::from_domain(build, worker_id)).await
    }

    async fn get_build(
        &self,
        template: &str,
        build_id: &BuildId,
    ) -> StoreResult<Option<TemplateBuild>> {
        let client = self.client("get_build").await?;
        builds::get(&client, template, build_id.as_str()).await
    }

    async fn list_builds(&self, template: &str, limit: u32) -> StoreResult<Vec<TemplateBuild>> {
        const OP: &str = "list_builds";
        let client = self.client(OP).await?;
        builds::list(&client, OP, "template = $1", template, i64::from(limit)).await
    }

    async fn list_running_builds(&self, worker_id: &str) -> StoreResult<Vec<TemplateBuild>> {
        const OP: &str = "list_running_builds";
        let client = self.client(OP).await?;
        builds::list(
            &client,
            OP,
            "worker_id = $1 AND status = 'running'",
            worker_id,
            i64::MAX,
        )
        .await
    }

    async fn end_build(
        &self,
        build_id: &BuildId,
        ending: &BuildEnding,
        keep: u32,
    ) -> StoreResult<Option<TemplateBuild>> {
        const OP: &str = "end_build";
        let mut client = self.client(OP).await?;
        let tx = client.transaction().await.map_err(backend(OP))?;
        let ended = builds::end(&tx, build_id.as_str(), ending, keep).await?;
        tx.commit().await.map_err(backend(OP))?;
        Ok(ended)
    }

    async fn append_build_log(&self, build_id: &BuildId, lines: &[String]) -> StoreResult<()> {
        let client = self.client("append_build_log").await?;
        builds::append_log(&client, build_id.as_str(), lines).await
    }

    async fn build_log_after(
        &self,
        build_id: &BuildId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<(i64, String)>> {
        let client = self.client("build_log_after").await?;
        builds::log_after(&client, build_id.as_str(), after, limit).await
    }

    async fn list_built_images(&self, worker_id: &str) -> StoreResult<Vec<String>> {
        let client = self.client("list_built_images").await?;
        builds::list_built_images(&client, worker_id).await
    }

    async fn forget_built_image(&self, image: &str) -> StoreResult<bool> {
        let client = self.client("forget_built_image").await?;
        builds::forget_built_image(&client, image).await
    }

    async fn active_images(&self) -> StoreResult<Vec<String>> {
        let client = self.client("active_images").await?;
        builds::active_images(&client).await
    }

    async fn put_quota(
        &self,
        owner_id: &str,
        limits: QuotaLimits,
        at: Timestamp,
    ) -> StoreResult<OwnerQuota> {
        let client = self.client("put_quota").await?;
        quotas::put(&client, owner_id, limits, at)
            .await?
            .into_domain()
    }

    async fn get_quota(&self, owner_id: &str) -> StoreResult<Option<OwnerQuota>> {
        let client = self.client("get_quota").await?;
        quotas::get(&client, owner_id)
            .await?
            .map(rows::QuotaRow::into_domain)
            .transpose()
    }

    async fn list_quotas(&self, page: &KeyPage) -> StoreResult<Vec<OwnerQuota>> {
        const OP: &str = "list_quotas";
        let client = self.client(OP).await?;
        fetch_all(
            &client,
            OP,
            &format!(
                "SELECT {} FROM owner_quotas WHERE owner_id > $1 ORDER BY owner_id LIMIT $2",
                rows::QUOTA_COLUMNS
            ),
            &[&page.after(), &page.pg_limit()],
            rows::QuotaRow::into_domain,
        )
        .await
    }

    async fn delete_quota(&self, owner_id: &str) -> StoreResult<bool> {
        const OP: &str = "delete_quota";
        let client = self.client(OP).await?;
        execute(
            &client,
            OP,
            "DELETE FROM owner_quotas WHERE owner_id = $1",
            &[&owner_id],
        )
        .await
        .map(|n| n > 0)
    }

    async fn quota_summary(&self) -> StoreResult<QuotaSummary> {
        let client = self.client("quota_summary").await?;
        quotas::summary(&client).await
    }

    async fn upsert_worker(
        &self,
        id: &str,
        heartbeat: &WorkerHeartbeat,
        at: Timestamp,
    ) -> StoreResult<Worker> {
        let client = self.client("upsert_worker").await?;
        workers::upsert(&client, id, heartbeat, at)
            .await?
            .into_domain()
    }

    async fn set_worker_status(
        &self,
        id: &str,
        status: WorkerStatus,
        at: Timestamp,
    ) -> StoreResult<Option<Worker>> {
        let client = self.client("set_worker_status").await?;
        workers::set_status(&client, id, status, at)
            .await?
            .map(rows::WorkerRow::into_domain)
            .transpose()
    }

    async fn get_worker(&self, id: &str) -> StoreResult<Option<Worker>> {
        let client = self.client("get_worker").await?;
        workers::get_worker(&client, id)
            .await?
            .map(rows::WorkerRow::into_domain)
            .transpose()
    }

    async fn list_workers(&self, page: &KeyPage) -> StoreResult<Vec<Worker>> {
        const OP: &str = "list_workers";
        let client = self.client(OP).await?;
        fetch_all(
            &client,
            OP,
            &format!(
                "SELECT {} FROM workers WHERE id > $1 ORDER BY id LIMIT $2",
                rows::WORKER_COLUMNS
            ),
            &[&page.after(), &page.pg_limit()],
            rows::WorkerRow::into_domain,
        )
        .await
    }

    async fn delete_worker(&self, id: &str) -> StoreResult<bool> {
        const OP: &str = "delete_worker";
        let client = self.client(OP).await?;
        execute(&client, OP, "DELETE FROM workers WHERE id = $1", &[&id])
            .await
            .map(|n| n > 0)
    }

    async fn acquire_lease(
        &self,
        resource_id: &str,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<LeaseAcquire> {
        const OP: &str = "acquire_lease";
        let client = self.client(OP).await?;
        workers::acquire(&client, OP, resource_id, holder, ttl, now)
            .await?
            .into_domain()
    }

    async fn renew_lease(
        &self,
        resource_id: &str,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<Option<Lease>> {
        let client = self.client("renew_lease").await?;
        workers::renew(&client, resource_id, holder, ttl, now)
            .await?
            .map(rows::LeaseRow::into_domain)
            .transpose()
    }

    async fn renew_leases_held_by(
        &self,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<u64> {
        let client = self.client("renew_leases_held_by").await?;
        workers::renew_all(&client, holder, ttl, now).await
    }

    async fn release_lease(
        &self,
        resource_id: &str,
        holder: &str,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let client = self.client("release_lease").await?;
        workers::release(&client, resource_id, holder, now).await
    }

    async fn get_lease(&self, resource_id: &str) -> StoreResult<Option<Lease>> {
        const OP: &str = "get_lease";
        let client = self.client(OP).await?;
        workers::get(&client, OP, resource_id)
            .await?
            .map(rows::LeaseRow::into_domain)
            .transpose()
    }

    async fn list_leases(&self) -> StoreResult<Vec<Lease>> {
        const OP: &str = "list_leases";
        let client = self.client(OP).await?;
        fetch_all(
            &client,
            OP,
            &format!(
                "SELECT {} FROM leases ORDER BY resource_id",
                rows::LEASE_COLUMNS
            ),
            &[],
            rows::LeaseRow::into_domain,
        )
        .await
    }

    async fn lease_counts(&self, now: Timestamp) -> StoreResult<LeaseCounts> {
        let client = self.client("lease_counts").await?;
        workers::counts(&client, now).await
    }

    async fn create_tenant(&self, tenant: &Tenant) -> StoreResult<()> {
        let client = self.client("create_tenant").await?;
        tenants::create_tenant(&client, tenant).await
    }

    async fn get_tenant(&self, id: &str) -> StoreResult<Option<Tenant>> {
        let client = self.client("get_tenant").await?;
        tenants::get_tenant(&client, id)
            .await?
            .map(rows::TenantRow::into_domain)
            .transpose()
    }

    async fn list_tenants(&self) -> StoreResult<Vec<Tenant>> {
        let client = self.client("list_tenants").await?;
        tenants::list_tenants(&client).await
    }

    async fn delete_tenant(&self, id: &str) -> StoreResult<bool> {
        let client = self.client("delete_tenant").await?;
        tenants::delete_tenant(&client, id).await
    }

    async fn put_member(&self, member: &Member) -> StoreResult<Member> {
        let client = self.client("put_member").await?;
        tenants::put_member(&client, member).await?.into_domain()
    }

    async fn list_members(&self, tenant_id: &str) -> StoreResult<Vec<Member>> {
        let client = self.client("list_members").await?;
        tenants::list_members(&client, tenant_id).await
    }

    async fn delete_member(&self, tenant_id: &str, subject: &str) -> StoreResult<bool> {
        let client = self.client("delete_member").await?;
        tenants::delete_member(&client, tenant_id, subject).await
    }

    async fn member_role(&self, tenant_id: &str, subject: &str) -> StoreResult<Option<Role>> {
        let client = self.client("member_role").await?;
        tenants::member_role(&client, tenant_id, subject)
            .await?
            .map(|role| rows::decode_role(tenant_id, subject, &role))
            .transpose()
    }

    async fn create_policy(&self, policy: &Policy) -> StoreResult<()> {
        let row = rows::PolicyRow::from_domain(policy);
        let client = self.client("create_policy").await?;
        tenants::create_policy(&client, &row).await
    }

    async fn get_policy(&self, tenant_id: &str, id: &str) -> StoreResult<Option<Policy>> {
        let client = self.client("get_policy").await?;
        tenants::get_policy(&client, tenant_id, id)
            .await?
            .map(rows::PolicyRow::into_domain)
            .transpose()
    }

    async fn list_policies(&self, tenant_id: &str) -> StoreResult<Vec<Policy>> {
        let client = self.client("list_policies").await?;
        tenants::list_policies(&client, tenant_id).await
    }

    async fn update_policy(&self, policy: &Policy) -> StoreResult<Option<Policy>> {
        let row = rows::PolicyRow::from_domain(policy);
        let client = self.client("update_policy").await?;
        tenants::update_policy(&client, &row)
            .await?
            .map(rows::PolicyRow::into_domain)
            .transpose()
    }

    async fn delete_policy(&self, tenant_id: &str, id: &str) -> StoreResult<bool> {
        let client = self.client("delete_policy").await?;
        tenants::delete_policy(&client, tenant_id, id).await
    }

    async fn save_exec(&self, exec: &StoredExec, keep_ended: u32) -> StoreResult<()> {
        let client = self.client("save_exec").await?;
        execs::save(&client, exec, keep_ended).await
    }

    async fn list_execs_on_worker(&self, worker_id: &str) -> StoreResult<Vec<StoredExec>> {
        let client = self.client("list_execs_on_worker").await?;
        execs::list_on_worker(&client, worker_id).await
    }

    async fn delete_execs(&self, sandbox_id: &SandboxId) -> StoreResult<u64> {
        let client = self.client("delete_execs").await?;
        execs::delete(&client, sandbox_id.as_str()).await
    }

    async fn insert_audit(&self, entry: &AuditEntry) -> StoreResult<()> {
        let row = rows::AuditRow::from_domain(entry)?;
        let client = self.client("insert_audit").await?;
        audit::insert_entry(&client, &row).await
    }

    async fn list_audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditEntry>> {
        let client = self.client("list_audit").await?;
        audit::list(&client, filter).await
    }

    async fn close(&self) {
        self.pool.close();
    }
}
