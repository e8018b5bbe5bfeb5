//! Versioned migrations, embedded in the binary and tracked in `schema_migrations` (one row per
//! applied version). Replicas starting together take turns under one advisory lock; each
//! migration runs in its own transaction, and a schema newer than the binary is refused, never
//! downgraded.

use deadpool_postgres::{Client, GenericClient};

use super::codec::{backend, execute, query_one};
use crate::{StoreError, StoreResult};

/// `(version, sql)`, in order; versions are 1-based and dense.
const MIGRATIONS: &[(i64, &str)] =
    &[(1, include_str!("../../migrations/postgres/0001_schema.sql"))];

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
