//! `database.*`: which store backend to open and where (decisions §2). The DSN may carry a
//! password, so it is a [`Secret`].

use std::fmt;

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// Store backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatabaseDriver {
    /// Embedded SQLite file (`database.path`).
    #[default]
    Sqlite,
    /// PostgreSQL server (`database.dsn`).
    Postgres,
}

impl DatabaseDriver {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DatabaseDriver::Sqlite => "sqlite",
            DatabaseDriver::Postgres => "postgres",
        }
    }
}

impl fmt::Display for DatabaseDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `database.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite` or `postgres`.
    pub driver: DatabaseDriver,
    /// SQLite file; `:memory:` is allowed for tests.
    pub path: String,
    /// Postgres connection string; required when the driver is postgres.
    pub dsn: Secret,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            driver: DatabaseDriver::Sqlite,
            path: "svc.db".to_owned(),
            dsn: Secret::default(),
        }
    }
}
