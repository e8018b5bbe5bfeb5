//! The embedded SQLite backend: WAL mode, one writer connection, a small pool of readers, and
//! every call run on tokio's blocking pool so the async runtime never waits on disk.

mod audit;
mod builds;
mod codec;
mod connections;
mod execs;
mod migrate;
mod quotas;
mod tenants;
mod workers;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};
use svc_core::error::Resource;

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension, ToSql, TransactionBehavior};
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

use crate::rows::{self, micros, SandboxRow, TemplateRow, SANDBOX_COLUMNS, TEMPLATE_COLUMNS};
use crate::{
    BuildEnding, EndedState, KeyPage, SandboxFilter, Store, StoreError, StoreResult, StoredExec,
};
use codec::read;
use connections::Connections;

/// A store in one SQLite file (or in memory).
pub struct SqliteStore {
    connections: Arc<Connections>,
}

impl SqliteStore {
    /// A value of the `meta` table, made by the migrations.
    async fn meta(&self, key: &'static str) -> StoreResult<String> {
        self.connections
            .read(key, move |conn| {
                conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |row| {
                    row.get(0)
                })
                .map_err(codec::backend(key))
            })
            .await
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and runs pending migrations.
    /// `:memory:` gives a private in-memory database.
    pub async fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        let path = path.as_ref().to_path_buf();
        let connections = tokio::task::spawn_blocking(move || -> StoreResult<Connections> {
            let connections = Connections::open(&path)?;
            connections.with_writer(migrate::run)?;
            Ok(connections)
        })
        .await
        .map_err(|e| StoreError::Backend {
            operation: "open",
            source: e.into(),
        })??;
        Ok(SqliteStore {
            connections: Arc::new(connections),
        })
    }

    /// The schema version the database is at, and the latest one this binary knows.
    pub async fn schema_version(&self) -> StoreResult<(i64, i64)> {
        self.connections
            .read("schema_version", |conn| {
                Ok((migrate::current_version(conn)?, migrate::latest_version()))
            })
            .await
    }
}

/// The schema version of the database file at `path` and the latest this binary knows, read
/// without writing anything (no file is created, no migration runs); `None` when there is no
/// file yet.
pub async fn inspect(path: impl AsRef<Path>) -> StoreResult<Option<(i64, i64)>> {
    let path = path.as_ref().to_path_buf();
    tokio::task::spawn_blocking(move || {
        if !path.exists() {
            return Ok(None);
        }
        let conn = rusqlite::Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| StoreError::Backend {
            operation: "inspect",
            source: e.into(),
        })?;
        Ok(Some((
            migrate::current_version(&conn)?,
            migrate::latest_version(),
        )))
    })
    .await
    .map_err(|e| StoreError::Backend {
        operation: "inspect",
        source: e.into(),
    })?
}

/// The states that hold a runtime and so count toward capacity.
const HOLDS_RUNTIME: &str = "state IN ('creating', 'running', 'paused')";

static INSERT_SANDBOX: LazyLock<String> = LazyLock::new(|| {
    let placeholders: Vec<String> = (1..=rows::SANDBOX_COLUMN_COUNT)
        .map(|i| format!("?{i}"))
        .collect();
    format!(
        "INSERT INTO sandboxes ({SANDBOX_COLUMNS}) VALUES ({})",
        placeholders.join(", ")
    )
});

/// Sandbox statements that need the column list, formatted once (and then prepared once per
/// connection through the statement cache).
struct SandboxSql {
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
    get: format!("SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE id = ?1"),
    mark_running: format!(
        "UPDATE sandboxes SET state = 'running', exec_path = ?2, state_message = NULL WHERE id = ?1 \
         AND state = 'creating' RETURNING {SANDBOX_COLUMNS}"
    ),
    end: format!(
        "UPDATE sandboxes SET state = ?2, destroyed_at = ?3, ended_at = ?4, state_reason = ?5, \
         state_message = ?6 WHERE id = ?1 AND {HOLDS_RUNTIME} RETURNING {SANDBOX_COLUMNS}"
    ),
    set_expiry: format!(
        "UPDATE sandboxes SET expires_at = ?2 WHERE id = ?1 AND state = 'running' \
         RETURNING {SANDBOX_COLUMNS}"
    ),
    pause: format!(
        "UPDATE sandboxes SET state = 'paused', paused_at = ?2 WHERE id = ?1 \
         AND state = 'running' RETURNING {SANDBOX_COLUMNS}"
    ),
    // The time spent paused moves the expiry and adds to the paused total, in one statement
    // (a clock behind the pausing replica's counts as no time).
    resume: format!(
        "UPDATE sandboxes SET state = 'running', \
         expires_at = expires_at + MAX(?2 - paused_at, 0), \
         paused_micros = paused_micros + MAX(?2 - paused_at, 0), paused_at = NULL \
         WHERE id = ?1 AND state = 'paused' RETURNING {SANDBOX_COLUMNS}"
    ),
    reassign: format!(
        "UPDATE sandboxes SET worker_id = ?3 WHERE id = ?1 AND state IN ('running', 'paused') \
         AND worker_id = ?2 RETURNING {SANDBOX_COLUMNS}"
    ),
    list_expired: format!(
        "SELECT {SANDBOX_COLUMNS} FROM sandboxes \
         WHERE state = 'running' AND expires_at <= ?1 ORDER BY expires_at, id"
    ),
    newest_active_of_owner: format!(
        "SELECT {SANDBOX_COLUMNS} FROM sandboxes WHERE owner_id = ?1 AND {HOLDS_RUNTIME} \
         ORDER BY created_at DESC, id DESC LIMIT 1"
    ),
}
});

