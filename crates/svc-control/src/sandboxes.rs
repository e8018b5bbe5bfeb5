//! The sandbox lifecycle after spawn (see `spawn.rs`): get, list, extend, and destroy, the
//! spawn pipeline's mirror image, with prune and the reaper built on it.

use svc_core::access::Action;
use svc_core::admission::check_ttl;
use svc_core::clock::add_duration;
use svc_core::error::{echo, Resource};
use svc_core::event::{EventPayload, SandboxEventData};
use svc_core::sandbox::{
    check_ttl_positive, Ending, ExtendRequest, Sandbox, SandboxState, StateReason,
};
use svc_core::worker::{Lease, LeaseAcquire};
use svc_core::{Error, SandboxId};
use svc_store::{EndedState, SandboxFilter, SandboxPosition, StateFilter};

use crate::paging::{self, filter_key, Page, PageRequest, MAX_PAGE};
use crate::{ControlPlane, Principal};

/// `GET /sandboxes` query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSandboxes {
    /// A state or `all`; default: everything not destroyed.
    pub state: Option<String>,
    /// Exact owner.
    pub owner_id: Option<String>,
    /// Exact provider.
    pub provider: Option<String>,
    /// The page (default and largest: [`MAX_PAGE`]).
    pub page: PageRequest,
}

/// A sandbox's place in the list: `created_at` in microseconds, then the ID.
type SandboxKey = (i64, String);

fn sandbox_key(sandbox: &Sandbox) -> SandboxKey {
    (
        sandbox.created_at.timestamp_micros(),
        sandbox.id.to_string(),
    )
}

/// The `data` of `sandbox.*` events (decisions §12).
pub(crate) fn sandbox_event_data(sandbox: &Sandbox) -> SandboxEventData {
    SandboxEventData {
        provider: sandbox.provider.clone(),
        image: sandbox.image.clone(),
        owner_id: sandbox.owner_id.clone(),
        tenant_id: sandbox.tenant_id.clone(),
        worker_id: sandbox.worker_id.clone(),
        reason: sandbox.state_reason,
        message: sandbox.state_message.clone(),
        error: None,
        image_pulled: false,
    }
}

