//! Template builds and their logs on PostgreSQL.

use deadpool_postgres::GenericClient;
use svc_core::build::TemplateBuild;
use svc_core::error::Resource;

use super::codec::{backend, execute, fetch_all, fetch_opt, insert as insert_row, params, query};
use crate::rows::{micros, BuildRow, BUILD_COLUMNS};
use crate::{BuildEnding, StoreResult};

pub(super) async fn insert<C: GenericClient>(client: &C, row: &BuildRow) -> StoreResult<()> {
    let placeholders = (1..=BuildRow::COLUMN_COUNT)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ");
    insert_row(
        client,
        "insert_build",
        &format!("INSERT INTO template_builds ({BUILD_COLUMNS}) VALUES ({placeholders})"),
        &params(&row.values()),
        (Resource::Build, &row.build_id),
    )
    .await
}

pub(super) async fn get<C: GenericClient>(
    client: &C,
    template: &str,
    build_id: &str,
) -> StoreResult<Option<TemplateBuild>> {
    fetch_opt::<BuildRow, _>(
        client,
        "get_build",
        &format!(
            "SELECT {BUILD_COLUMNS} FROM template_builds WHERE build_id = $1 AND template = $2"
        ),
        &[&build_id, &template],
    )
    .await?
    .map(BuildRow::into_domain)
    .transpose()
}

pub(super) async fn list<C: GenericClient>(
    client: &C,
    operation: &'static str,
    filter: &str,
    key: &str,
    limit: i64,
) -> StoreResult<Vec<TemplateBuild>> {
    fetch_all(
        client,
        operation,
        &format!(
            "SELECT {BUILD_COLUMNS} FROM template_builds WHERE {filter} \
             ORDER BY started_at DESC, build_id DESC LIMIT $2"
        ),
        &[&key, &limit],
        BuildRow::into_domain,
    )
    .await
}

pub(super) async fn end<C: GenericClient>(
    client: &C,
    build_id: &str,
    ending: &BuildEnding,
    keep: u32,
) -> StoreResult<Option<TemplateBuild>> {
    const OP: &str = "end_build";
    let ended = fetch_opt::<BuildRow, _>(
        client,
        OP,
        &format!(
            "UPDATE template_builds SET status = $2, image = $3, error = $4, ended_at = $5 \
             WHERE build_id = $1 AND status = 'running' RETURNING {BUILD_COLUMNS}"
        ),
        &[
            &build_id,
            &ending.status.as_str(),
            &ending.image,
            &ending.error,
            &micros(ending.at),
        ],
    )
    .await?
    .map(BuildRow::into_domain)
    .transpose()?;
    if let Some(build) = &ended {
        if let Some(image) = &build.image {
            execute(
                client,
                OP,
                "INSERT INTO built_images (image, worker_id, built_at) \
                 SELECT $1, worker_id, $3 FROM template_builds WHERE build_id = $2 \
                 ON CONFLICT (image) DO NOTHING",
                &[image, &build_id, &micros(ending.at)],
            )
            .await?;
        }
        let older = "SELECT build_id FROM template_builds WHERE template = $1 \
                     AND status <> 'running' ORDER BY started_at DESC, build_id DESC OFFSET $2";
        for table in ["template_build_logs", "template_builds"] {
            execute(
                client,
                OP,
                &format!("DELETE FROM {table} WHERE build_id IN ({older})"),
                &[&build.template, &i64::from(keep)],
            )
            .await?;
        }
    }
    Ok(ended)
}

/// Deletes every build of `template` with its logs (the caller's transaction).
pub(super) async fn delete_of_template<C: GenericClient>(
    client: &C,
    template: &str,
) -> StoreResult<()> {
    for sql in [
        "DELETE FROM template_build_logs WHERE build_id IN \
         (SELECT build_id FROM template_builds WHERE template = $1)",
        "DELETE FROM template_builds WHERE template = $1",
    ] {
        execute(client, "delete_template", sql, &[&template]).await?;
    }
    Ok(())
}

pub(super) async fn append_log<C: GenericClient>(
    client: &C,
    build_id: &str,
    lines: &[String],
) -> StoreResult<()> {
    // One statement for the batch; `WITH ORDINALITY` keeps the lines' order in `seq`.
    execute(
        client,
        "append_build_log",
        "INSERT INTO template_build_logs (build_id, line) \
         SELECT $1, line FROM unnest($2::text[]) WITH ORDINALITY AS l(line, n) ORDER BY n",
        &[&build_id, &lines],
    )
    .await
    .map(drop)
}

pub(super) async fn log_after<C: GenericClient>(
    client: &C,
    build_id: &str,
    after: i64,
    limit: u32,
) -> StoreResult<Vec<(i64, String)>> {
    const OP: &str = "build_log_after";
    let rows = query(
        client,
        OP,
        "SELECT seq, line FROM template_build_logs WHERE build_id = $1 AND seq > $2 \
         ORDER BY seq LIMIT $3",
        &[&build_id, &after, &i64::from(limit)],
    )
    .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get(0).map_err(backend(OP))?,
                row.try_get(1).map_err(backend(OP))?,
            ))
        })
        .collect()
}

pub(super) async fn active_images<C: GenericClient>(client: &C) -> StoreResult<Vec<String>> {
    const OP: &str = "active_images";
    let rows = query(
        client,
        OP,
        "SELECT DISTINCT image FROM sandboxes WHERE state IN ('creating', 'running', 'paused')",
        &[],
    )
    .await?;
    rows.iter()
        .map(|row| row.try_get(0).map_err(backend(OP)))
        .collect()
}

pub(super) async fn list_built_images<C: GenericClient>(
    client: &C,
    worker_id: &str,
) -> StoreResult<Vec<String>> {
    const OP: &str = "list_built_images";
    let rows = query(
        client,
        OP,
        "SELECT image FROM built_images WHERE worker_id = $1 ORDER BY built_at",
        &[&worker_id],
    )
    .await?;
    rows.iter()
        .map(|row| row.try_get(0).map_err(backend(OP)))
        .collect()
}

pub(super) async fn forget_built_image<C: GenericClient>(
    client: &C,
    image: &str,
) -> StoreResult<bool> {
    execute(
        client,
        "forget_built_image",
        "DELETE FROM built_images WHERE image = $1",
        &[&image],
    )
    .await
    .map(|n| n > 0)
}
