//! Connection handling. SQLite allows one writer at a time, so all writes share one connection
//! behind a mutex (no `SQLITE_BUSY` storms); reads use a small pool of their own connections,
//! which WAL lets run beside the writer. Every call runs on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::codec::backend;
use crate::{StoreError, StoreResult};

/// How many idle read connections are kept.
const MAX_IDLE_READERS: usize = 8;
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct Connections {
    writer: Mutex<Option<Connection>>,
    idle_readers: Mutex<Vec<Connection>>,
    /// `None` for in-memory databases, whose data only the writer connection can see.
    reader_path: Option<PathBuf>,
    closed: AtomicBool,
}

fn configure(conn: &Connection, writer: bool) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    if writer {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    // NORMAL in WAL mode is durable across process crashes; only power loss can drop the last
    // transactions, which the reconciler repairs.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

impl Connections {
    pub(super) fn open(path: &Path) -> StoreResult<Self> {
        let in_memory = path.as_os_str() == ":memory:";
        let writer = Connection::open(path).map_err(backend("open"))?;
        configure(&writer, !in_memory).map_err(backend("open"))?;
        Ok(Connections {
            writer: Mutex::new(Some(writer)),
            idle_readers: Mutex::new(Vec::new()),
            reader_path: (!in_memory).then(|| path.to_path_buf()),
            closed: AtomicBool::new(false),
        })
    }

    /// Runs `f` on the writer connection, on the calling (blocking) thread.
    pub(super) fn with_writer<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut guard = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = guard.as_mut().ok_or(StoreError::Closed)?;
        f(conn)
    }

    fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        let Some(path) = &self.reader_path else {
            return self.with_writer(|conn| f(conn));
        };
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        let idle = self
            .idle_readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(conn) => conn,
            None => {
                let conn = Connection::open_with_flags(
                    path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY
                        | OpenFlags::SQLITE_OPEN_NO_MUTEX
                        | OpenFlags::SQLITE_OPEN_URI,
                )
                .map_err(backend("open reader"))?;
                configure(&conn, false).map_err(backend("open reader"))?;
                conn
            }
        };
        let result = f(&conn);
        let mut idle = self
            .idle_readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE_READERS && !self.closed.load(Ordering::Acquire) {
            idle.push(conn);
        }
        result
    }

    pub(super) async fn write<T: Send + 'static>(
        self: &Arc<Self>,
        operation: &'static str,
        f: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.with_writer(f))
            .await
            .map_err(|e| StoreError::Backend {
                operation,
                source: e.into(),
            })?
    }

    pub(super) async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        operation: &'static str,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.with_reader(f))
            .await
            .map_err(|e| StoreError::Backend {
                operation,
                source: e.into(),
            })?
    }

    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.idle_readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(conn) = writer {
            // Folds the WAL back into the main file so a closed database is one file.
            let _ = conn.pragma_update(None, "wal_checkpoint", "TRUNCATE");
            if let Err((_, err)) = conn.close() {
                tracing::warn!(error = %err, "closing the sqlite writer failed");
            }
        }
    }
}
