//! Who is calling, and for which sandbox. Control-plane routes authenticate like svc's own API
//! (E2B's `X-API-KEY` is svc's `X-API-Key`); in-sandbox calls name their sandbox with
//! `E2b-Sandbox-Id` and, when authentication is configured, carry the sandbox's access token
//! (`X-Access-Token`, E2B's `envdAccessToken`) instead of an API key.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use axum::http::HeaderMap;
use base64::Engine;
use svc_control::{ControlPlane, Credentials, EventFilter, Offered, Principal};
use svc_core::event::EventType;
use svc_core::{Error, SandboxId};

/// The E2B listener's state.
#[derive(Clone)]
pub(crate) struct E2b {
    pub(crate) plane: ControlPlane,
    /// What this listener noted per sandbox, dropped when the sandbox is destroyed.
    notes: Arc<Mutex<HashMap<SandboxId, SandboxNotes>>>,
    /// The directory watches the SDK polls.
    pub(crate) watchers: crate::watch::Watchers,
}

/// What the listener knows of one sandbox beyond svc's records.
#[derive(Debug, Default)]
struct SandboxNotes {
    /// Whether it has `/bin/bash` (the SDKs run commands through it), once asked.
    bash: Option<bool>,
    /// The execs started with a terminal here (their output is E2B's `pty` data on reattach).
    terminals: HashSet<String>,
}

/// A caller of a sandbox's in-sandbox services.
pub(crate) struct SandboxCaller {
    pub(crate) principal: Principal,
    pub(crate) sandbox: SandboxId,
    /// The user the SDK named (`Authorization: Basic <user>:`), when it named one.
    pub(crate) user: Option<String>,
}

/// The caller of a control-plane route, as an extractor: placed before the body's, it
/// authenticates before any body is read (decisions §30).
pub(crate) struct ApiCaller(pub(crate) Principal);

impl axum::extract::FromRequestParts<E2b> for ApiCaller {
    type Rejection = crate::error::E2bError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        e2b: &E2b,
    ) -> Result<Self, Self::Rejection> {
        Ok(ApiCaller(e2b.api_caller(&parts.headers).await?))
    }
}

pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl E2b {
    pub(crate) fn new(plane: ControlPlane) -> Self {
        let e2b = E2b {
            plane,
            notes: Arc::default(),
            watchers: crate::watch::Watchers::default(),
        };
        forget_destroyed_sandboxes(e2b.plane.clone(), Arc::downgrade(&e2b.notes));
        e2b
    }

    fn notes(&self) -> std::sync::MutexGuard<'_, HashMap<SandboxId, SandboxNotes>> {
        self.notes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The caller of a control-plane route.
    pub(crate) async fn api_caller(&self, headers: &HeaderMap) -> Result<Principal, Error> {
        let offered = Offered::from_headers(headers);
        self.plane.authenticate(&offered.credentials()).await
    }

    /// The caller of an in-sandbox service.
    pub(crate) async fn sandbox_caller(&self, headers: &HeaderMap) -> Result<SandboxCaller, Error> {
        let named = header(headers, "e2b-sandbox-id")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                Error::invalid(
                    "E2b-Sandbox-Id",
                    "header is required (set E2B_SANDBOX_URL to this listener)",
                )
            })?;
        let sandbox = SandboxId::named(named);
        let principal = if self.plane.auth_enabled() {
            let offered = Offered::from_headers(headers);
            let token = offered.access_token().ok_or_else(|| Error::Unauthorized {
                message: "X-Access-Token is required (the sandbox's envdAccessToken)".into(),
            })?;
            // A malformed ID is one no token names.
            let sandbox = sandbox.as_ref().map_err(|_| Error::Unauthorized {
                message: "the access token is not valid for this sandbox".into(),
            })?;
            // Scoped to the sandbox its token names: it reaches no other.
            self.plane
                .verify_sandbox_access_token(token, sandbox)
                .await?
        } else {
            self.plane.authenticate(&Credentials::default()).await?
        };
        let sandbox = sandbox?;
        let user = header(headers, "authorization")
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|raw| String::from_utf8(raw).ok())
            .and_then(|pair| pair.split(':').next().map(str::to_owned))
            .filter(|user| !user.is_empty());
        Ok(SandboxCaller {
            principal,
            sandbox,
            user,
        })
    }

    /// Notes that `exec` of `sandbox` runs with a terminal (kept while this listener runs: a
    /// terminal reattached after a restart reports its output as stdout).
    pub(crate) fn remember_terminal(&self, sandbox: &SandboxId, exec: &svc_core::ExecId) {
        self.notes()
            .entry(sandbox.clone())
            .or_default()
            .terminals
            .insert(exec.to_string());
    }

    /// Whether `exec` of `sandbox` was started with a terminal here.
    pub(crate) fn is_terminal(&self, sandbox: &SandboxId, exec: &svc_core::ExecId) -> bool {
        self.notes()
            .get(sandbox)
            .is_some_and(|notes| notes.terminals.contains(exec.as_str()))
    }

    /// Whether the caller's sandbox has `/bin/bash`, asked once per sandbox.
    pub(crate) async fn has_bash(&self, caller: &SandboxCaller) -> bool {
        let known = self
            .notes()
            .get(&caller.sandbox)
            .and_then(|notes| notes.bash);
        if let Some(known) = known {
            return known;
        }
        let found = self
            .plane
            .stat_file(&caller.principal, &caller.sandbox, "/bin/bash")
            .await
            .is_ok_and(|info| !info.is_dir);
        self.notes().entry(caller.sandbox.clone()).or_default().bash = Some(found);
        found
    }
}

