//! Tenant memberships as seen by authentication: every OIDC request needs its subject's role
//! in its tenant, so answers are kept for a few seconds instead of asking the store each time.
//! Local membership changes clear the cache at once; other replicas' changes show within
//! [`MEMBER_TTL`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use svc_core::access::Role;
use svc_core::Error;
use svc_store::Store;

/// How long a membership answer is trusted.
pub const MEMBER_TTL: Duration = Duration::from_secs(5);
/// Answers kept at most.
const CAPACITY: usize = 10_000;

type Key = (String, String);

/// The cache.
#[derive(Default)]
pub(crate) struct MemberRoles {
    known: Mutex<HashMap<Key, (Option<Role>, Instant)>>,
}

impl MemberRoles {
    /// The role `subject` holds as a member of `tenant_id`, if any.
    pub(crate) async fn role(
        &self,
        store: &dyn Store,
        tenant_id: &str,
        subject: &str,
    ) -> Result<Option<Role>, Error> {
        let key = (tenant_id.to_owned(), subject.to_owned());
        if let Some((role, at)) = self.lock().get(&key) {
            if at.elapsed() < MEMBER_TTL {
                return Ok(*role);
            }
        }
        let role = store.member_role(tenant_id, subject).await?;
        let mut known = self.lock();
        if known.len() >= CAPACITY {
            known.clear();
        }
        known.insert(key, (role, Instant::now()));
        Ok(role)
    }

    /// Forgets every answer (after a membership changed here).
    pub(crate) fn forget(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Option<Role>, Instant)>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
