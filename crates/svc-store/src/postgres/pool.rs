//! The connection pool: how a connection string becomes pooled connections. The transport is
//! chosen in [`open`] alone (plain TCP or a Unix socket for now; TLS joins there), and a store
//! confined to a schema gets it on every connection through the startup options, before any
//! statement runs.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::{StoreError, StoreResult};

/// How long a call waits for a free connection before the store reports itself unavailable.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long opening one connection (TCP, authentication, startup) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the check of an idle connection before reuse may take.
const RECYCLE_TIMEOUT: Duration = Duration::from_secs(5);

/// A schema name the store accepts: a lowercase SQL identifier that needs no quoting, so it
/// can go into the startup options and into DDL as it is.
pub(super) fn valid_schema(schema: &str) -> bool {
    let mut bytes = schema.bytes();
    schema.len() <= 63
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The connection settings of `dsn` (a `postgres://` URL or `key=value` pairs), confined to
/// `schema` when one is given.
pub(super) fn settings(dsn: &str, schema: Option<&str>) -> StoreResult<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = dsn.parse().map_err(|err| StoreError::Backend {
        // The parser's errors name options, never their values.
        operation: "parse the postgres connection string",
        source: Box::new(err),
    })?;
    if config.get_application_name().is_none() {
        config.application_name("svc");
    }
    if let Some(schema) = schema {
        let search_path = format!("-c search_path={schema}");
        let options = match config.get_options() {
            Some(given) if !given.is_empty() => format!("{given} {search_path}"),
            _ => search_path,
        };
        config.options(options);
    }
    Ok(config)
}

/// A connection outside the pool (the event listener's), with the transport [`open`] uses.
pub(super) async fn connect_one(
    config: &tokio_postgres::Config,
) -> Result<
    (
        tokio_postgres::Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ),
    tokio_postgres::Error,
> {
    config.connect(NoTls).await
}

/// The pool for `config`. Nothing connects yet.
pub(super) fn open(config: tokio_postgres::Config, pool_size: usize) -> StoreResult<Pool> {
    // Fast recycling: a connection the server closed is noticed by its client and dropped; one
    // that broke silently fails its next statement as unavailable and is dropped then.
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(pool_size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(WAIT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(RECYCLE_TIMEOUT))
        .build()
        .map_err(|err| StoreError::Backend {
            operation: "build the postgres pool",
            source: Box::new(err),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["svc", "_x", "svc_test_0a9f", &"a".repeat(63)] {
            assert!(valid_schema(good), "{good}");
        }
        for bad in [
            "",
            "9lives",
            "Svc",
            "svc-test",
            "svc test",
            "a\"b",
            "x;drop",
            &"a".repeat(64),
        ] {
            assert!(!valid_schema(bad), "{bad}");
        }
    }
}
