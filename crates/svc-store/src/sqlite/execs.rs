//! Exec records on SQLite.

use rusqlite::Connection;

use super::codec::backend;
use crate::rows::{decode_exec, exec_values, EXEC_COLUMNS};
use crate::{StoreResult, StoredExec};

pub(super) fn save(conn: &Connection, exec: &StoredExec, keep_ended: u32) -> StoreResult<()> {
    const OP: &str = "save_exec";
    let (exec_id, sandbox_id, started_at, ended, handle, record) = exec_values(exec);
    conn.prepare_cached(&format!(
        "INSERT INTO exec_records ({EXEC_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (exec_id) DO UPDATE SET ended = excluded.ended, \
         handle = excluded.handle, record = excluded.record"
    ))
    .and_then(|mut stmt| {
        stmt.execute(rusqlite::params![
            exec_id, sandbox_id, started_at, ended, handle, record
        ])
    })
    .map_err(backend(OP))?;
    if ended {
        conn.prepare_cached(
            "DELETE FROM exec_records WHERE sandbox_id = ?1 AND ended = 1 AND exec_id NOT IN \
             (SELECT exec_id FROM exec_records WHERE sandbox_id = ?1 AND ended = 1 \
              ORDER BY started_at DESC, seq DESC LIMIT ?2)",
        )
        .and_then(|mut stmt| stmt.execute(rusqlite::params![sandbox_id, keep_ended]))
        .map_err(backend(OP))?;
    }
    Ok(())
}

pub(super) fn list_on_worker(conn: &Connection, worker_id: &str) -> StoreResult<Vec<StoredExec>> {
    const OP: &str = "list_execs_on_worker";
    let mut stmt = conn
        .prepare_cached(
            "SELECT e.exec_id, e.sandbox_id, e.started_at, e.ended, e.handle, e.record \
             FROM exec_records e JOIN sandboxes s ON s.id = e.sandbox_id \
             WHERE s.worker_id = ?1 AND s.state = 'running' ORDER BY e.started_at, e.seq",
        )
        .map_err(backend(OP))?;
    let rows = stmt
        .query_map([worker_id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, bool>(3)?,
                row.get::<_, Option<String>>(4)?,
                row.get::<_, String>(5)?,
            ))
        })
        .map_err(backend(OP))?;
    rows.map(|row| {
        let (exec_id, sandbox_id, started_at, ended, handle, record) = row.map_err(backend(OP))?;
        decode_exec(exec_id, &sandbox_id, started_at, ended, handle, record)
    })
    .collect()
}

pub(super) fn delete(conn: &Connection, sandbox_id: &str) -> StoreResult<u64> {
    conn.prepare_cached("DELETE FROM exec_records WHERE sandbox_id = ?1")
        .and_then(|mut stmt| stmt.execute([sandbox_id]))
        .map(|n| n as u64)
        .map_err(backend("delete_execs"))
}
