//! The PostgreSQL side of the shared rows ([`crate::rows`]): reading columns of a
//! `tokio-postgres` row, binding values, running a statement through the connection's statement
//! cache, and classifying failures. Errors name the operation only: the connection string, which
//! may hold a password, never reaches an error or a log line.

use deadpool_postgres::{GenericClient, PoolError};
use svc_core::error::Resource;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::rows::{Columns, ReadRow, Value};
use crate::{StoreError, StoreResult};

/// A statement's parameters.
pub(super) type Params<'a> = [&'a (dyn ToSql + Sync)];

impl Columns for Row {
    type Error = tokio_postgres::Error;

    fn text(&self, index: usize) -> Result<String, Self::Error> {
        self.try_get(index)
    }

    fn optional_text(&self, index: usize) -> Result<Option<String>, Self::Error> {
        self.try_get(index)
    }

    fn integer(&self, index: usize) -> Result<i64, Self::Error> {
        self.try_get(index)
    }

    fn optional_integer(&self, index: usize) -> Result<Option<i64>, Self::Error> {
        self.try_get(index)
    }
}

/// The driver's parameters for a row's values (TEXT and BIGINT columns).
pub(super) fn params<'a>(values: &'a [Value<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    values
        .iter()
        .map(|value| -> &'a (dyn ToSql + Sync) {
            match value {
                Value::Text(text) => text,
                Value::OptionalText(text) => text,
                Value::Integer(number) => number,
                Value::OptionalInteger(number) => number,
            }
        })
        .collect()
}

/// Reads one row of type `T`.
pub(super) fn read<T: ReadRow>(operation: &'static str, row: &Row) -> StoreResult<T> {
    T::read(row).map_err(backend(operation))
}

/// Reads every row as `T` and decodes it into its domain value.
fn decode_all<T: ReadRow, D>(
    operation: &'static str,
    rows: &[Row],
    into_domain: impl Fn(T) -> StoreResult<D>,
) -> StoreResult<Vec<D>> {
    rows.iter()
        .map(|row| into_domain(read(operation, row)?))
        .collect()
}

/// A count column (`COUNT(*)` is BIGINT).
pub(super) fn count_at(operation: &'static str, row: &Row, index: usize) -> StoreResult<u64> {
    row.try_get::<_, i64>(index)
        .map(crate::rows::count)
        .map_err(backend(operation))
}

/// `sql` prepared on this connection: once, then from its statement cache.
async fn prepared<C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
) -> StoreResult<Statement> {
    client.prepare_cached(sql).await.map_err(backend(operation))
}

pub(super) async fn query<C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
    params: &Params<'_>,
) -> StoreResult<Vec<Row>> {
    let statement = prepared(client, operation, sql).await?;
    client
        .query(&statement, params)
        .await
        .map_err(backend(operation))
}

pub(super) async fn query_opt<C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
    params: &Params<'_>,
) -> StoreResult<Option<Row>> {
    let statement = prepared(client, operation, sql).await?;
    client
        .query_opt(&statement, params)
        .await
        .map_err(backend(operation))
}

pub(super) async fn query_one<C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
    params: &Params<'_>,
) -> StoreResult<Row> {
    query_opt(client, operation, sql, params)
        .await?
        .ok_or_else(|| StoreError::Backend {
            operation,
            source: "the statement returned no row".into(),
        })
}

/// The row `sql` yields, if any, read as `T`.
pub(super) async fn fetch_opt<T: ReadRow, C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
    params: &Params<'_>,
) -> StoreResult<Option<T>> {
    query_opt(client, operation, sql, params)
        .await?
        .map(|row| read(operation, &row))
        .transpose()
}

/// The one row `sql` yields, read as `T`.
pub(super) async fn fetch_one<T: ReadRow, C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
    params: &Params<'_>,
) -> StoreResult<T> {
    read(operation, &query_one(client, operation, sql, params).await?)
}

