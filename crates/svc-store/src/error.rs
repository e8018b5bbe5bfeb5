//! Store failures, typed so the control plane can tell a conflict from a broken database.

use svc_core::error::{BoxError, Resource};

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique key is taken.
    #[error("{entity} {key:?} already exists")]
    Conflict {
        /// What kind of thing.
        entity: Resource,
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
    /// The database cannot serve now (locked past the busy timeout, cannot open, disk full);
    /// retrying later may succeed.
    #[error("database unavailable during {operation}")]
    Unavailable {
        /// The store method.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
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

/// The one classification of store failures for callers: a taken key is a conflict, a store
/// that cannot serve is 503, anything else is internal (its source kept for the log).
impl From<StoreError> for svc_core::Error {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Conflict { entity, key } => svc_core::Error::AlreadyExists {
                resource: entity,
                id: key,
            },
            StoreError::Closed | StoreError::Unavailable { .. } => {
                svc_core::Error::StoreUnavailable {
                    source: Box::new(err),
                }
            }
            StoreError::Corrupt { .. }
            | StoreError::Backend { .. }
            | StoreError::Migration { .. } => svc_core::Error::internal("accessing the store", err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_names_the_kind_of_thing_that_collided() {
        for resource in [Resource::Sandbox, Resource::Build, Resource::AuditEntry] {
            let err = svc_core::Error::from(StoreError::Conflict {
                entity: resource,
                key: "k1".into(),
            });
            assert!(
                matches!(&err, svc_core::Error::AlreadyExists { resource: r, id } if *r == resource && id == "k1"),
                "{err:?}"
            );
        }
        let err = svc_core::Error::from(StoreError::Conflict {
            entity: Resource::AuditEntry,
            key: "aud-1".into(),
        });
        assert_eq!(err.kind(), svc_core::ErrorKind::Conflict);
        assert!(err.to_string().starts_with("audit entry"), "{err}");
    }
}
