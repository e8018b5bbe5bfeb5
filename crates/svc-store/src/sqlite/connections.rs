//! Connection handling. SQLite allows one writer at a time, so all writes share one connection
//! behind a mutex (no `SQLITE_BUSY` storms); reads use a small pool of their own connections,
//! which WAL lets run beside the writer. Every call runs on the blocking pool.
//!
//! WAL checkpoints (copying the log back into the database file, with an fsync) run on a
//! thread of their own every [`CHECKPOINT_INTERVAL`], as `PASSIVE` checkpoints that never
//! block the writer. Left to SQLite's automatic checkpoint, the write that crosses the
//! threshold pays for the copy and the fsync while every other write waits behind it; the
//! automatic one stays on, at a much higher threshold, only as a backstop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::codec::backend;
use crate::{StoreError, StoreResult};

/// How many idle read connections are kept.
const MAX_IDLE_READERS: usize = 8;
/// How often the background checkpoint runs.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(250);
/// WAL pages after which the writer checkpoints by itself (SQLite's default is 1000), should
/// the background checkpoint fall behind.
const BACKSTOP_AUTOCHECKPOINT_PAGES: i64 = 10_000;
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) struct Connections {
    writer: Mutex<Option<Connection>>,
    idle_readers: Mutex<Vec<Connection>>,
    /// `None` for in-memory databases, whose data only the writer connection can see.
    reader_path: Option<PathBuf>,
    closed: AtomicBool,
    checkpointer: Mutex<Option<Checkpointer>>,
}

/// The background checkpoint thread and its stop signal.
struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    fn start(path: &Path) -> StoreResult<Self> {
        let conn = Connection::open(path).map_err(backend("open checkpointer"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(backend("open checkpointer"))?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("svc-sqlite-checkpoint".to_owned())
            .spawn(move || {
                let (stopped, wake) = &*signal;
                let mut stopped_now = stopped.lock().unwrap_or_else(PoisonError::into_inner);
                while !*stopped_now {
                    stopped_now = wake
                        .wait_timeout(stopped_now, CHECKPOINT_INTERVAL)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                    if *stopped_now {
                        break;
                    }
                    if let Err(err) =
                        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!(error = %err, "background checkpoint failed; retrying");
                    }
                }
            })
            .map_err(|e| StoreError::Backend {
                operation: "start checkpointer",
                source: e.into(),
            })?;
        Ok(Checkpointer { stop, thread })
    }

    fn stop(self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        let _ = self.thread.join();
    }
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
        let checkpointer = if in_memory {
            None
        } else {
            writer
                .pragma_update(None, "wal_autocheckpoint", BACKSTOP_AUTOCHECKPOINT_PAGES)
                .map_err(backend("open"))?;
            Some(Checkpointer::start(path)?)
        };
        Ok(Connections {
            writer: Mutex::new(Some(writer)),
            idle_readers: Mutex::new(Vec::new()),
            reader_path: (!in_memory).then(|| path.to_path_buf()),
            closed: AtomicBool::new(false),
            checkpointer: Mutex::new(checkpointer),
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

    fn stop_checkpointer(&self) {
        let checkpointer = self
            .checkpointer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(checkpointer) = checkpointer {
            checkpointer.stop();
        }
    }

    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.stop_checkpointer();
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

impl Drop for Connections {
    fn drop(&mut self) {
        // A store dropped without `close` (tests, a failed start) still ends its thread.
        self.stop_checkpointer();
    }
}
