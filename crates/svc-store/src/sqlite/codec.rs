//! The SQLite side of the shared rows ([`crate::rows`]): reading columns of a `rusqlite` row,
//! binding values, and classifying driver errors.

use rusqlite::types::ToSqlOutput;
use rusqlite::{ErrorCode, Row, ToSql};
use svc_core::error::Resource;

use crate::rows::{Columns, ReadRow, Value};
use crate::StoreError;

impl Columns for Row<'_> {
    type Error = rusqlite::Error;

    fn text(&self, index: usize) -> rusqlite::Result<String> {
        self.get(index)
    }

    fn optional_text(&self, index: usize) -> rusqlite::Result<Option<String>> {
        self.get(index)
    }

    fn integer(&self, index: usize) -> rusqlite::Result<i64> {
        self.get(index)
    }

    fn optional_integer(&self, index: usize) -> rusqlite::Result<Option<i64>> {
        self.get(index)
    }
}

impl ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Value::Text(text) => ToSqlOutput::from(text),
            Value::OptionalText(Some(text)) => ToSqlOutput::from(text),
            Value::Integer(value) | Value::OptionalInteger(Some(value)) => ToSqlOutput::from(value),
            Value::OptionalText(None) | Value::OptionalInteger(None) => {
                ToSqlOutput::from(rusqlite::types::Null)
            }
        })
    }
}

/// Reads one row of type `T` (a function, so statements can take it where they take a row
/// mapper).
pub(super) fn read<T: ReadRow>(row: &Row<'_>) -> rusqlite::Result<T> {
    T::read(row)
}

pub(super) fn backend(operation: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + Copy {
    move |err| match err.sqlite_error_code() {
        Some(
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::CannotOpen
            | ErrorCode::DiskFull
            | ErrorCode::ReadOnly,
        ) => StoreError::Unavailable {
            operation,
            source: err.into(),
        },
        _ => StoreError::Backend {
            operation,
            source: err.into(),
        },
    }
}

pub(super) fn conflict_or_backend<'a>(
    operation: &'static str,
    entity: Resource,
    key: &'a str,
) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |err| match err.sqlite_error_code() {
        Some(ErrorCode::ConstraintViolation) => StoreError::Conflict {
            entity,
            key: key.to_owned(),
        },
        _ => backend(operation)(err),
    }
}
