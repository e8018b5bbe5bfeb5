//! Directory watching (`WatchDir`, and the polling `CreateWatcher` / `GetWatcherEvents` /
//! `RemoveWatcher` the Python SDK's sync client uses) by comparing listings: svc's providers
//! have no change notifications, so a watch lists the directory (and, when recursive, those
//! below) every [`POLL`] and reports what appeared (`create`), changed size or time (`write`)
//! and went away (`remove`). Changes that undo themselves between two listings go unseen.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use svc_core::Timestamp;
use tokio::time::Instant;

use crate::caller::{E2b, SandboxCaller};
use crate::connect::RpcError;

/// How often a watch lists the directory.
pub(crate) const POLL: Duration = Duration::from_millis(250);
/// The most entries a watch follows.
const MAX_ENTRIES: usize = 10_000;

/// What a watched directory held: path → (directory?, size, modification time).
type Snapshot = BTreeMap<String, (bool, u64, Timestamp)>;

/// A watch the SDK polls (`CreateWatcher`).
struct Watcher {
    sandbox: svc_core::SandboxId,
    dir: String,
    recursive: bool,
    seen: Snapshot,
}

/// The polled watches of one listener.
#[derive(Clone, Default)]
pub(crate) struct Watchers {
    next: Arc<AtomicU64>,
    open: Arc<Mutex<HashMap<String, Watcher>>>,
}

/// The listing of `dir` (and below, when `recursive`).
async fn snapshot(
    e2b: &E2b,
    caller: &SandboxCaller,
    dir: &str,
    recursive: bool,
) -> Result<Snapshot, RpcError> {
    let mut seen = Snapshot::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(next) = pending.pop() {
        let entries = e2b
            .plane
            .list_files(&caller.principal, &caller.sandbox, &next)
            .await?;
        for info in entries {
            if info.is_dir && recursive {
                pending.push(info.path.clone());
            }
            seen.insert(info.path, (info.is_dir, info.size, info.mod_time));
            if seen.len() >= MAX_ENTRIES {
                return Ok(seen);
            }
        }
    }
    Ok(seen)
}

/// The events from `before` to `after`, named relative to `dir`.
fn changes(dir: &str, before: &Snapshot, after: &Snapshot) -> Vec<Value> {
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let event = |path: &str, kind: &str| {
        let name = path.strip_prefix(&prefix).unwrap_or(path);
        json!({"name": name, "type": kind})
    };
    let mut events = Vec::new();
    for (path, now) in after {
        match before.get(path) {
            None => events.push(event(path, "EVENT_TYPE_CREATE")),
            Some(was) if was != now && !now.0 => events.push(event(path, "EVENT_TYPE_WRITE")),
            Some(_) => {}
        }
    }
    for path in before.keys().filter(|path| !after.contains_key(*path)) {
        events.push(event(path, "EVENT_TYPE_REMOVE"));
    }
    events
}

/// `WatchDir`: `start`, then the changes as they are seen, a keepalive when there were none
/// for `keepalive`.
pub(crate) async fn stream(
    e2b: E2b,
    caller: SandboxCaller,
    dir: String,
    recursive: bool,
    keepalive: Duration,
) -> Result<impl Stream<Item = Result<Value, RpcError>> + Send + 'static, RpcError> {
    let first = snapshot(&e2b, &caller, &dir, recursive).await?;
    let started = futures::stream::iter([Ok::<_, RpcError>(json!({"start": {}}))]);
    let state = (e2b, caller, dir, first, Vec::<Value>::new(), Instant::now());
    let events = futures::stream::unfold(
        state,
        move |(e2b, caller, dir, mut seen, mut queued, mut quiet_since)| async move {
            loop {
                if let Some(event) = queued.pop() {
                    quiet_since = Instant::now();
                    let item = Ok(json!({"filesystem": event}));
                    return Some((item, (e2b, caller, dir, seen, queued, quiet_since)));
                }
                if quiet_since.elapsed() >= keepalive {
                    quiet_since = Instant::now();
                    let item = Ok(json!({"keepalive": {}}));
                    return Some((item, (e2b, caller, dir, seen, queued, quiet_since)));
                }
                tokio::time::sleep(POLL).await;
                match snapshot(&e2b, &caller, &dir, recursive).await {
                    Ok(now) => {
                        queued = changes(&dir, &seen, &now);
                        queued.reverse();
                        seen = now;
                    }
                    Err(err) => {
                        return Some((Err(err), (e2b, caller, dir, seen, queued, quiet_since)))
                    }
                }
            }
        },
    );
    Ok(started.chain(events))
}

impl Watchers {
    /// `CreateWatcher`: its ID.
    pub(crate) async fn create(
        &self,
        e2b: &E2b,
        caller: &SandboxCaller,
        dir: String,
        recursive: bool,
    ) -> Result<String, RpcError> {
        let seen = snapshot(e2b, caller, &dir, recursive).await?;
        let id = format!("w-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let watcher = Watcher {
            sandbox: caller.sandbox.clone(),
            dir,
            recursive,
            seen,
        };
        self.lock().insert(id.clone(), watcher);
        Ok(id)
    }

    /// `GetWatcherEvents`: the changes since the last call (or the creation).
    pub(crate) async fn events(
        &self,
        e2b: &E2b,
        caller: &SandboxCaller,
        id: &str,
    ) -> Result<Vec<Value>, RpcError> {
        let (dir, recursive) = {
            let open = self.lock();
            let watcher = open
                .get(id)
                .filter(|w| w.sandbox == caller.sandbox)
                .ok_or_else(|| RpcError::new("not_found", format!("watcher {id} not found")))?;
            (watcher.dir.clone(), watcher.recursive)
        };
        let now = snapshot(e2b, caller, &dir, recursive).await?;
        let mut open = self.lock();
        let watcher = open
            .get_mut(id)
            .ok_or_else(|| RpcError::new("not_found", format!("watcher {id} not found")))?;
        let events = changes(&dir, &watcher.seen, &now);
        watcher.seen = now;
        Ok(events)
    }

    /// `RemoveWatcher`.
    pub(crate) fn remove(&self, caller: &SandboxCaller, id: &str) -> Result<(), RpcError> {
        let mut open = self.lock();
        match open.get(id) {
            Some(watcher) if watcher.sandbox == caller.sandbox => {
                open.remove(id);
                Ok(())
            }
            _ => Err(RpcError::new(
                "not_found",
                format!("watcher {id} not found"),
            )),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watcher>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_compare_into_create_write_and_remove() {
        let at = |s: i64| chrono::DateTime::from_timestamp(s, 0).unwrap_or_default();
        let before = Snapshot::from([
            ("/w/kept".to_owned(), (false, 1, at(1))),
            ("/w/grown".to_owned(), (false, 1, at(1))),
            ("/w/gone".to_owned(), (false, 1, at(1))),
        ]);
        let after = Snapshot::from([
            ("/w/kept".to_owned(), (false, 1, at(1))),
            ("/w/grown".to_owned(), (false, 2, at(2))),
            ("/w/sub/new".to_owned(), (false, 0, at(3))),
        ]);
        let events = changes("/w", &before, &after);
        assert_eq!(
            events,
            vec![
                json!({"name": "grown", "type": "EVENT_TYPE_WRITE"}),
                json!({"name": "sub/new", "type": "EVENT_TYPE_CREATE"}),
                json!({"name": "gone", "type": "EVENT_TYPE_REMOVE"}),
            ]
        );
    }
}
