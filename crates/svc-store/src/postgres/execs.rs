//! Exec records on PostgreSQL.

use deadpool_postgres::GenericClient;

use super::codec::{backend, execute, query};
use crate::rows::{decode_exec, exec_values, EXEC_COLUMNS};
use crate::{StoreResult, StoredExec};

pub(super) async fn save<C: GenericClient>(
    client: &C,
    exec: &StoredExec,
    keep_ended: u32,
) -> StoreResult<()> {
    const OP: &str = "save_exec";
    let (exec_id, sandbox_id, started_at, ended, handle, record) = exec_values(exec);
    execute(
        client,
        OP,
        &format!(
            "INSERT INTO exec_records ({EXEC_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (exec_id) DO UPDATE SET ended = excluded.ended, \
             handle = excluded.handle, record = excluded.record"
        ),
        &[&exec_id, &sandbox_id, &started_at, &ended, &handle, &record],
    )
    .await?;
    if ended {
        execute(
            client,
            OP,
            "DELETE FROM exec_records WHERE sandbox_id = $1 AND ended AND exec_id NOT IN \
             (SELECT exec_id FROM exec_records WHERE sandbox_id = $1 AND ended \
              ORDER BY started_at DESC, seq DESC LIMIT $2)",
            &[&sandbox_id, &i64::from(keep_ended)],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn list_on_worker<C: GenericClient>(
    client: &C,
    worker_id: &str,
) -> StoreResult<Vec<StoredExec>> {
    const OP: &str = "list_execs_on_worker";
    let rows = query(
        client,
        OP,
        "SELECT e.exec_id, e.sandbox_id, e.started_at, e.ended, e.handle, e.record \
         FROM exec_records e JOIN sandboxes s ON s.id = e.sandbox_id \
         WHERE s.worker_id = $1 AND s.state = 'running' ORDER BY e.started_at, e.seq",
        &[&worker_id],
    )
    .await?;
    rows.iter()
        .map(|row| {
            decode_exec(
                row.try_get(0).map_err(backend(OP))?,
                row.try_get::<_, &str>(1).map_err(backend(OP))?,
                row.try_get(2).map_err(backend(OP))?,
                row.try_get(3).map_err(backend(OP))?,
                row.try_get(4).map_err(backend(OP))?,
                row.try_get(5).map_err(backend(OP))?,
            )
        })
        .collect()
}

pub(super) async fn delete<C: GenericClient>(client: &C, sandbox_id: &str) -> StoreResult<u64> {
    execute(
        client,
        "delete_execs",
        "DELETE FROM exec_records WHERE sandbox_id = $1",
        &[&sandbox_id],
    )
    .await
}
