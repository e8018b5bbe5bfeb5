//! Rows as both backends store them, and their conversion to domain values and back. SQLite and
//! PostgreSQL keep the same columns with the same encodings (timestamps as microseconds since
//! the epoch, maps and lists as JSON text, counts and sizes as 64-bit integers), so decoding,
//! validation and the admission decision live here once. A backend adds two adapters: reading
//! one column of its row type ([`Columns`]) and binding a [`Value`].

mod audit;
mod builds;
mod execs;
mod quotas;
mod sandboxes;
mod tenants;
mod workers;

use std::collections::BTreeMap;

use chrono::DateTime;
use svc_core::Timestamp;

use crate::{StoreError, StoreResult};

pub(crate) use audit::{audit_list_sql, AuditRow, AuditValue, AUDIT_COLUMNS};
pub(crate) use builds::{BuildRow, BUILD_COLUMNS};
pub(crate) use execs::{decode_exec, exec_values, EXEC_COLUMNS};
pub(crate) use quotas::{AdmissionPlan, QuotaRow, QUOTA_COLUMNS};
pub(crate) use sandboxes::{
    template_list_sql, SandboxRow, TemplateRow, SANDBOX_COLUMNS, SANDBOX_COLUMN_COUNT,
    TEMPLATE_COLUMNS,
};
pub(crate) use tenants::{
    decode_role, MemberRow, PolicyRow, TenantRow, MEMBER_COLUMNS, POLICY_COLUMNS, TENANT_COLUMNS,
};
pub(crate) use workers::{
    fold_lease_counts, AcquireRow, LeaseRow, WorkerRow, LEASE_COLUMNS, WORKER_COLUMNS,
};

/// One column of a backend's result row, by position. Rows are read with these while the
/// connection is held and decoded ([`StoreError::Corrupt`] and all) after it is released.
pub(crate) trait Columns {
    /// The driver's error.
    type Error;
    fn text(&self, index: usize) -> Result<String, Self::Error>;
    fn optional_text(&self, index: usize) -> Result<Option<String>, Self::Error>;
    fn integer(&self, index: usize) -> Result<i64, Self::Error>;
    fn optional_integer(&self, index: usize) -> Result<Option<i64>, Self::Error>;
}

/// A row type read from its columns, in the order of its `COLUMNS` list.
pub(crate) trait ReadRow: Sized {
    fn read<C: Columns + ?Sized>(row: &C) -> Result<Self, C::Error>;
}

/// The column types rows are made of.
trait Column: Sized {
    fn read<C: Columns + ?Sized>(row: &C, index: usize) -> Result<Self, C::Error>;
}

impl Column for String {
    fn read<C: Columns + ?Sized>(row: &C, index: usize) -> Result<Self, C::Error> {
        row.text(index)
    }
}

impl Column for Option<String> {
    fn read<C: Columns + ?Sized>(row: &C, index: usize) -> Result<Self, C::Error> {
        row.optional_text(index)
    }
}

impl Column for i64 {
    fn read<C: Columns + ?Sized>(row: &C, index: usize) -> Result<Self, C::Error> {
        row.integer(index)
    }
}

impl Column for Option<i64> {
    fn read<C: Columns + ?Sized>(row: &C, index: usize) -> Result<Self, C::Error> {
        row.optional_integer(index)
    }
}

/// A row type whose fields are its table's columns, named alike and in one order: the struct,
/// its `COLUMNS` list for SQL, `values()` binding the fields in that order, and [`ReadRow`]
/// reading them back in it, all from one field list.
macro_rules! stored_row {
    (
        $(#[$meta:meta])*
        struct $name:ident {
            $first_vis:vis $first:ident: $first_ty:ty,
            $($vis:vis $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        pub(crate) struct $name {
            $first_vis $first: $first_ty,
            $($vis $field: $ty,)*
        }

        // Not every row is written whole (a lease is only ever written column by column).
        #[allow(dead_code)]
        impl $name {
            /// The columns, in the order `values` binds them and `read` reads them.
            pub(crate) const COLUMNS: &'static str =
                concat!(stringify!($first) $(, ", ", stringify!($field))*);

            /// How many columns [`Self::COLUMNS`] names.
            pub(crate) const COLUMN_COUNT: usize =
                [stringify!($first) $(, stringify!($field))*].len();

            /// The fields, bound in [`Self::COLUMNS`] order.
            pub(crate) fn values(&self) -> [$crate::rows::Value<'_>; Self::COLUMN_COUNT] {
                [(&self.$first).into() $(, (&self.$field).into())*]
            }
        }

        impl $crate::rows::ReadRow for $name {
            fn read<C: $crate::rows::Columns + ?Sized>(row: &C) -> Result<Self, C::Error> {
                let mut index = 0;
                let mut next = || {
                    index += 1;
                    index - 1
                };
                Ok($name {
                    $first: $crate::rows::Column::read(row, next())?,
                    $($field: $crate::rows::Column::read(row, next())?,)*
                })
            }
        }
    };
}

use stored_row;

/// A parameter as a row binds it; each backend converts it to its driver's parameter type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Text(&'a str),
    OptionalText(Option<&'a str>),
    Integer(i64),
    OptionalInteger(Option<i64>),
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(value: &'a String) -> Self {
        Value::Text(value)
    }
}

impl<'a> From<&'a Option<String>> for Value<'a> {
    fn from(value: &'a Option<String>) -> Self {
        Value::OptionalText(value.as_deref())
    }
}

impl From<&i64> for Value<'_> {
    fn from(value: &i64) -> Self {
        Value::Integer(*value)
    }
}

impl From<&Option<i64>> for Value<'_> {
    fn from(value: &Option<i64>) -> Self {
        Value::OptionalInteger(*value)
    }
}

pub(crate) fn micros(at: Timestamp) -> i64 {
    at.timestamp_micros()
}

pub(crate) fn timestamp(entity: &'static str, key: &str, value: i64) -> StoreResult<Timestamp> {
    DateTime::from_timestamp_micros(value).ok_or_else(|| StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message: format!("timestamp {value} out of range"),
    })
}

/// A stored count; the tables' CHECK constraints and `COUNT(*)` keep it non-negative.
pub(crate) fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A count or limit as stored (saturating: no configured limit comes near `i64::MAX`).
pub(crate) fn stored_count(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn json_map(entity: &'static str, key: &str, text: &str) -> StoreResult<BTreeMap<String, String>> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message: e.to_string(),
    })
}

fn encode_map(map: &BTreeMap<String, String>) -> StoreResult<String> {
    serde_json::to_string(map).map_err(|e| StoreError::Backend {
        operation: "encode map",
        source: e.into(),
    })
}

fn as_u32(entity: &'static str, key: &str, value: i64) -> StoreResult<u32> {
    u32::try_from(value).map_err(|_| StoreError::Corrupt {
        entity,
        key: key.to_owned(),
        message: format!("value {value} out of range"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_row_lists_its_fields_as_columns_in_order() {
        assert_eq!(
            TEMPLATE_COLUMNS,
            "name, image, memory_mb, vcpus, ttl_nanos, provider, metadata, created_at, updated_at, warm_pool, egress, tenant_id"
        );
        assert_eq!(SANDBOX_COLUMN_COUNT, 23);
        assert_eq!(
            LEASE_COLUMNS,
            "resource_id, holder_id, generation, expires_at"
        );
    }
}
