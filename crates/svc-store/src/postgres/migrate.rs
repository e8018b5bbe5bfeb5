//! Versioned migrations, embedded in the binary and tracked in `schema_migrations` (one row per
//! applied version). Replicas starting together take turns under one advisory lock; each
//! migration runs in its own transaction, and a schema newer than the binary is refused, never
//! downgraded.

use deadpool_postgres::{Client, GenericClient};

use super::codec::{backend, execute, query_one};
use crate::{StoreError, StoreResult};

/// `(version, sql)`, in order; versions are 1-based and dense.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/postgres/0001_schema.sql")),
    (
        2,
        include_str!("../../migrations/postgres/0002_exec_records.sql"),
    ),
    (
        3,
        include_str!("../../migrations/postgres/0003_paused_sandboxes.sql"),
    ),
    (
        4,
        include_str!("../../migrations/postgres/0004_warm_pools.sql"),
    ),
    (
        5,
        include_str!("../../migrations/postgres/0005_preview_key.sql"),
    ),
    (6, include_str!("../../migrations/postgres/0006_egress.sql")),
    (
        7,
        include_str!("../../migrations/postgres/0007_query_plans.sql"),
    ),
    (
        8,
        include_str!("../../migrations/postgres/0008_exec_path.sql"),
    ),
    (
        9,
        include_str!("../../migrations/postgres/0009_template_builds.sql"),
    ),
    (
        10,
        include_str!("../../migrations/postgres/0010_built_images.sql"),
    ),
    (
        11,
        include_str!("../../migrations/postgres/0011_template_tenants.sql"),
    ),
];

/// The advisory lock migrations take, database-wide ("svcmigr" in ASCII).
const MIGRATION_LOCK: i64 = 0x0073_7663_6d69_6772;

const LOCK: &str = "SELECT pg_advisory_xact_lock($1)";

pub(super) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |(version, _)| *version)
}

pub(super) async fn current_version<C: GenericClient>(client: &C) -> StoreResult<i64> {
    let row = query_one(
        client,
        "read schema version",
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        &[],
    )
    .await?;
    row.try_get(0).map_err(backend("read schema version"))
}

fn refuse_newer(current: i64) -> StoreResult<()> {
    if current > latest_version() {
        return Err(StoreError::Migration {
            message: format!(
                "database schema version {current} is newer than this binary supports ({})",
                latest_version()
            ),
        });
    }
    Ok(())
}

/// Creates `schema` when asked (and missing), then applies every pending migration.
pub(super) async fn run(client: &mut Client, schema: Option<&str>) -> StoreResult<()> {
    const OP: &str = "migrate";
    let tx = client.transaction().await.map_err(backend(OP))?;
    execute(&tx, OP, LOCK, &[&MIGRATION_LOCK]).await?;
    if let Some(schema) = schema {
        // The name is a plain identifier (checked by the caller), so it needs no quoting.
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .await
            .map_err(backend(OP))?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (\
         version BIGINT PRIMARY KEY, \
         applied_at BIGINT NOT NULL DEFAULT (extract(epoch FROM clock_timestamp()) * 1000000)::BIGINT)",
    )
    .await
    .map_err(backend(OP))?;
    refuse_newer(current_version(&tx).await?)?;
    tx.commit().await.map_err(backend(OP))?;
    for (version, sql) in MIGRATIONS {
        let tx = client.transaction().await.map_err(backend(OP))?;
        execute(&tx, OP, LOCK, &[&MIGRATION_LOCK]).await?;
        // Read again under the lock: another replica may have applied it meanwhile.
        let current = current_version(&tx).await?;
        refuse_newer(current)?;
        if *version <= current {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(|e| StoreError::Migration {
                message: format!("migration {version} failed: {e}"),
            })?;
        execute(
            &tx,
            OP,
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[version],
        )
        .await?;
        tx.commit().await.map_err(backend(OP))?;
        tracing::info!(version, "applied postgres migration");
    }
    Ok(())
}

/// What `svc db pg-rehearse` found (decisions §16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rehearsal {
    /// The database's schema version (0: never migrated).
    pub current_version: i64,
    /// The newest version this binary knows.
    pub latest_version: i64,
    /// Tables and columns the migrations up to `current_version` create that are missing
    /// (`table events`, `column sandboxes.tenant_id`).
    pub missing: Vec<String>,
    /// The schema svc's tables live in (the connection's `current_schema()`).
    pub schema: String,
}

