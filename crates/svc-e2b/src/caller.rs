//! Who is calling, and for which sandbox. Control-plane routes authenticate like svc's own API
//! (E2B's `X-API-KEY` is svc's `X-API-Key`); in-sandbox calls name their sandbox with
//! `E2b-Sandbox-Id` and, when authentication is configured, carry the sandbox's access token
//! (`X-Access-Token`, E2B's `envdAccessToken`) instead of an API key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::HeaderMap;
use base64::Engine;
use svc_control::{ControlPlane, Credentials, Principal};
use svc_core::Error;

/// The E2B listener's state.
#[derive(Clone)]
pub(crate) struct E2b {
    pub(crate) plane: ControlPlane,
    /// Per sandbox: whether it has `/bin/bash` (the SDKs run commands through it).
    shells: Arc<Mutex<HashMap<String, bool>>>,
    /// The directory watches the SDK polls.
    pub(crate) watchers: crate::watch::Watchers,
    /// The execs started with a terminal here (their output is E2B's `pty` data on reattach).
    pub(crate) terminals: Arc<Mutex<std::collections::HashSet<String>>>,
}

/// A caller of a sandbox's in-sandbox services.
pub(crate) struct SandboxCaller {
    pub(crate) principal: Principal,
    pub(crate) sandbox: String,
    /// The user the SDK named (`Authorization: Basic <user>:`), when it named one.
    pub(crate) user: Option<String>,
}

pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl E2b {
    pub(crate) fn new(plane: ControlPlane) -> Self {
        E2b {
            plane,
            shells: Arc::default(),
            watchers: crate::watch::Watchers::default(),
            terminals: Arc::default(),
        }
    }

    /// The caller of a control-plane route.
    pub(crate) async fn api_caller(&self, headers: &HeaderMap) -> Result<Principal, Error> {
        let bearer = header(headers, "authorization").and_then(|v| v.strip_prefix("Bearer "));
        let credentials = Credentials {
            api_key: header(headers, "x-api-key"),
            admin_api_key: header(headers, "x-admin-api-key"),
            bearer,
        };
        self.plane.authenticate(&credentials).await
    }

    /// The caller of an in-sandbox service.
    pub(crate) async fn sandbox_caller(&self, headers: &HeaderMap) -> Result<SandboxCaller, Error> {
        let sandbox = header(headers, "e2b-sandbox-id")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                Error::invalid(
                    "E2b-Sandbox-Id",
                    "header is required (set E2B_SANDBOX_URL to this listener)",
                )
            })?
            .to_owned();
        let principal = if self.plane.auth_enabled() {
            let token = header(headers, "x-access-token").ok_or_else(|| Error::Unauthorized {
                message: "X-Access-Token is required (the sandbox's envdAccessToken)".into(),
            })?;
            self.plane
                .verify_sandbox_access_token(token, &sandbox)
                .await?;
            Principal::system()
        } else {
            self.plane.authenticate(&Credentials::default()).await?
        };
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

    /// Notes that `exec` runs with a terminal (kept while this listener runs: a terminal
    /// reattached after a restart reports its output as stdout).
    pub(crate) fn remember_terminal(&self, exec: &svc_core::ExecId) {
        self.terminals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(exec.to_string());
    }

    /// Whether `exec` was started with a terminal here.
    pub(crate) fn is_terminal(&self, exec: &svc_core::ExecId) -> bool {
        self.terminals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(exec.as_str())
    }

    /// Whether the caller's sandbox has `/bin/bash`, asked once per sandbox.
    pub(crate) async fn has_bash(&self, caller: &SandboxCaller) -> bool {
        let known = self
            .shells
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&caller.sandbox)
            .copied();
        if let Some(known) = known {
            return known;
        }
        let found = self
            .plane
            .stat_file(&caller.principal, &caller.sandbox, "/bin/bash")
            .await
            .is_ok_and(|info| !info.is_dir);
        self.shells
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(caller.sandbox.clone(), found);
        found
    }
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
