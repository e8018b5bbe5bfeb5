//! Template builds and their logs on SQLite.

use rusqlite::{params, Connection, OptionalExtension};
use svc_core::build::TemplateBuild;
use svc_core::error::Resource;

use super::codec::{backend, conflict_or_backend, read};
use crate::rows::{micros, BuildRow, BUILD_COLUMNS};
use crate::{BuildEnding, StoreResult};

pub(super) fn insert(conn: &Connection, row: &BuildRow) -> StoreResult<()> {
    let placeholders = (1..=BuildRow::COLUMN_COUNT)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    conn.prepare_cached(&format!(
        "INSERT INTO template_builds ({BUILD_COLUMNS}) VALUES ({placeholders})"
    ))
    .and_then(|mut stmt| stmt.execute(row.values()))
    .map(drop)
    .map_err(conflict_or_backend(
        "insert_build",
        Resource::Build,
        &row.build_id,
    ))
}

pub(super) fn get(
    conn: &Connection,
    template: &str,
    build_id: &str,
) -> StoreResult<Option<TemplateBuild>> {
    conn.prepare_cached(&format!(
        "SELECT {BUILD_COLUMNS} FROM template_builds WHERE build_id = ?1 AND template = ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_row([build_id, template], read::<BuildRow>)
            .optional()
    })
    .map_err(backend("get_build"))?
    .map(BuildRow::into_domain)
    .transpose()
}

fn list(
    conn: &Connection,
    operation: &'static str,
    filter: &str,
    key: &str,
    limit: i64,
) -> StoreResult<Vec<TemplateBuild>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {BUILD_COLUMNS} FROM template_builds WHERE {filter} \
             ORDER BY started_at DESC, build_id DESC LIMIT ?2"
        ))
        .map_err(backend(operation))?;
    let rows = stmt
        .query_map(params![key, limit], read::<BuildRow>)
        .map_err(backend(operation))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend(operation))?;
    rows.into_iter().map(BuildRow::into_domain).collect()
}

pub(super) fn list_of_template(
    conn: &Connection,
    template: &str,
    limit: u32,
) -> StoreResult<Vec<TemplateBuild>> {
    list(
        conn,
        "list_builds",
        "template = ?1",
        template,
        i64::from(limit),
    )
}

pub(super) fn list_running(conn: &Connection, worker_id: &str) -> StoreResult<Vec<TemplateBuild>> {
    list(
        conn,
        "list_running_builds",
        "worker_id = ?1 AND status = 'running'",
        worker_id,
        i64::MAX,
    )
}

pub(super) fn end(
    conn: &mut Connection,
    build_id: &str,
    ending: &BuildEnding,
    keep: u32,
) -> StoreResult<Option<TemplateBuild>> {
    const OP: &str = "end_build";
    let tx = conn.transaction().map_err(backend(OP))?;
    let ended = tx
        .prepare_cached(&format!(
            "UPDATE template_builds SET status = ?2, image = ?3, error = ?4, ended_at = ?5 \
             WHERE build_id = ?1 AND status = 'running' RETURNING {BUILD_COLUMNS}"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    build_id,
                    ending.status.as_str(),
                    ending.image,
                    ending.error,
                    micros(ending.at)
                ],
                read::<BuildRow>,
            )
            .optional()
        })
        .map_err(backend(OP))?
        .map(BuildRow::into_domain)
        .transpose()?;
    if let Some(build) = &ended {
        if let Some(image) = &build.image {
            tx.prepare_cached(
                "INSERT INTO built_images (image, worker_id, built_at) \
                 SELECT ?1, worker_id, ?3 FROM template_builds WHERE build_id = ?2 \
                 ON CONFLICT (image) DO NOTHING",
            )
            .and_then(|mut stmt| stmt.execute(params![image, build_id, micros(ending.at)]))
            .map_err(backend(OP))?;
        }
        let older = "SELECT build_id FROM template_builds WHERE template = ?1 \
                     AND status != 'running' ORDER BY started_at DESC, build_id DESC \
                     LIMIT -1 OFFSET ?2";
        for table in ["template_build_logs", "template_builds"] {
            tx.prepare_cached(&format!("DELETE FROM {table} WHERE build_id IN ({older})"))
                .and_then(|mut stmt| stmt.execute(params![build.template, keep]))
                .map_err(backend(OP))?;
        }
    }
    tx.commit().map_err(backend(OP))?;
    Ok(ended)
}

/// Deletes every build of `template` with its logs (the caller's transaction).
pub(super) fn delete_of_template(conn: &Connection, template: &str) -> StoreResult<()> {
    for sql in [
        "DELETE FROM template_build_logs WHERE build_id IN \
         (SELECT build_id FROM template_builds WHERE template = ?1)",
        "DELETE FROM template_builds WHERE template = ?1",
    ] {
        conn.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([template]))
            .map_err(backend("delete_template"))?;
    }
    Ok(())
}

pub(super) fn append_log(
    conn: &mut Connection,
    build_id: &str,
    lines: &[String],
) -> StoreResult<()> {
    const OP: &str = "append_build_log";
    let tx = conn.transaction().map_err(backend(OP))?;
    {
        let mut stmt = tx
            .prepare_cached("INSERT INTO template_build_logs (build_id, line) VALUES (?1, ?2)")
            .map_err(backend(OP))?;
        for line in lines {
            stmt.execute(params![build_id, line]).map_err(backend(OP))?;
        }
    }
    tx.commit().map_err(backend(OP))
}

pub(super) fn log_after(
    conn: &Connection,
    build_id: &str,
    after: i64,
    limit: u32,
) -> StoreResult<Vec<(i64, String)>> {
    const OP: &str = "build_log_after";
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, line FROM template_build_logs WHERE build_id = ?1 AND seq > ?2 \
             ORDER BY seq LIMIT ?3",
        )
        .map_err(backend(OP))?;
    let rows = stmt
        .query_map(params![build_id, after, limit], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .map_err(backend(OP))?;
    rows.collect::<Result<_, _>>().map_err(backend(OP))
}

pub(super) fn active_images(conn: &Connection) -> StoreResult<Vec<String>> {
    const OP: &str = "active_images";
    let mut stmt = conn
        .prepare_cached(
            "SELECT DISTINCT image FROM sandboxes \
             WHERE state IN ('creating', 'running', 'paused')",
        )
        .map_err(backend(OP))?;
    let rows = stmt.query_map([], |row| row.get(0)).map_err(backend(OP))?;
    rows.collect::<Result<_, _>>().map_err(backend(OP))
}

pub(super) fn list_built_images(conn: &Connection, worker_id: &str) -> StoreResult<Vec<String>> {
    const OP: &str = "list_built_images";
    let mut stmt = conn
        .prepare_cached("SELECT image FROM built_images WHERE worker_id = ?1 ORDER BY built_at")
        .map_err(backend(OP))?;
    let rows = stmt
        .query_map([worker_id], |row| row.get(0))
        .map_err(backend(OP))?;
    rows.collect::<Result<_, _>>().map_err(backend(OP))
}

pub(super) fn forget_built_image(conn: &Connection, image: &str) -> StoreResult<bool> {
    conn.prepare_cached("DELETE FROM built_images WHERE image = ?1")
        .and_then(|mut stmt| stmt.execute([image]))
        .map(|n| n > 0)
        .map_err(backend("forget_built_image"))
}
