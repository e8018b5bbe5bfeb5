//! Exec records as both backends store them.

use svc_core::SandboxId;

use super::{micros, timestamp};
use crate::{StoreError, StoreResult, StoredExec};

/// Column order of `exec_records`.
pub(crate) const EXEC_COLUMNS: &str = "exec_id, sandbox_id, started_at, ended, handle, record";

/// The stored values of one record.
pub(crate) fn exec_values(
    exec: &StoredExec,
) -> (String, String, i64, bool, Option<String>, String) {
    (
        exec.exec_id.clone(),
        exec.sandbox_id.to_string(),
        micros(exec.started_at),
        exec.ended,
        exec.handle.clone(),
        exec.record.clone(),
    )
}

/// A record back from its columns.
pub(crate) fn decode_exec(
    exec_id: String,
    sandbox_id: &str,
    started_at: i64,
    ended: bool,
    handle: Option<String>,
    record: String,
) -> StoreResult<StoredExec> {
    let sandbox_id = SandboxId::parse(sandbox_id).map_err(|e| StoreError::Corrupt {
        entity: "exec record",
        key: exec_id.clone(),
        message: e.to_string(),
    })?;
    Ok(StoredExec {
        started_at: timestamp("exec record", &exec_id, started_at)?,
        exec_id,
        sandbox_id,
        ended,
        handle,
        record,
    })
}
