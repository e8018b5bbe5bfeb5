//! Versioned migrations, embedded in the binary and tracked with `PRAGMA user_version`. Each
//! runs in its own transaction; a database newer than the binary is refused, never downgraded.

use rusqlite::Connection;

use super::codec::backend;
use crate::{StoreError, StoreResult};

/// `(version, sql)`, in order; versions are 1-based and dense.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        include_str!("../../migrations/sqlite/0001_sandboxes_templates.sql"),
    ),
    (
        2,
        include_str!("../../migrations/sqlite/0002_sandbox_lifecycle.sql"),
    ),
    (
        3,
        include_str!("../../migrations/sqlite/0003_owner_quotas.sql"),
    ),
    (
        4,
        include_str!("../../migrations/sqlite/0004_workers_leases.sql"),
    ),
    (
        5,
        include_str!("../../migrations/sqlite/0005_installation.sql"),
    ),
    (
        6,
        include_str!("../../migrations/sqlite/0006_leases_without_holder_index.sql"),
    ),
    (
        7,
        include_str!("../../migrations/sqlite/0007_tenants_policies_audit.sql"),
    ),
    (
        8,
        include_str!("../../migrations/sqlite/0008_exec_records.sql"),
    ),
    (
        9,
        include_str!("../../migrations/sqlite/0009_paused_sandboxes.sql"),
    ),
    (
        10,
        include_str!("../../migrations/sqlite/0010_warm_pools.sql"),
    ),
    (
        11,
        include_str!("../../migrations/sqlite/0011_preview_key.sql"),
    ),
    (12, include_str!("../../migrations/sqlite/0012_egress.sql")),
    (
        13,
        include_str!("../../migrations/sqlite/0013_query_plans.sql"),
    ),
    (
        14,
        include_str!("../../migrations/sqlite/0014_exec_path.sql"),
    ),
    (
        15,
        include_str!("../../migrations/sqlite/0015_template_builds.sql"),
    ),
    (
        16,
        include_str!("../../migrations/sqlite/0016_built_images.sql"),
    ),
    (
        17,
        include_str!("../../migrations/sqlite/0017_template_tenants.sql"),
    ),
];

pub(super) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |(version, _)| *version)
}

pub(super) fn current_version(conn: &Connection) -> StoreResult<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(backend("read schema version"))
}

pub(super) fn run(conn: &mut Connection) -> StoreResult<()> {
    let current = current_version(conn)?;
    if current > latest_version() {
        return Err(StoreError::Migration {
            message: format!(
                "database schema version {current} is newer than this binary supports ({})",
                latest_version()
            ),
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        let tx = conn.transaction().map_err(backend("migrate"))?;
        tx.execute_batch(sql).map_err(|e| StoreError::Migration {
            message: format!("migration {version} failed: {e}"),
        })?;
        tx.pragma_update(None, "user_version", version)
            .map_err(backend("migrate"))?;
        tx.commit().map_err(backend("migrate"))?;
        tracing::info!(version, "applied sqlite migration");
    }
    Ok(())
}