impl Rehearsal {
    /// True when starting this binary on the database would work (pending migrations apply on
    /// start; a newer schema or a damaged one would not).
    pub fn passes(&self) -> bool {
        self.current_version <= self.latest_version && self.missing.is_empty()
    }
}

/// The tables and columns `sql` creates: `CREATE TABLE name (` blocks (one column per line,
/// constraint lines aside) and `ALTER TABLE name ADD COLUMN col`. Our migrations are written so.
fn created_columns(sql: &str) -> Vec<(String, Vec<String>)> {
    const CONSTRAINTS: [&str; 6] = [
        "PRIMARY",
        "UNIQUE",
        "CHECK",
        "FOREIGN",
        "CONSTRAINT",
        "EXCLUDE",
    ];
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or("").trim())
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["CREATE", "TABLE", rest @ ..] = words.as_slice() {
            let name = rest
                .iter()
                .find(|w| !matches!(**w, "IF" | "NOT" | "EXISTS"))
                .map(|w| w.trim_end_matches('(').to_owned())
                .unwrap_or_default();
            tables.push((name, Vec::new()));
            current = Some(tables.len() - 1);
        } else if let ["ALTER", "TABLE", table, "ADD", "COLUMN", column, ..] = words.as_slice() {
            let column = (*column).to_owned();
            match tables.iter_mut().find(|(t, _)| t == table) {
                Some((_, columns)) => columns.push(column),
                None => tables.push(((*table).to_owned(), vec![column])),
            }
        } else if let Some(index) = current {
            if line.starts_with(')') {
                current = None;
            } else if let Some(first) = words.first() {
                if !CONSTRAINTS.contains(first) {
                    tables[index].1.push(first.trim_end_matches(',').to_owned());
                }
            }
        }
    }
    tables
}

/// Checks the database at `dsn` against this binary's migrations without writing anything.
pub async fn rehearse(dsn: &str) -> StoreResult<Rehearsal> {
    const OP: &str = "rehearse";
    let settings = super::pool::settings(dsn, None)?;
    let (client, connection) = super::pool::connect_one(&settings)
        .await
        .map_err(backend(OP))?;
    let driver = tokio::spawn(connection);
    let result = async {
        let schema: Option<String> = client
            .query_one("SELECT current_schema()::text", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(backend(OP))?;
        let has_migrations: bool = client
            .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(backend(OP))?;
        let current_version: i64 = if has_migrations {
            client
                .query_one(
                    "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                    &[],
                )
                .await
                .and_then(|row| row.try_get(0))
                .map_err(backend(OP))?
        } else {
            0
        };
        let existing = client
            .query(
                "SELECT table_name::text, column_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema()",
                &[],
            )
            .await
            .map_err(backend(OP))?;
        let have = |table: &str, column: Option<&str>| {
            existing.iter().any(|row| {
                row.get::<_, String>(0) == table
                    && column.is_none_or(|c| row.get::<_, String>(1) == c)
            })
        };
        let mut missing = Vec::new();
        for (_, sql) in MIGRATIONS.iter().filter(|(v, _)| *v <= current_version) {
            for (table, columns) in created_columns(sql) {
                if !have(&table, None) {
                    missing.push(format!("table {table}"));
                    continue;
                }
                for column in columns {
                    if !have(&table, Some(&column)) {
                        missing.push(format!("column {table}.{column}"));
                    }
                }
            }
        }
        Ok(Rehearsal {
            current_version,
            latest_version: latest_version(),
            missing,
            // No schema on the search path: the tables would be created in `public`.
            schema: schema.unwrap_or_else(|| "public".to_owned()),
        })
    }
    .await;
    drop(client);
    let _ = driver.await;
    result
}

#[cfg(test)]
mod rehearsal_tests {
    use super::*;

    #[test]
    fn the_schema_names_every_table_and_column() {
        let tables = created_columns(MIGRATIONS[0].1);
        let names: Vec<&str> = tables.iter().map(|(t, _)| t.as_str()).collect();
        for table in [
            "sandboxes",
            "templates",
            "owner_quotas",
            "workers",
            "leases",
            "tenants",
            "audit_log",
            "events",
        ] {
            assert!(names.contains(&table), "{table} not in {names:?}");
        }
        let sandboxes = &tables.iter().find(|(t, _)| t == "sandboxes").unwrap().1;
        for column in ["id", "state", "tenant_id", "owner_id", "expires_at"] {
            assert!(
                sandboxes.iter().any(|c| c == column),
                "{column} not in {sandboxes:?}"
            );
        }
        assert!(!sandboxes.iter().any(|c| c == "PRIMARY" || c == "CHECK"));
    }
}
