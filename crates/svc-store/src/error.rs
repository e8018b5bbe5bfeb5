//! Store failures, typed so the control plane can tell a conflict from a broken database.

use svc_core::error::BoxError;

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique key is taken.
    #[error("{entity} {key:?} already exists")]
    Conflict {
        /// Table-level name of the thing (`sandbox`, `template`).
        entity: &'static str,
        /// The key that collided.
        key: String,
    },
    /// A stored row that does not decode into its domain type.
    #[error("corrupt {entity} record {key:?}: {message}")]
    Corrupt {
        /// What kind of record.
        entity: &'static str,
        /// Its key.
        key: String,
        /// What did not decode.
        message: String,
    },
    /// The store was closed.
    #[error("store is closed")]
    Closed,
    /// The database failed.
    #[error("database error during {operation}")]
    Backend {
        /// The store method.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// Migrations failed or the schema is newer than this binary.
    #[error("migration failed: {message}")]
    Migration {
        /// What went wrong.
        message: String,
    },
}

impl From<StoreError> for svc_core::Error {
    fn from(err: StoreError) -> Self {
        svc_core::Error::internal("accessing the store", err)
    }
}