/// The list statement for `filter` (only the filters set, [`SandboxFilter::list_clause`]) and
/// its parameters, handed to `run`.
fn with_list_statement<T>(filter: &SandboxFilter, run: impl FnOnce(&str, &[&dyn ToSql]) -> T) -> T {
    let sql = format!(
        "SELECT {SANDBOX_COLUMNS} FROM sandboxes {}",
        filter.list_clause('?')
    );
    let equalities = filter.equalities();
    let (after_created, after_id) = filter.keyset();
    // SQLite reads a negative limit as none.
    let limit = filter.limit.map_or(-1, i64::from);
    let mut values: Vec<&dyn ToSql> = equalities
        .iter()
        .map(|(_, value)| value as &dyn ToSql)
        .collect();
    values.extend([&after_created as &dyn ToSql, &after_id, &limit]);
    run(&sql, &values)
}

/// Runs a cached statement that yields at most one sandbox row. The row comes back raw and is
/// decoded by [`decoded`] after the connection is released: the writer connection is the one
/// thing every write waits for, so nothing else happens while it is held.
fn one_sandbox(
    conn: &rusqlite::Connection,
    operation: &'static str,
    sql: &str,
    params: impl rusqlite::Params,
) -> StoreResult<Option<SandboxRow>> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.query_row(params, read::<SandboxRow>).optional())
        .map_err(codec::backend(operation))
}

fn decoded(row: StoreResult<Option<SandboxRow>>) -> StoreResult<Option<Sandbox>> {
    row?.map(SandboxRow::into_domain).transpose()
}