/// Every row `sql` yields, decoded into its domain value.
pub(super) async fn fetch_all<T: ReadRow, D, C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
    params: &Params<'_>,
    into_domain: impl Fn(T) -> StoreResult<D>,
) -> StoreResult<Vec<D>> {
    decode_all(
        operation,
        &query(client, operation, sql, params).await?,
        into_domain,
    )
}

pub(super) async fn execute<C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
    params: &Params<'_>,
) -> StoreResult<u64> {
    let statement = prepared(client, operation, sql).await?;
    client
        .execute(&statement, params)
        .await
        .map_err(backend(operation))
}

/// Inserts one row whose key may be taken: a unique violation is a conflict on `key`.
pub(super) async fn insert<C: GenericClient>(
    client: &C,
    operation: &'static str,
    sql: &str,
    params: &Params<'_>,
    (entity, key): (Resource, &str),
) -> StoreResult<()> {
    let statement = prepared(client, operation, sql).await?;
    client.execute(&statement, params).await.map_err(|err| {
        if err.code() == Some(&SqlState::UNIQUE_VIOLATION) {
            StoreError::Conflict {
                entity,
                key: key.to_owned(),
            }
        } else {
            backend(operation)(err)
        }
    })?;
    Ok(())
}

/// True for failures of the connection or the server's capacity to serve (retrying later may
/// succeed), as opposed to a failing statement.
fn unavailable(err: &tokio_postgres::Error) -> bool {
    if err.is_closed() {
        return true;
    }
    match err.code() {
        // Connection exceptions (08), insufficient resources (53: too many connections, disk
        // full, out of memory), and a server shutting down or starting up (57P01-57P03).
        Some(code) => {
            let code = code.code();
            code.starts_with("08")
                || code.starts_with("53")
                || matches!(code, "57P01" | "57P02" | "57P03")
        }
        // No server error: the socket failed (refused, reset, timed out).
        None => std::error::Error::source(err).is_some_and(|source| source.is::<std::io::Error>()),
    }
}

pub(super) fn backend(
    operation: &'static str,
) -> impl Fn(tokio_postgres::Error) -> StoreError + Copy {
    move |err| {
        if unavailable(&err) {
            StoreError::Unavailable {
                operation,
                source: err.into(),
            }
        } else {
            StoreError::Backend {
                operation,
                source: err.into(),
            }
        }
    }
}

/// A connection could not be had: the pool is closed, waiting for a free connection timed out,
/// or opening a new one failed (the server is unreachable, refuses, or is shutting down).
pub(super) fn pool(operation: &'static str) -> impl Fn(PoolError) -> StoreError + Copy {
    move |err| match err {
        PoolError::Closed => StoreError::Closed,
        PoolError::NoRuntimeSpecified => StoreError::Backend {
            operation,
            source: err.into(),
        },
        PoolError::Timeout(_) | PoolError::Backend(_) | PoolError::PostCreateHook(_) => {
            StoreError::Unavailable {
                operation,
                source: err.into(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use deadpool_postgres::TimeoutType;

    use super::*;

    #[test]
    fn a_closed_pool_is_closed_and_a_busy_one_unavailable() {
        assert!(matches!(
            pool("ping")(PoolError::Closed),
            StoreError::Closed
        ));
        assert!(matches!(
            pool("ping")(PoolError::Timeout(TimeoutType::Wait)),
            StoreError::Unavailable {
                operation: "ping",
                ..
            }
        ));
    }

    #[test]
    fn values_bind_as_their_driver_types() {
        let text = "x".to_owned();
        let values = [
            Value::Text(&text),
            Value::OptionalText(None),
            Value::Integer(7),
            Value::OptionalInteger(Some(8)),
        ];
        let bound = params(&values);
        let debug: Vec<String> = bound.iter().map(|p| format!("{p:?}")).collect();
        assert_eq!(debug, ["\"x\"", "None", "7", "Some(8)"]);
    }
}