impl ControlPlane {
    /// A sandbox the caller may see, in any state; malformed IDs are simply not found. Callers
    /// authorize first.
    pub(crate) async fn find_sandbox(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<Sandbox, Error> {
        let not_found = || Error::not_found(Resource::Sandbox, id.as_str());
        let sandbox = self.store().get_sandbox(id).await?.ok_or_else(not_found)?;
        if !principal.can_see_tenant(&sandbox.tenant_id)
            || !principal.may_reach(&sandbox.id)
            || self.owner_hides(principal, &sandbox)
        {
            return Err(not_found());
        }
        Ok(sandbox)
    }

    /// Pool mode's logical sandboxes answer only their owner, as if others did not exist
    /// (decisions §30).
    pub(crate) fn owner_hides(&self, principal: &Principal, sandbox: &Sandbox) -> bool {
        self.config().pool.enabled
            && !principal.sees_every_owner()
            && !matches!(
                (principal.acting_owner(), &sandbox.owner_id),
                (Some(acting), Some(owner)) if acting == owner.as_str()
            )
    }

    /// A sandbox the caller may see that is `running` (for exec, files, logs, extend); any
    /// other state is 409 saying which (and for an ended sandbox why and when, decisions §7),
    /// and so is a sandbox whose lease another worker holds (its runtime is that worker's).
    pub(crate) async fn running_sandbox(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<Sandbox, Error> {
        let sandbox = self.find_sandbox(principal, id).await?;
        if sandbox.state != SandboxState::Running {
            return Err(sandbox.not_running_error());
        }
        self.check_not_fenced(&sandbox).await?;
        Ok(sandbox)
    }

    /// `GET /sandboxes/{id}`.
    pub async fn get_sandbox(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<Sandbox, Error> {
        self.authorize(principal, Action::ReadSandboxes)?;
        self.find_sandbox(principal, id).await
    }

    /// Checks that `id` names a running sandbox the caller may run commands in, without doing
    /// anything (the WebSocket route answers errors before its upgrade).
    pub async fn check_exec_target(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<(), Error> {
        self.authorize(principal, Action::Exec)?;
        self.running_sandbox(principal, id).await.map(drop)
    }

    /// Every sandbox a query selects, newest first (no paging: for callers inside svc and the
    /// E2B listener; the API pages with [`ControlPlane::list_sandboxes_page`]).
    pub async fn list_sandboxes(
        &self,
        principal: &Principal,
        query: ListSandboxes,
    ) -> Result<Vec<Sandbox>, Error> {
        let Some(filter) = self.sandbox_filter(principal, &query)? else {
            return Ok(Vec::new());
        };
        Ok(self.store().list_sandboxes(&filter).await?)
    }

    /// `GET /sandboxes`: a page (keyset on the list order, so paging neither skips nor repeats
    /// a sandbox while others are created or destroyed) and the next page's cursor.
    pub async fn list_sandboxes_page(
        &self,
        principal: &Principal,
        query: ListSandboxes,
    ) -> Result<Page<Sandbox>, Error> {
        let key = filter_key(&[
            query.state.as_deref(),
            query.owner_id.as_deref(),
            query.provider.as_deref(),
        ]);
        let paging = query.page.open::<SandboxKey>("/sandboxes", key, MAX_PAGE)?;
        let Some(mut filter) = self.sandbox_filter(principal, &query)? else {
            return Ok(paging.finish(Vec::new(), sandbox_key));
        };
        if let Some((micros, id)) = &paging.after {
            filter.after = Some(SandboxPosition {
                created_at: paging::timestamp(*micros)?,
                id: id.clone(),
            });
        }
        filter.limit = Some(paging.fetch());
        let sandboxes = self.store().list_sandboxes(&filter).await?;
        Ok(paging.finish(sandboxes, sandbox_key))
    }

    /// The store's filter for a listing; `None` when the caller can see none of what it asked
    /// for (another owner's sandboxes in pool mode).
    fn sandbox_filter(
        &self,
        principal: &Principal,
        query: &ListSandboxes,
    ) -> Result<Option<SandboxFilter>, Error> {
        self.authorize(principal, Action::ReadSandboxes)?;
        if principal.only_sandbox.is_some() {
            // A caller scoped to one sandbox names it; it lists nothing.
            return Ok(None);
        }
        let state = match query.state.as_deref() {
            None | Some("") => StateFilter::Active,
            Some("all") => StateFilter::All,
            Some(other) => StateFilter::Only(SandboxState::parse(other).ok_or_else(|| {
                Error::invalid(
                    "state",
                    format!(
                        "unknown state {} (allowed: creating, running, paused, error, destroyed, all)",
                        echo(other)
                    ),
                )
            })?),
        };
        let mut owner_id = query.owner_id.clone();
        if self.config().pool.enabled && !principal.sees_every_owner() {
            let acting = principal.acting_owner().unwrap_or_default();
            match &owner_id {
                Some(named) if named != acting => return Ok(None),
                _ => owner_id = Some(acting.to_owned()),
            }
        }
        Ok(Some(SandboxFilter {
            state,
            owner_id,
            provider: query.provider.clone(),
            tenant_id: principal.visible_tenant().map(str::to_owned),
            ..SandboxFilter::default()
        }))
    }

    /// `DELETE /sandboxes/{id}`: idempotent; destroying an ended sandbox answers the same,
    /// without an event. A sandbox still being created cannot be destroyed yet (409).
    pub async fn destroy_sandbox(
        &self,
        principal: &Principal,
        id: &SandboxId,
    ) -> Result<(), Error> {
        self.authorize(principal, Action::Destroy)?;
        let sandbox = self.find_sandbox(principal, id).await?;
        if sandbox.state == SandboxState::Creating {
            return Err(sandbox.not_running_error());
        }
        self.detached(move |plane| async move {
            plane
                .destroy(&sandbox, StateReason::DestroyedByRequest)
                .await
                .map(drop)
        })
        .await
    }

    /// Runs `work` in a task of its own and waits for it: a caller that goes away (client
    /// disconnect, handler timeout) cannot cut a runtime change off from its store write.
    pub(crate) async fn detached<T, F, Fut>(&self, work: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(ControlPlane) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>> + Send + 'static,
    {
        match tokio::spawn(work(self.clone())).await {
            Ok(result) => result,
            Err(joined) => Err(Error::internal("finishing an operation", joined)),
        }
    }

    /// The mirror image of spawn: removes the runtime, then ends the record as `destroyed` with
    /// `reason` and publishes `sandbox.destroyed`. A provider disabled for new spawns still
    /// destroys what it made. A failed removal changes nothing; a record that cannot be ended
    /// after its runtime is gone is ended in the background once the store answers. True when
    /// this call ended the sandbox (another may have been first).
    pub(crate) async fn destroy(
        &self,
        sandbox: &Sandbox,
        reason: StateReason,
    ) -> Result<bool, Error> {
        if sandbox.state.has_ended() {
            return Ok(false);
        }
        // Fenced before anything changes: a lease another worker holds is a 409 that leaves
        // provider, store and lease as they were.
        self.hold_lease(sandbox).await?;
        let provider = self
            .providers()
            .for_cleanup(&sandbox.provider)
            .ok_or_else(|| Error::ProviderUnavailable {
                provider: sandbox.provider.clone(),
                message: "provider is not configured on this server".to_owned(),
            })?;
        if let Err(err) = provider.destroy(&sandbox.id).await {
            return Err(self.provider_failure(Some(&sandbox.id), provider.name(), "destroy", err));
        }
        match self.end_destroyed(&sandbox.id, reason).await {
            Ok(ended) => Ok(ended),
            Err(err) => {
                tracing::warn!(sandbox_id = %sandbox.id, error = %err, "the runtime is gone but the record could not be ended; retrying in the background");
                let id = sandbox.id.clone();
                self.retry_in_background(format!("end-destroyed:{id}"), move |plane| {
                    let id = id.clone();
                    async move { plane.end_destroyed(&id, reason).await.is_ok() }
                });
                Err(err)
            }
        }
    }

    /// Makes sure this worker holds `sandbox`'s lease for the change about to happen; 409
    /// `lease_conflict` when another worker holds it unexpired. A lease already ours with at
    /// least half its TTL left needs no write: nobody else can take it before it lapses, and
    /// the heartbeat renews it meanwhile. Otherwise it is acquired (one write).
    async fn hold_lease(&self, sandbox: &Sandbox) -> Result<(), Error> {
        let now = self.clock().now();
        let ttl = self.config().worker.lease_ttl.as_std();
        let held = &self.inner.held_leases;
        if held.held_past(sandbox.id.as_str(), add_duration(now, ttl / 2)) {
            return Ok(());
        }
        if let Some(lease) = self.store().get_lease(sandbox.id.as_str()).await? {
            let ours = lease.holder_id == self.worker_id();
            if !ours && lease.active_at(now) {
                return Err(lease_conflict(sandbox, lease));
            }
            if ours && lease.expires_at > add_duration(now, ttl / 2) {
                return Ok(());
            }
        }
        let acquired = self
            .store()
            .acquire_lease(sandbox.id.as_str(), self.worker_id(), ttl, now)
            .await?;
        match acquired {
            LeaseAcquire::Acquired(lease) => {
                held.record(sandbox.id.as_str(), lease.expires_at);
                Ok(())
            }
            LeaseAcquire::Held(lease) => Err(lease_conflict(sandbox, lease)),
        }
    }

    /// 409 `lease_conflict` when another worker holds `sandbox`'s lease unexpired (a read: the
    /// runtime operations that do not end the sandbox need no lease of their own).
    pub(crate) async fn check_not_fenced(&self, sandbox: &Sandbox) -> Result<(), Error> {
        if self
            .inner
            .held_leases
            .held_past(sandbox.id.as_str(), self.clock().now())
        {
            return Ok(());
        }
        match self.store().get_lease(sandbox.id.as_str()).await? {
            Some(lease)
                if lease.holder_id != self.worker_id() && lease.active_at(self.clock().now()) =>
            {
                Err(lease_conflict(sandbox, lease))
            }
            _ => Ok(()),
        }
    }

    /// Ends the record as `destroyed` and publishes `sandbox.destroyed`; true when this call
    /// ended it.
    async fn end_destroyed(&self, id: &SandboxId, reason: StateReason) -> Result<bool, Error> {
        let ended = self
            .store()
            .end_sandbox(
                id,
                EndedState::Destroyed,
                &Ending::because(reason),
                self.clock().now(),
            )
            .await?;
        let Some(destroyed) = ended else {
            return Ok(false);
        };
        self.inner.held_leases.forget(destroyed.id.as_str());
        self.inner.exec_jobs.forget(&destroyed.id);
        self.spawn_queue().capacity_changed();
        self.built_image_released(&destroyed.image);
        self.events().publish_in(
            &destroyed.tenant_id,
            Some(&destroyed.id),
            EventPayload::SandboxDestroyed(sandbox_event_data(&destroyed)),
        );
        tracing::info!(sandbox_id = %destroyed.id, tenant_id = %destroyed.tenant_id, reason = reason.as_str(), "sandbox destroyed");
        Ok(true)
    }

    /// `POST /sandboxes/{id}/extend`: `expires_at = now + ttl`, within the owner's effective max
    /// TTL from creation.
    pub async fn extend_sandbox(
        &self,
        principal: &Principal,
        id: &SandboxId,
        request: ExtendRequest,
    ) -> Result<Sandbox, Error> {
        self.authorize(principal, Action::Extend)?;
        check_ttl_positive(request.ttl)?;
        let sandbox = self.running_sandbox(principal, id).await?;
        let ttl = request.ttl.as_std();
        let now = self.clock().now();
        let limits = self.effective_limits(sandbox.owner_id.as_ref()).await?;
        check_ttl(limits.max_ttl, sandbox.lifetime_if_extended(now, ttl))
            .inspect_err(|err| self.publish_limit(err, sandbox.owner_id.as_ref()))?;
        match self
            .store()
            .set_sandbox_expiry(&sandbox.id, add_duration(now, ttl))
            .await?
        {
            Some(extended) => Ok(extended),
            None => Err(self.ended_meanwhile(&sandbox).await),
        }
    }

    /// The 409 for a sandbox that left `running` while an operation on it was under way: what
    /// its record says now, so the refusal says why it ended.
    pub(crate) async fn ended_meanwhile(&self, sandbox: &Sandbox) -> Error {
        match self.store().get_sandbox(&sandbox.id).await {
            Ok(Some(now)) if now.state != SandboxState::Running => now.not_running_error(),
            // Gone or unreadable: it has ended, how is not known here.
            _ => Sandbox {
                state: SandboxState::Destroyed,
                ..sandbox.clone()
            }
            .not_running_error(),
        }
    }

    /// `DELETE /sandboxes`: destroys the expired sandboxes the caller can see (reason
    /// `pruned`); returns how many were destroyed.
    pub async fn prune_expired(&self, principal: &Principal) -> Result<u64, Error> {
        self.authorize(principal, Action::Prune)?;
        let principal = principal.clone();
        self.detached(move |plane| async move {
            plane.destroy_expired(&principal, StateReason::Pruned).await
        })
        .await
    }

    /// Destroys the expired sandboxes `principal` can see, with `reason`.
    pub(crate) async fn destroy_expired(
        &self,
        principal: &Principal,
        reason: StateReason,
    ) -> Result<u64, Error> {
        let now = self.clock().now();
        let expired = self.store().list_expired_sandboxes(now).await?;
        let mut destroyed = 0;
        for sandbox in expired
            .iter()
            .filter(|s| principal.can_see_tenant(&s.tenant_id))
        {
            match self.destroy(sandbox, reason).await {
                Ok(true) => destroyed += 1,
                Ok(false) => {}
                Err(err) if err.kind() == svc_core::ErrorKind::LeaseConflict => {
                    // Another worker's: it reaps its own (or its lease lapses and we may).
                    tracing::debug!(sandbox_id = %sandbox.id, error = %err, "an expired sandbox is leased by another worker");
                }
                Err(err) => {
                    tracing::warn!(sandbox_id = %sandbox.id, tenant_id = %sandbox.tenant_id, error = %err, "destroying an expired sandbox failed");
                }
            }
        }
        Ok(destroyed)
    }
}

fn lease_conflict(sandbox: &Sandbox, lease: Lease) -> Error {
    Error::LeaseHeld {
        resource: svc_core::error::Resource::Sandbox,
        id: sandbox.id.to_string(),
        holder: lease.holder_id,
    }
}