/// Decodes every row of a query into its domain value.
fn collect<R, T>(
    operation: &'static str,
    rows: impl Iterator<Item = rusqlite::Result<R>>,
    into_domain: impl Fn(R) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    rows.map(|row| into_domain(row.map_err(codec::backend(operation))?))
        .collect()
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn installation_id(&self) -> StoreResult<String> {
        self.meta("installation_id").await
    }

    async fn preview_key(&self) -> StoreResult<String> {
        self.meta("preview_key").await
    }

    async fn ping(&self) -> StoreResult<Duration> {
        let started = Instant::now();
        self.connections
            .read("ping", |conn| {
                conn.query_row("SELECT 1", [], |_| Ok(()))
                    .map_err(codec::backend("ping"))
            })
            .await?;
        Ok(started.elapsed())
    }

    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()> {
        let row = SandboxRow::from_domain(sandbox)?;
        self.connections
            .write("insert_sandbox", move |conn| {
                conn.prepare_cached(&INSERT_SANDBOX)
                    .and_then(|mut stmt| stmt.execute(row.values()))
                    .map_err(codec::conflict_or_backend(
                        "insert_sandbox",
                        Resource::Sandbox,
                        &row.id,
                    ))?;
                Ok(())
            })
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
        let owner = sandbox.owner_id.clone();
        let holder = sandbox.worker_id.clone().unwrap_or_default();
        let now = sandbox.created_at;
        self.connections
            .write(OP, move |conn| {
                // IMMEDIATE takes the write lock before reading the quota and counting, so no
                // other writer (another process on the same file included) can insert or
                // change a quota between the decision and the insert.
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(codec::backend(OP))?;
                let admission = quotas::decide(&tx, OP, owner.as_ref(), lifetime, limits, false)?;
                if !admission.allowed {
                    return Ok(admission);
                }
                // The lease before the record (interface "States and transitions"): a new ID's
                // lease is free, so this always acquires.
                if let rows::AcquireRow::Held(_) =
                    workers::acquire(&tx, OP, &row.id, &holder, lease_ttl, now)?
                {
                    return Err(StoreError::Conflict {
                        entity: Resource::Lease,
                        key: row.id.clone(),
                    });
                }
                tx.prepare_cached(&INSERT_SANDBOX)
                    .and_then(|mut stmt| stmt.execute(row.values()))
                    .map_err(codec::conflict_or_backend(OP, Resource::Sandbox, &row.id))?;
                tx.commit().map_err(codec::backend(OP))?;
                Ok(admission)
            })
            .await
    }

    async fn check_admission(
        &self,
        owner: Option<&OwnerId>,
        lifetime: Duration,
        limits: GlobalLimits,
    ) -> StoreResult<Admission> {
        const OP: &str = "check_admission";
        let owner = owner.cloned();
        self.connections
            .read(OP, move |conn| {
                // One read transaction: the quota and both counts from the same snapshot.
                let tx = conn.unchecked_transaction().map_err(codec::backend(OP))?;
                quotas::decide(&tx, OP, owner.as_ref(), lifetime, limits, true)
            })
            .await
    }

    async fn mark_sandbox_running(
        &self,
        id: &SandboxId,
        exec_path: Option<&str>,
    ) -> StoreResult<Option<Sandbox>> {
        let id = id.as_str().to_owned();
        let exec_path = exec_path.map(str::to_owned);
        decoded(
            self.connections
                .write("mark_sandbox_running", move |conn| {
                    one_sandbox(
                        conn,
                        "mark_sandbox_running",
                        &SANDBOX_SQL.mark_running,
                        rusqlite::params![id, exec_path],
                    )
                })
                .await,
        )
    }

    async fn set_creating_message(&self, id: &SandboxId, message: &str) -> StoreResult<bool> {
        let (id, message) = (id.to_string(), message.to_owned());
        self.connections
            .write("set_creating_message", move |conn| {
                conn.prepare_cached(
                    "UPDATE sandboxes SET state_message = ?2 WHERE id = ?1 AND state = 'creating'",
                )
                .and_then(|mut stmt| stmt.execute([&id, &message]))
                .map(|n| n > 0)
                .map_err(codec::backend("set_creating_message"))
            })
            .await
    }

    async fn end_sandbox(
        &self,
        id: &SandboxId,
        state: EndedState,
        ending: &Ending,
        at: Timestamp,
    ) -> StoreResult<Option<Sandbox>> {
        let id = id.as_str().to_owned();
        let reason = ending.reason.as_str();
        let message = ending.message.clone();
        let destroyed_at = (state == EndedState::Destroyed).then(|| micros(at));
        decoded(
            self.connections
                .write("end_sandbox", move |conn| {
                    const OP: &str = "end_sandbox";
                    let tx = conn.transaction().map_err(codec::backend(OP))?;
                    let ended = one_sandbox(
                        &tx,
                        OP,
                        &SANDBOX_SQL.end,
                        params![
                            id,
                            state.state().as_str(),
                            destroyed_at,
                            micros(at),
                            reason,
                            message
                        ],
                    )?;
                    if ended.is_some() {
                        // Whoever held it: the sandbox it fenced is gone.
                        tx.prepare_cached(
                            "UPDATE leases SET expires_at = MIN(expires_at, ?2) WHERE resource_id = ?1",
                        )
                        .and_then(|mut stmt| stmt.execute(params![id, micros(at)]))
                        .map_err(codec::backend(OP))?;
                    }
                    tx.commit().map_err(codec::backend(OP))?;
                    Ok(ended)
                })
                .await,
        )
    }

    async fn get_sandbox(&self, id: &SandboxId) -> StoreResult<Option<Sandbox>> {
        let id = id.as_str().to_owned();
        decoded(
            self.connections
                .read("get_sandbox", move |conn| {
                    one_sandbox(conn, "get_sandbox", &SANDBOX_SQL.get, [&id])
                })
                .await,
        )
    }

    async fn list_sandboxes(&self, filter: &SandboxFilter) -> StoreResult<Vec<Sandbox>> {
        const OP: &str = "list_sandboxes";
        let filter = filter.clone();
        self.connections
            .read(OP, move |conn| {
                with_list_statement(&filter, |sql, values| {
                    let mut stmt = conn.prepare_cached(sql).map_err(codec::backend(OP))?;
                    let rows = stmt
                        .query_map(values, read::<SandboxRow>)
                        .map_err(codec::backend(OP))?;
                    collect(OP, rows, SandboxRow::into_domain)
                })
            })
            .await
    }

    async fn newest_active_sandbox_of_owner(&self, owner_id: &str) -> StoreResult<Option<Sandbox>> {
        const OP: &str = "newest_active_sandbox_of_owner";
        let owner = owner_id.to_owned();
        decoded(
            self.connections
                .read(OP, move |conn| {
                    one_sandbox(conn, OP, &SANDBOX_SQL.newest_active_of_owner, [&owner])
                })
                .await,
        )
    }

    async fn count_active_sandboxes(&self, owner_id: Option<&str>) -> StoreResult<u64> {
        let owner_id = owner_id.map(str::to_owned);
        self.connections
            .read("count_active_sandboxes", move |conn| {
                quotas::count_holding(conn, "count_active_sandboxes", owner_id.as_deref())
            })
            .await
    }

    async fn count_active_sandboxes_by_worker(&self) -> StoreResult<BTreeMap<String, u64>> {
        const OP: &str = "count_active_sandboxes_by_worker";
        self.connections
            .read(OP, move |conn| {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT COALESCE(worker_id, ''), COUNT(*) FROM sandboxes \
                         WHERE {HOLDS_RUNTIME} GROUP BY COALESCE(worker_id, '')"
                    ))
                    .map_err(codec::backend(OP))?;
                let rows = stmt
                    .query_map([], |row| {
                        Ok((row.get::<_, String>(0)?, rows::count(row.get(1)?)))
                    })
                    .map_err(codec::backend(OP))?;
                rows.collect::<Result<BTreeMap<_, _>, _>>()
                    .map_err(codec::backend(OP))
            })
            .await
    }

    async fn sandbox_groups(&self) -> StoreResult<Vec<svc_core::observe::SandboxGroup>> {
        const OP: &str = "sandbox_groups";
        self.connections
            .read(OP, move |conn| {
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT state, provider, COALESCE(worker_id, ''), COUNT(*) FROM sandboxes \
                         GROUP BY state, provider, worker_id",
                    )
                    .map_err(codec::backend(OP))?;
                let rows = stmt
                    .query_map([], |row| {
                        Ok(svc_core::observe::SandboxGroup {
                            state: row.get(0)?,
                            provider: row.get(1)?,
                            worker_id: row.get(2)?,
                            count: u64::try_from(row.get::<_, i64>(3)?).unwrap_or(0),
                        })
                    })
                    .map_err(codec::backend(OP))?;
                rows.collect::<Result<Vec<_>, _>>()
                    .map_err(codec::backend(OP))
            })
            .await
    }

    async fn count_sandboxes_on_provider(&self, provider: &str) -> StoreResult<u64> {
        let provider = provider.to_owned();
        self.connections
            .read("count_sandboxes_on_provider", move |conn| {
                let count: i64 = conn
                    .query_row(
                        &format!("SELECT COUNT(*) FROM sandboxes WHERE {HOLDS_RUNTIME} AND provider = ?1"),
                        [&provider],
                        |row| row.get(0),
                    )
                    .map_err(codec::backend("count_sandboxes_on_provider"))?;
                Ok(u64::try_from(count).unwrap_or(0))
            })
            .await
    }

    async fn set_sandbox_expiry(
        &self,
        id: &SandboxId,
        expires_at: Timestamp,
    ) -> StoreResult<Option<Sandbox>> {
        let id = id.as_str().to_owned();
        decoded(
            self.connections
                .write("set_sandbox_expiry", move |conn| {
                    one_sandbox(
                        conn,
                        "set_sandbox_expiry",
                        &SANDBOX_SQL.set_expiry,
                        params![id, micros(expires_at)],
                    )
                })
                .await,
        )
    }

    async fn pause_sandbox(&self, id: &SandboxId, at: Timestamp) -> StoreResult<Option<Sandbox>> {
        let id = id.as_str().to_owned();
        decoded(
            self.connections
                .write("pause_sandbox", move |conn| {
                    one_sandbox(
                        conn,
                        "pause_sandbox",
                        &SANDBOX_SQL.pause,
                        params![id, micros(at)],
                    )
                })
                .await,
        )
    }

    async fn resume_sandbox(&self, id: &SandboxId, at: Timestamp) -> StoreResult<Option<Sandbox>> {
        let id = id.as_str().to_owned();
        decoded(
            self.connections
                .write("resume_sandbox", move |conn| {
                    one_sandbox(
                        conn,
                        "resume_sandbox",
                        &SANDBOX_SQL.resume,
                        params![id, micros(at)],
                    )
                })
                .await,
        )
    }

    async fn reassign_sandbox(
        &self,
        id: &SandboxId,
        from: &str,
        to: &str,
    ) -> StoreResult<Option<Sandbox>> {
        let params = (id.as_str().to_owned(), from.to_owned(), to.to_owned());
        decoded(
            self.connections
                .write("reassign_sandbox", move |conn| {
                    one_sandbox(conn, "reassign_sandbox", &SANDBOX_SQL.reassign, params)
                })
                .await,
        )
    }

    async fn list_expired_sandboxes(&self, now: Timestamp) -> StoreResult<Vec<Sandbox>> {
        self.connections
            .read("list_expired_sandboxes", move |conn| {
                let mut stmt = conn
                    .prepare_cached(&SANDBOX_SQL.list_expired)
                    .map_err(codec::backend("list_expired_sandboxes"))?;
                let rows = stmt
                    .query_map([micros(now)], read::<SandboxRow>)
                    .map_err(codec::backend("list_expired_sandboxes"))?;
                collect("list_expired_sandboxes", rows, SandboxRow::into_domain)
            })
            .await
    }

    async fn purge_destroyed_before(&self, cutoff: Timestamp) -> StoreResult<u64> {
        self.connections
            .write("purge_destroyed_before", move |conn| {
                const OP: &str = "purge_destroyed_before";
                let tx = conn.transaction().map_err(codec::backend(OP))?;
                // A purged sandbox's lease goes with it: nothing can act on that ID again.
                // `+state` keeps SQLite off the state index, which walks every ended sandbox
                // ever kept: `sandboxes_by_ended` seeks only those ended before the cutoff
                // (none, mostly, as the purge runs often).
                tx.execute(
                    "DELETE FROM leases WHERE resource_id IN (SELECT id FROM sandboxes \
                     WHERE +state IN ('destroyed', 'error') AND ended_at < ?1)",
                    [micros(cutoff)],
                )
                .map_err(codec::backend(OP))?;
                let deleted = tx
                    .execute(
                        "DELETE FROM sandboxes WHERE +state IN ('destroyed', 'error') AND ended_at < ?1",
                        [micros(cutoff)],
                    )
                    .map_err(codec::backend(OP))?;
                tx.commit().map_err(codec::backend(OP))?;
                Ok(deleted as u64)
            })
            .await
    }

    async fn insert_template(&self, template: &Template) -> StoreResult<()> {
        let row = TemplateRow::from_domain(template)?;
        self.connections
            .write("insert_template", move |conn| {
                conn.execute(
                    &format!("INSERT INTO templates ({TEMPLATE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"),
                    row.values(),
                )
                .map_err(codec::conflict_or_backend("insert_template", Resource::Template, &row.name))?;
                Ok(())
            })
            .await
    }

    async fn get_template(&self, name: &str) -> StoreResult<Option<Template>> {
        let name = name.to_owned();
        self.connections
            .read("get_template", move |conn| {
                conn.query_row(
                    &format!("SELECT {TEMPLATE_COLUMNS} FROM templates WHERE name = ?1"),
                    [&name],
                    read::<TemplateRow>,
                )
                .optional()
                .map_err(codec::backend("get_template"))?
                .map(TemplateRow::into_domain)
                .transpose()
            })
            .await
    }

    async fn list_templates(
        &self,
        page: &KeyPage,
        tenant: Option<&str>,
    ) -> StoreResult<Vec<Template>> {
        const OP: &str = "list_templates";
        let (after, limit) = (page.after().to_owned(), page.sqlite_limit());
        let tenant = tenant.map(str::to_owned);
        self.connections
            .read(OP, move |conn| {
                let mut stmt = conn
                    .prepare_cached(&rows::template_list_sql('?', tenant.is_some()))
                    .map_err(codec::backend(OP))?;
                let rows = match &tenant {
                    None => stmt.query_map(params![after, limit], read::<TemplateRow>),
                    Some(tenant) => {
                        stmt.query_map(params![after, limit, tenant], read::<TemplateRow>)
                    }
                }
                .map_err(codec::backend(OP))?;
                collect(OP, rows, TemplateRow::into_domain)
            })
            .await
    }

    async fn update_template(&self, template: &Template) -> StoreResult<Option<Template>> {
        let row = TemplateRow::from_domain(template)?;
        self.connections
            .write("update_template", move |conn| {
                conn.query_row(
                    &format!(
                        "UPDATE templates SET image = ?2, memory_mb = ?3, vcpus = ?4, ttl_nanos = ?5, \
                         provider = ?6, metadata = ?7, updated_at = ?9, warm_pool = ?10, egress = ?11 \
                         WHERE name = ?1 AND tenant_id IS ?12 \
                         RETURNING {TEMPLATE_COLUMNS}"
                    ),
                    row.values(),
                    read::<TemplateRow>,
                )
                .optional()
                .map_err(codec::backend("update_template"))?
                .map(TemplateRow::into_domain)
                .transpose()
            })
            .await
    }

    async fn delete_template(&self, name: &str, tenant_id: Option<&str>) -> StoreResult<bool> {
        let (name, tenant) = (name.to_owned(), tenant_id.map(str::to_owned));
        self.connections
            .write("delete_template", move |conn| {
                const OP: &str = "delete_template";
                let tx = conn.transaction().map_err(codec::backend(OP))?;
                let deleted = tx
                    .execute(
                        "DELETE FROM templates WHERE name = ?1 AND tenant_id IS ?2",
                        params![name, tenant],
                    )
                    .map_err(codec::backend(OP))?;
                // Another tenant's template of that name keeps its builds.
                if deleted > 0 {
                    builds::delete_of_template(&tx, &name)?;
                }
                tx.commit().map_err(codec::backend(OP))?;
                Ok(deleted > 0)
            })
            .await
    }

    async fn insert_build(&self, build: &TemplateBuild, worker_id: &str) -> StoreResult<()> {
        let row = rows::BuildRow::from_domain(build, worker_id);
        self.connections
            .write("insert_build", move |conn| builds::insert(conn, &row))
            .await
    }

    async fn get_build(
        &self,
        template: &str,
        build_id: &BuildId,
    ) -> StoreResult<Option<TemplateBuild>> {
        let (template, build_id) = (template.to_owned(), build_id.to_string());
        self.connections
            .read("get_build", move |conn| {
                builds::get(conn, &template, &build_id)
            })
            .await
    }

    async fn list_builds(&self, template: &str, limit: u32) -> StoreResult<Vec<TemplateBuild>> {
        let template = template.to_owned();
        self.connections
            .read("list_builds", move |conn| {
                builds::list_of_template(conn, &template, limit)
            })
            .await
    }

    async fn list_running_builds(&self, worker_id: &str) -> StoreResult<Vec<TemplateBuild>> {
        let worker = worker_id.to_owned();
        self.connections
            .read("list_running_builds", move |conn| {
                builds::list_running(conn, &worker)
            })
            .await
    }

    async fn end_build(
        &self,
        build_id: &BuildId,
        ending: &BuildEnding,
        keep: u32,
    ) -> StoreResult<Option<TemplateBuild>> {
        let (build_id, ending) = (build_id.to_string(), ending.clone());
        self.connections
            .write("end_build", move |conn| {
                builds::end(conn, &build_id, &ending, keep)
            })
            .await
    }

    async fn append_build_log(&self, build_id: &BuildId, lines: &[String]) -> StoreResult<()> {
        let (build_id, lines) = (build_id.to_string(), lines.to_vec());
        self.connections
            .write("append_build_log", move |conn| {
                builds::append_log(conn, &build_id, &lines)
            })
            .await
    }

    async fn build_log_after(
        &self,
        build_id: &BuildId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<(i64, String)>> {
        let build_id = build_id.to_string();
        self.connections
            .read("build_log_after", move |conn| {
                builds::log_after(conn, &build_id, after, limit)
            })
            .await
    }

    async fn list_built_images(&self, worker_id: &str) -> StoreResult<Vec<String>> {
        let worker = worker_id.to_owned();
        self.connections
            .read("list_built_images", move |conn| {
                builds::list_built_images(conn, &worker)
            })
            .await
    }

    async fn forget_built_image(&self, image: &str) -> StoreResult<bool> {
        let image = image.to_owned();
        self.connections
            .write("forget_built_image", move |conn| {
                builds::forget_built_image(conn, &image)
            })
            .await
    }

    async fn active_images(&self) -> StoreResult<Vec<String>> {
        self.connections
            .read("active_images", builds::active_images)
            .await
    }

    async fn put_quota(
        &self,
        owner_id: &str,
        limits: QuotaLimits,
        at: Timestamp,
    ) -> StoreResult<OwnerQuota> {
        let owner = owner_id.to_owned();
        self.connections
            .write("put_quota", move |conn| {
                quotas::put(conn, &owner, limits, at)
            })
            .await?
            .into_domain()
    }

    async fn get_quota(&self, owner_id: &str) -> StoreResult<Option<OwnerQuota>> {
        let owner = owner_id.to_owned();
        self.connections
            .read("get_quota", move |conn| {
                quotas::get(conn, "get_quota", &owner)
            })
            .await?
            .map(rows::QuotaRow::into_domain)
            .transpose()
    }

    async fn list_quotas(&self, page: &KeyPage) -> StoreResult<Vec<OwnerQuota>> {
        const OP: &str = "list_quotas";
        let (after, limit) = (page.after().to_owned(), page.sqlite_limit());
        self.connections
            .read(OP, move |conn| {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {} FROM owner_quotas WHERE owner_id > ?1 ORDER BY owner_id LIMIT ?2",
                        rows::QUOTA_COLUMNS
                    ))
                    .map_err(codec::backend(OP))?;
                let rows = stmt
                    .query_map(rusqlite::params![after, limit], read::<rows::QuotaRow>)
                    .map_err(codec::backend(OP))?;
                collect(OP, rows, rows::QuotaRow::into_domain)
            })
            .await
    }

    async fn delete_quota(&self, owner_id: &str) -> StoreResult<bool> {
        let owner = owner_id.to_owned();
        self.connections
            .write("delete_quota", move |conn| {
                let deleted = conn
                    .prepare_cached("DELETE FROM owner_quotas WHERE owner_id = ?1")
                    .and_then(|mut stmt| stmt.execute([&owner]))
                    .map_err(codec::backend("delete_quota"))?;
                Ok(deleted > 0)
            })
            .await
    }

    async fn quota_summary(&self) -> StoreResult<QuotaSummary> {
        self.connections
            .read("quota_summary", quotas::summary)
            .await
    }

    async fn upsert_worker(
        &self,
        id: &str,
        heartbeat: &WorkerHeartbeat,
        at: Timestamp,
    ) -> StoreResult<Worker> {
        let (id, heartbeat) = (id.to_owned(), heartbeat.clone());
        self.connections
            .write("upsert_worker", move |conn| {
                workers::upsert(conn, &id, &heartbeat, at)
            })
            .await?
            .into_domain()
    }

    async fn set_worker_status(
        &self,
        id: &str,
        status: WorkerStatus,
        at: Timestamp,
    ) -> StoreResult<Option<Worker>> {
        const OP: &str = "set_worker_status";
        let id = id.to_owned();
        self.connections
            .write(OP, move |conn| {
                conn.prepare_cached(&format!(
                    "UPDATE workers SET status = ?2, updated_at = ?3 WHERE id = ?1 \
                     RETURNING {}",
                    rows::WORKER_COLUMNS
                ))
                .and_then(|mut stmt| {
                    stmt.query_row(
                        params![id, status.as_str(), micros(at)],
                        read::<rows::WorkerRow>,
                    )
                    .optional()
                })
                .map_err(codec::backend(OP))
            })
            .await?
            .map(rows::WorkerRow::into_domain)
            .transpose()
    }

    async fn get_worker(&self, id: &str) -> StoreResult<Option<Worker>> {
        const OP: &str = "get_worker";
        let id = id.to_owned();
        self.connections
            .read(OP, move |conn| {
                conn.prepare_cached(&format!(
                    "SELECT {} FROM workers WHERE id = ?1",
                    rows::WORKER_COLUMNS
                ))
                .and_then(|mut stmt| stmt.query_row([&id], read::<rows::WorkerRow>).optional())
                .map_err(codec::backend(OP))
            })
            .await?
            .map(rows::WorkerRow::into_domain)
            .transpose()
    }

    async fn list_workers(&self, page: &KeyPage) -> StoreResult<Vec<Worker>> {
        const OP: &str = "list_workers";
        let (after, limit) = (page.after().to_owned(), page.sqlite_limit());
        self.connections
            .read(OP, move |conn| {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {} FROM workers WHERE id > ?1 ORDER BY id LIMIT ?2",
                        rows::WORKER_COLUMNS
                    ))
                    .map_err(codec::backend(OP))?;
                let rows = stmt
                    .query_map(rusqlite::params![after, limit], read::<rows::WorkerRow>)
                    .map_err(codec::backend(OP))?;
                collect(OP, rows, rows::WorkerRow::into_domain)
            })
            .await
    }

    async fn delete_worker(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_owned();
        self.connections
            .write("delete_worker", move |conn| {
                conn.prepare_cached("DELETE FROM workers WHERE id = ?1")
                    .and_then(|mut stmt| stmt.execute([&id]))
                    .map(|n| n > 0)
                    .map_err(codec::backend("delete_worker"))
            })
            .await
    }

    async fn acquire_lease(
        &self,
        resource_id: &str,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<LeaseAcquire> {
        let (resource, holder) = (resource_id.to_owned(), holder.to_owned());
        self.connections
            .write("acquire_lease", move |conn| {
                workers::acquire(conn, "acquire_lease", &resource, &holder, ttl, now)
            })
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
        let (resource, holder) = (resource_id.to_owned(), holder.to_owned());
        self.connections
            .write("renew_lease", move |conn| {
                workers::renew(conn, &resource, &holder, ttl, now)
            })
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
        let holder = holder.to_owned();
        self.connections
            .write("renew_leases_held_by", move |conn| {
                workers::renew_all(conn, &holder, ttl, now)
            })
            .await
    }

    async fn release_lease(
        &self,
        resource_id: &str,
        holder: &str,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let (resource, holder) = (resource_id.to_owned(), holder.to_owned());
        self.connections
            .write("release_lease", move |conn| {
                workers::release(conn, &resource, &holder, now)
            })
            .await
    }

    async fn get_lease(&self, resource_id: &str) -> StoreResult<Option<Lease>> {
        let resource = resource_id.to_owned();
        self.connections
            .read("get_lease", move |conn| {
                workers::get(conn, "get_lease", &resource)
            })
            .await?
            .map(rows::LeaseRow::into_domain)
            .transpose()
    }

    async fn list_leases(&self) -> StoreResult<Vec<Lease>> {
        const OP: &str = "list_leases";
        self.connections
            .read(OP, move |conn| {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {} FROM leases ORDER BY resource_id",
                        rows::LEASE_COLUMNS
                    ))
                    .map_err(codec::backend(OP))?;
                let rows = stmt
                    .query_map([], read::<rows::LeaseRow>)
                    .map_err(codec::backend(OP))?;
                collect(OP, rows, rows::LeaseRow::into_domain)
            })
            .await
    }

    async fn lease_counts(&self, now: Timestamp) -> StoreResult<LeaseCounts> {
        self.connections
            .read("lease_counts", move |conn| workers::counts(conn, now))
            .await
    }

    async fn create_tenant(&self, tenant: &Tenant) -> StoreResult<()> {
        let tenant = tenant.clone();
        self.connections
            .write("create_tenant", move |conn| {
                tenants::create_tenant(conn, &tenant)
            })
            .await
    }

    async fn get_tenant(&self, id: &str) -> StoreResult<Option<Tenant>> {
        let id = id.to_owned();
        self.connections
            .read("get_tenant", move |conn| tenants::get_tenant(conn, &id))
            .await?
            .map(rows::TenantRow::into_domain)
            .transpose()
    }

    async fn list_tenants(&self) -> StoreResult<Vec<Tenant>> {
        self.connections
            .read("list_tenants", tenants::list_tenants)
            .await
    }

    async fn delete_tenant(&self, id: &str) -> StoreResult<bool> {
        let id = id.to_owned();
        self.connections
            .write("delete_tenant", move |conn| {
                tenants::delete_tenant(conn, &id)
            })
            .await
    }

    async fn put_member(&self, member: &Member) -> StoreResult<Member> {
        let member = member.clone();
        self.connections
            .write("put_member", move |conn| tenants::put_member(conn, &member))
            .await?
            .into_domain()
    }

    async fn list_members(&self, tenant_id: &str) -> StoreResult<Vec<Member>> {
        let tenant = tenant_id.to_owned();
        self.connections
            .read("list_members", move |conn| {
                tenants::list_members(conn, &tenant)
            })
            .await
    }

    async fn delete_member(&self, tenant_id: &str, subject: &str) -> StoreResult<bool> {
        let (tenant, subject) = (tenant_id.to_owned(), subject.to_owned());
        self.connections
            .write("delete_member", move |conn| {
                tenants::delete_member(conn, &tenant, &subject)
            })
            .await
    }

    async fn member_role(&self, tenant_id: &str, subject: &str) -> StoreResult<Option<Role>> {
        let (tenant, member) = (tenant_id.to_owned(), subject.to_owned());
        self.connections
            .read("member_role", move |conn| {
                tenants::member_role(conn, &tenant, &member)
            })
            .await?
            .map(|role| rows::decode_role(tenant_id, subject, &role))
            .transpose()
    }

    async fn create_policy(&self, policy: &Policy) -> StoreResult<()> {
        let row = rows::PolicyRow::from_domain(policy);
        self.connections
            .write("create_policy", move |conn| {
                tenants::create_policy(conn, &row)
            })
            .await
    }

    async fn get_policy(&self, tenant_id: &str, id: &str) -> StoreResult<Option<Policy>> {
        let (tenant, id) = (tenant_id.to_owned(), id.to_owned());
        self.connections
            .read("get_policy", move |conn| {
                tenants::get_policy(conn, &tenant, &id)
            })
            .await?
            .map(rows::PolicyRow::into_domain)
            .transpose()
    }

    async fn list_policies(&self, tenant_id: &str) -> StoreResult<Vec<Policy>> {
        let tenant = tenant_id.to_owned();
        self.connections
            .read("list_policies", move |conn| {
                tenants::list_policies(conn, &tenant)
            })
            .await
    }

    async fn update_policy(&self, policy: &Policy) -> StoreResult<Option<Policy>> {
        let row = rows::PolicyRow::from_domain(policy);
        self.connections
            .write("update_policy", move |conn| {
                tenants::update_policy(conn, &row)
            })
            .await?
            .map(rows::PolicyRow::into_domain)
            .transpose()
    }

    async fn delete_policy(&self, tenant_id: &str, id: &str) -> StoreResult<bool> {
        let (tenant, id) = (tenant_id.to_owned(), id.to_owned());
        self.connections
            .write("delete_policy", move |conn| {
                tenants::delete_policy(conn, &tenant, &id)
            })
            .await
    }

    async fn save_exec(&self, exec: &StoredExec, keep_ended: u32) -> StoreResult<()> {
        let exec = exec.clone();
        self.connections
            .write("save_exec", move |conn| {
                execs::save(conn, &exec, keep_ended)
            })
            .await
    }

    async fn list_execs_on_worker(&self, worker_id: &str) -> StoreResult<Vec<StoredExec>> {
        let worker = worker_id.to_owned();
        self.connections
            .read("list_execs_on_worker", move |conn| {
                execs::list_on_worker(conn, &worker)
            })
            .await
    }

    async fn delete_execs(&self, sandbox_id: &SandboxId) -> StoreResult<u64> {
        let sandbox = sandbox_id.to_string();
        self.connections
            .write("delete_execs", move |conn| execs::delete(conn, &sandbox))
            .await
    }

    async fn insert_audit(&self, entry: &AuditEntry) -> StoreResult<()> {
        let row = rows::AuditRow::from_domain(entry)?;
        self.connections
            .write("insert_audit", move |conn| audit::insert(conn, &row))
            .await
    }

    async fn list_audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditEntry>> {
        let filter = filter.clone();
        self.connections
            .read("list_audit", move |conn| audit::list(conn, &filter))
            .await?
            .into_iter()
            .map(rows::AuditRow::into_domain)
            .collect()
    }

    async fn close(&self) {
        let connections = Arc::clone(&self.connections);
        let _ = tokio::task::spawn_blocking(move || connections.close()).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{SandboxPosition, StateFilter};

    /// The query plan of `sql` with `values` bound, one step a line.
    fn plan(conn: &rusqlite::Connection, sql: &str, values: &[&dyn ToSql]) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let detail: Vec<String> = stmt
            .query_map(values, |row| row.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        detail.join("\n")
    }

    /// A page of templates, of every tenant or of one (the global ones and its own), walks the
    /// primary key from the page's start in name order: no sort, and no index of its own
    /// (names are unique across tenants).
    #[tokio::test]
    async fn template_pages_walk_the_names_in_order() {
        let store = SqliteStore::open(":memory:").await.unwrap();
        let plans = store
            .connections
            .read("explain", |conn| {
                let every = rows::template_list_sql('?', false);
                let of_tenant = rows::template_list_sql('?', true);
                Ok([
                    plan(conn, &every, &[&"b", &101_i64]),
                    plan(conn, &of_tenant, &[&"b", &101_i64, &"acme"]),
                ])
            })
            .await
            .unwrap();
        for plan in plans {
            assert!(
                plan.starts_with(
                    "SEARCH templates USING INDEX sqlite_autoindex_templates_1 (name>?)"
                ),
                "{plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        }
    }

    /// Every page of `GET /sandboxes` seeks an index ending in `(created_at, id)` to its start
    /// (`SEARCH`, no sort), with or without a cursor: the creation index for the unfiltered
    /// list, the owner's or the tenant's when one is named. No page reads the list from the
    /// newest sandbox, nor every sandbox of other owners or tenants.
    #[tokio::test]
    async fn sandbox_pages_seek_the_creation_index() {
        let store = SqliteStore::open(":memory:").await.unwrap();
        let cursor = SandboxPosition {
            created_at: chrono::DateTime::from_timestamp(1_000_000, 0).unwrap(),
            id: "sb-1".into(),
        };
        let by_created = "SEARCH sandboxes USING INDEX sandboxes_by_created (created_at<?)";
        let by_owner =
            "SEARCH sandboxes USING INDEX sandboxes_by_owner_created (owner_id=? AND created_at<?)";
        let by_tenant = "SEARCH sandboxes USING INDEX sandboxes_by_tenant_created \
                         (tenant_id=? AND created_at<?)";
        let mut cases = Vec::new();
        for after in [None, Some(cursor)] {
            let page = SandboxFilter {
                after,
                limit: Some(101),
                ..SandboxFilter::default()
            };
            cases.push((page.clone(), by_created));
            cases.push((
                SandboxFilter {
                    state: StateFilter::All,
                    ..page.clone()
                },
                by_created,
            ));
            cases.push((
                SandboxFilter {
                    owner_id: Some("alice".into()),
                    ..page.clone()
                },
                by_owner,
            ));
            cases.push((
                SandboxFilter {
                    tenant_id: Some("acme".into()),
                    ..page.clone()
                },
                by_tenant,
            ));
        }
        let plans = store
            .connections
            .read("explain", move |conn| {
                let mut plans: Vec<(SandboxFilter, &str, String)> = cases
                    .into_iter()
                    .map(|(filter, index)| {
                        let plan =
                            with_list_statement(&filter, |sql, values| plan(conn, sql, values));
                        (filter, index, plan)
                    })
                    .collect();
                // A pool's check of an owner's live sandbox: that owner's rows, newest first.
                plans.push((
                    SandboxFilter {
                        owner_id: Some("alice".into()),
                        ..SandboxFilter::default()
                    },
                    "SEARCH sandboxes USING INDEX sandboxes_by_owner_created (owner_id=?)",
                    plan(conn, &SANDBOX_SQL.newest_active_of_owner, &[&"alice"]),
                ));
                Ok(plans)
            })
            .await
            .unwrap();
        for (filter, index, plan) in plans {
            assert!(plan.starts_with(index), "{filter:?}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{filter:?}: {plan}");
        }
    }
}
