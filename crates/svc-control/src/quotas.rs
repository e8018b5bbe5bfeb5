//! Owner quotas (`/quotas...` and the `/admin/quotas...` aliases) and the limits in force for
//! an owner: its quota's non-zero values, else the global `defaults.*` (decisions §10).

use svc_core::access::Action;
use svc_core::event::{EventPayload, QuotaEventData};
use svc_core::quota::{
    EffectiveLimits, GlobalLimits, OwnerQuota, OwnerUsage, QuotaRequest, QuotaSummary,
};
use svc_core::{Error, OwnerId};

use crate::paging::{Page, PageRequest, MAX_PAGE};
use crate::{ControlPlane, Principal};

/// An owner ID from a path: validated like `X-User-ID`, refused by name.
fn owner_param(owner_id: &str) -> Result<OwnerId, Error> {
    OwnerId::parse(owner_id).map_err(|e| Error::invalid("ownerID", e.to_string()))
}

/// A bound caller (an OIDC viewer or operator) sees only its own quota: another owner's is 404,
/// as if it had none (decisions §30).
fn check_own_quota(principal: &Principal, owner: &OwnerId) -> Result<(), Error> {
    match principal.bound_owner() {
        Some(bound) if bound != owner.as_str() => Err(Error::not_found(
            svc_core::error::Resource::Quota,
            owner.as_str(),
        )),
        _ => Ok(()),
    }
}

impl ControlPlane {
    /// The global limits from `defaults.*`.
    pub(crate) fn global_limits(&self) -> GlobalLimits {
        let defaults = &self.config().defaults;
        GlobalLimits {
            max_sandboxes: defaults.max_sandboxes,
            max_sandboxes_per_owner: defaults.max_sandboxes_per_owner,
            max_ttl: defaults.max_ttl,
            max_exec_timeout: defaults.max_exec_timeout,
        }
    }

    /// The limits in force for `owner` (none: anonymous, global only).
    pub(crate) async fn effective_limits(
        &self,
        owner: Option<&OwnerId>,
    ) -> Result<EffectiveLimits, Error> {
        let global = self.global_limits();
        let Some(owner) = owner else {
            return Ok(global.effective(None));
        };
        let quota = self.store().get_quota(owner.as_str()).await?;
        Ok(global.effective(quota.map(|q| q.limits()).as_ref()))
    }

    /// `GET /quotas`: a page, by owner.
    pub async fn list_quotas(
        &self,
        principal: &Principal,
        page: PageRequest,
    ) -> Result<Page<OwnerQuota>, Error> {
        self.authorize(principal, Action::ReadQuotas)?;
        let paging = page.open::<String>("/quotas", String::new(), MAX_PAGE)?;
        let quotas = match principal.bound_owner() {
            // A bound caller's list holds its own quota at most.
            Some(own) => {
                let listed = paging.after.as_deref().is_none_or(|after| after < own);
                match self.store().get_quota(own).await? {
                    Some(quota) if listed => vec![quota],
                    _ => Vec::new(),
                }
            }
            None => self.store().list_quotas(&paging.key_page()).await?,
        };
        Ok(paging.finish(quotas, |q: &OwnerQuota| q.owner_id.clone()))
    }

    /// `GET /quotas/summary`.
    pub async fn quota_summary(&self, principal: &Principal) -> Result<QuotaSummary, Error> {
        self.authorize(principal, Action::ReadQuotas)?;
        let Some(own) = principal.bound_owner() else {
            return Ok(self.store().quota_summary().await?);
        };
        // A bound caller's summary counts its own quota only: the others' are not its to see.
        let quota = self.store().get_quota(own).await?;
        let count = |set: fn(&OwnerQuota) -> bool| u64::from(quota.as_ref().is_some_and(set));
        Ok(QuotaSummary {
            total: count(|_| true),
            with_max_sandboxes: count(|q| q.max_sandboxes > 0),
            with_max_ttl: count(|q| !q.max_ttl.is_zero()),
            with_max_exec_timeout: count(|q| !q.max_exec_timeout.is_zero()),
        })
    }

    /// `GET /quotas/{ownerID}`: 404 when the owner has none.
    pub async fn get_quota(
        &self,
        principal: &Principal,
        owner_id: &str,
    ) -> Result<OwnerQuota, Error> {
        self.authorize(principal, Action::ReadQuotas)?;
        let owner = owner_param(owner_id)?;
        check_own_quota(principal, &owner)?;
        self.store()
            .get_quota(owner.as_str())
            .await?
            .ok_or_else(|| Error::not_found(svc_core::error::Resource::Quota, owner.as_str()))
    }

    /// `GET /quotas/{ownerID}/usage`: answers for any owner, with the effective limits.
    pub async fn quota_usage(
        &self,
        principal: &Principal,
        owner_id: &str,
    ) -> Result<OwnerUsage, Error> {
        self.authorize(principal, Action::ReadQuotas)?;
        let owner = owner_param(owner_id)?;
        check_own_quota(principal, &owner)?;
        let store = self.store();
        let (quota, active) = tokio::try_join!(
            store.get_quota(owner.as_str()),
            store.count_active_sandboxes(Some(owner.as_str()))
        )?;
        let effective = self
            .global_limits()
            .effective(quota.as_ref().map(OwnerQuota::limits).as_ref());
        Ok(OwnerUsage {
            owner_id: owner.as_str().to_owned(),
            active_sandboxes: active,
            max_sandboxes: effective.max_owner_sandboxes,
            max_ttl: effective.max_ttl,
            max_exec_timeout: effective.max_exec_timeout,
            quota_configured: quota.is_some(),
        })
    }

    /// `PUT /quotas/{ownerID}`: validates, saves, publishes `quota.saved` and wakes the spawn
    /// queue (a raised limit may admit a waiter).
    pub async fn put_quota(
        &self,
        principal: &Principal,
        owner_id: &str,
        request: QuotaRequest,
    ) -> Result<OwnerQuota, Error> {
        self.authorize(principal, Action::WriteQuotas)?;
        let owner = owner_param(owner_id)?;
        let limits = request.validate()?;
        let saved = self
            .store()
            .put_quota(owner.as_str(), limits, self.clock().now())
            .await?;
        self.events().publish(
            None,
            EventPayload::QuotaSaved(QuotaEventData {
                owner_id: saved.owner_id.clone(),
            }),
        );
        self.spawn_queue().capacity_changed();
        tracing::info!("owner quota saved");
        Ok(saved)
    }

    /// `DELETE /quotas/{ownerID}`: 404 when there was none.
    pub async fn delete_quota(&self, principal: &Principal, owner_id: &str) -> Result<(), Error> {
        self.authorize(principal, Action::WriteQuotas)?;
        let owner = owner_param(owner_id)?;
        if !self.store().delete_quota(owner.as_str()).await? {
            return Err(Error::not_found(
                svc_core::error::Resource::Quota,
                owner.as_str(),
            ));
        }
        self.events().publish(
            None,
            EventPayload::QuotaDeleted(QuotaEventData {
                owner_id: owner.as_str().to_owned(),
            }),
        );
        self.spawn_queue().capacity_changed();
        tracing::info!("owner quota deleted");
        Ok(())
    }
}