/// Drops the notes of each sandbox once it is destroyed (on any replica: the bus delivers their
/// events too), so they live no longer than their sandboxes. Ends with the control plane, or
/// when the listener's state is gone.
fn forget_destroyed_sandboxes(
    plane: ControlPlane,
    notes: Weak<Mutex<HashMap<SandboxId, SandboxNotes>>>,
) {
    let shutdown = plane.shutdown_token().clone();
    let subscribe = |plane: &ControlPlane| {
        let filter = EventFilter {
            types: HashSet::from([EventType::SandboxDestroyed]),
            ..EventFilter::default()
        };
        plane.events().subscribe(filter, None)
    };
    // Subscribed before the listener answers anything, so no destruction is missed.
    let mut destroyed = subscribe(&plane);
    tokio::spawn(async move {
        loop {
            loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => return,
                    event = destroyed.next() => event,
                };
                // None: this subscriber fell behind (or the bus closed); subscribe again.
                let Some(event) = event else { break };
                let Some(notes) = notes.upgrade() else { return };
                if let Some(id) = &event.sandbox_id {
                    notes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(id);
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            destroyed = subscribe(&plane);
        }
    });
}

impl SandboxCaller {
    /// The home directory of the caller's user: E2B's default user is `user`.
    pub(crate) fn home(&self, user: Option<&str>) -> String {
        match user.or(self.user.as_deref()).unwrap_or("user") {
            "root" => "/root".to_owned(),
            name => format!("/home/{name}"),
        }
    }

    /// `path` as envd resolves it: `~` and relative paths from the user's home.
    pub(crate) fn resolve(&self, path: &str, user: Option<&str>) -> String {
        if path.starts_with('/') {
            return path.to_owned();
        }
        let home = self.home(user);
        match path.strip_prefix('~') {
            Some("") => home,
            Some(rest) if rest.starts_with('/') => format!("{home}{rest}"),
            _ if path.is_empty() => home,
            _ => format!("{home}/{path}"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use svc_core::event::{EventPayload, SandboxEventData};
    use svc_core::{ExecId, SandboxId};

    #[tokio::test]
    async fn a_destroyed_sandboxs_notes_are_dropped_and_the_others_kept() {
        let e2b = E2b::new(ControlPlane::for_tests().await);
        let (gone, kept) = (SandboxId::generate(), SandboxId::generate());
        let exec = ExecId::generate();
        for sandbox in [&gone, &kept] {
            e2b.remember_terminal(sandbox, &exec);
        }
        let data = SandboxEventData {
            provider: "mock".into(),
            image: "busybox".into(),
            owner_id: None,
            tenant_id: "default".into(),
            worker_id: None,
            reason: None,
            message: None,
            error: None,
            image_pulled: false,
        };
        e2b.plane
            .events()
            .publish(Some(&gone), EventPayload::SandboxDestroyed(data));
        // The forgetting runs on its own task: wait for it (a minute only ends a broken run).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while e2b.is_terminal(&gone, &exec) {
            assert!(
                std::time::Instant::now() < deadline,
                "the destroyed sandbox's notes stay"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(e2b.is_terminal(&kept, &exec));
        assert_eq!(e2b.notes().len(), 1);
    }
}
