//! Tenant memberships as seen by authentication: every OIDC request needs its subject's role in
//! its tenant. The answer is kept with the verified token (see [`OidcIdentity`]) for
//! [`MEMBER_TTL`], so a client reusing its token asks the store once per TTL, not per request.
//! Membership changes made through this server bump a generation that voids every kept answer
//! at once; other replicas' changes show within the TTL.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use svc_core::access::Role;
use svc_core::Error;
use svc_store::Store;

use super::OidcIdentity;

/// How long a membership answer is trusted.
pub const MEMBER_TTL: Duration = Duration::from_secs(5);

/// A membership answer kept with a verified token.
#[derive(Debug, Clone, Copy)]
pub struct MemberAnswer {
    role: Option<Role>,
    at: Instant,
    generation: u64,
}

/// The generation of membership answers.
#[derive(Default)]
pub(crate) struct MemberRoles {
    generation: AtomicU64,
}

impl MemberRoles {
    /// The role the token's subject holds as a member of its tenant, if any.
    pub(crate) async fn role(
        &self,
        store: &dyn Store,
        identity: &OidcIdentity,
    ) -> Result<Option<Role>, Error> {
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(answer) = identity.member_answer() {
            if answer.generation == generation && answer.at.elapsed() < MEMBER_TTL {
                return Ok(answer.role);
            }
        }
        let role = store
            .member_role(&identity.tenant_id, &identity.subject)
            .await?;
        identity.keep_member_answer(MemberAnswer {
            role,
            at: Instant::now(),
            generation,
        });
        Ok(role)
    }

    /// Voids every kept answer (after a membership changed here).
    pub(crate) fn forget(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}
