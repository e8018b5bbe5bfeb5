//! The spawn pipeline, one named step at a time (ARCHITECTURE, "The spawn pipeline"):
//!
//! authorize → resolve → admit and record → provider spawn (with a deadline) → mark running →
//! publish.
//!
//! Every check that can answer 400 happens in resolve, before anything is written. Admission and
//! the record are ONE store operation (the capacity rule lives in the store contract). From
//! admission on, the steps run in a task the HTTP handler does not own, under a [`SpawnUndo`] guard:
//! a client that disconnects, a handler that times out or a panic never leaves a runtime without
//! a record or a record without a runtime. A failure undoes the earlier steps in reverse
//! (decisions §4): the runtime is removed, the record ends as `error` with `spawn_failed`, and
//! `sandbox.error` and `operation.failed` are published.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use svc_core::access::Action;
use svc_core::clock::add_duration;
use svc_core::error::echo;
use svc_core::event::{EventPayload, SandboxEventData};
use svc_core::sandbox::{
    check_env, check_image, check_ttl_positive, size_or_default, Ending, ImageKind, Sandbox,
    SandboxState, SpawnRequest, StateReason,
};
use svc_core::template::{Template, TemplateSpawnRequest};
use svc_core::{Capability, Error, OwnerId, SandboxId};
use svc_provider::{
    Provider, ProviderError, RuntimeInfo, SpawnSpec, LABEL_INSTALLATION, LABEL_MANAGED,
    LABEL_OWNER, LABEL_SANDBOX_ID, LABEL_TENANT, LABEL_WORKER,
};
use svc_store::EndedState;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::admission::Denial;
use crate::provider_errors::classify;
use crate::queue::Ticket;
use crate::{ControlPlane, Principal};
use svc_core::tenant::PolicyResource;

/// A spawn with every default applied and every field validated.
pub(crate) struct SpawnPlan {
    pub(crate) placement: Placement,
    provider_name: String,
    image: String,
    memory_mb: u32,
    vcpus: u32,
    pub(crate) ttl: Duration,
    metadata: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
    network: Option<String>,
    pub(crate) owner: String,
    tenant: String,
    template: Option<String>,
    egress: svc_core::egress::Egress,
}

/// Where a spawn would run (decisions §11): here, or only on other workers, which this build
/// cannot ask to spawn (remote worker RPC is gated), so admission refuses with `reason`.
pub(crate) enum Placement {
    /// This worker runs the provider.
    Local(Arc<dyn Provider>),
    /// Only other workers do.
    Elsewhere {
        /// The provider name.
        provider: String,
        /// `remote_worker_rpc_unavailable` or `no_eligible_worker`.
        reason: svc_core::error::LimitReason,
        /// What to tell the caller.
        message: String,
    },
}

impl Placement {
    fn provider_name(&self) -> &str {
        match self {
            Placement::Local(provider) => provider.name(),
            Placement::Elsewhere { provider, .. } => provider,
        }
    }
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

/// A failed step: the service error and whether the provider was at fault.
pub(crate) struct StepFailure {
    pub(crate) error: Error,
    provider_at_fault: bool,
}

impl ControlPlane {
    /// `POST /sandboxes`.
    pub async fn spawn_sandbox(
        &self,
        principal: &Principal,
        request: SpawnRequest,
    ) -> Result<Sandbox, Error> {
        self.authorize(principal, Action::Spawn)?;
        let plan = self.resolve(principal, request, None).await?;
        if let Placement::Local(provider) = &plan.placement {
            self.ensure_healthy(provider).await?;
        }
        self.admit_and_create(plan).await
    }

    /// `POST /templates/{name}/spawn`.
    pub async fn spawn_from_template(
        &self,
        principal: &Principal,
        name: &str,
        request: TemplateSpawnRequest,
    ) -> Result<Sandbox, Error> {
        self.authorize(principal, Action::Spawn)?;
        let template = self.visible_template(principal, name).await?;
        let spawn = SpawnRequest {
            ttl: request.ttl,
            provider: request.provider,
            env: request.env,
            metadata: request.metadata,
            ..SpawnRequest::default()
        };
        let plan = self.resolve(principal, spawn, Some(template)).await?;
        if let Placement::Local(provider) = &plan.placement {
            self.ensure_healthy(provider).await?;
        }
        self.admit_and_create(plan).await
    }

    /// Admission (waiting in the spawn queue when it is on and capacity is full), then the
    /// runtime. The handler may be dropped at any await (client gone, timeout): while queued,
    /// that leaves the queue at once; from the admitting write on, the work runs in a task the
    /// handler does not own (a write handed to the store completes even when its caller is
    /// gone), and a panic inside surfaces as an internal error with the undo started.
    async fn admit_and_create(&self, plan: SpawnPlan) -> Result<Sandbox, Error> {
        let provider = match &plan.placement {
            Placement::Local(provider) => Arc::clone(provider),
            Placement::Elsewhere { .. } => return Err(self.refuse_elsewhere(&plan).await?),
        };
        let plan = Arc::new(plan);
        let mut queued: Option<Ticket> = None;
        loop {
            let epoch = self.spawn_queue().epoch();
            let (admitted_tx, mut admitted_rx) = oneshot::channel();
            let attempt = {
                let plan = Arc::clone(&plan);
                let provider = Arc::clone(&provider);
                self.detached(move |plane| async move {
                    let record = match plane.admit_and_record(&plan).await? {
                        Ok(record) => record,
                        Err(admission) => return Ok(Err(admission)),
                    };
                    let _ = admitted_tx.send(());
                    let warm = plane.take_warm(&plan);
                    plane.create_runtime(provider, record, warm).await.map(Ok)
                })
            };
            tokio::pin!(attempt);
            // A waiter leaves the queue as soon as it is admitted, not when its runtime is
            // ready: the baton passes on while the runtime is being made.
            let outcome = tokio::select! {
                outcome = &mut attempt => outcome,
                Ok(()) = &mut admitted_rx => {
                    self.leave_queue(queued.take(), &plan.owner);
                    attempt.await
                }
            };
            if admitted_rx.try_recv().is_ok() {
                self.leave_queue(queued.take(), &plan.owner);
            }
            let denial = match outcome? {
                Ok(sandbox) => return Ok(sandbox),
                Err(denial) => denial,
            };
            queued = Some(
                self.wait_for_capacity(&plan, denial, queued.take(), epoch)
                    .await?,
            );
        }
    }

    /// Step "resolve": the template, the defaults, and every validation that can answer 400.
    /// Writes nothing.
    pub(crate) async fn resolve(
        &self,
        principal: &Principal,
        request: SpawnRequest,
        template: Option<Template>,
    ) -> Result<SpawnPlan, Error> {
        let defaults = &self.config().defaults;
        // The request's own fields first: no I/O needed to refuse them.
        let owner = resolve_owner(principal, request.owner_id.as_deref())?;
        let tenant = self
            .spawn_tenant(principal, request.tenant_id.as_deref())
            .await?;
        if let Some(image) = &request.image {
            check_image(image)?;
        }
        let env = request.env.unwrap_or_default();
        check_env(&env)?;
        if let Some(ttl) = request.ttl {
            check_ttl_positive(ttl)?;
        }
        let template = match (template, &request.template) {
            (Some(template), _) => Some(template),
            (None, Some(name)) => Some(
                self.find_visible_template(principal, name)
                    .await?
                    .ok_or_else(|| {
                        Error::invalid(
                            "template",
                            format!("template {} does not exist", echo(name)),
                        )
                    })?,
            ),
            (None, None) => None,
        };
        let request_image = request.image.clone();
        let image = request
            .image
            .or_else(|| template.as_ref().map(|t| t.image.clone()))
            .unwrap_or_else(|| defaults.image.clone());
        check_image(&image)?;
        let default_memory = template
            .as_ref()
            .map_or(u32::try_from(defaults.memory_mb).unwrap_or(u32::MAX), |t| {
                t.memory_mb
            });
        let memory_mb = size_or_default("memory_mb", request.memory_mb, default_memory)?;
        let default_vcpus = template.as_ref().map_or(defaults.vcpus, |t| t.vcpus);
        let vcpus = size_or_default("vcpus", request.vcpus, default_vcpus)?;
        let ttl = request
            .ttl
            .or_else(|| template.as_ref().map(|t| t.ttl))
            .unwrap_or(defaults.ttl);
        check_ttl_positive(ttl)?;
        let provider_name = request
            .provider
            .or_else(|| template.as_ref().map(|t| t.provider.clone()));
        // Pool mode: every sandbox is a workspace in a pool VM, of the pool's provider and image.
        let (provider_name, image) = match self.providers().pool() {
            Some(pool) => {
                if let Some(named) = provider_name.as_deref().filter(|p| !p.is_empty()) {
                    if named != pool.provider_name() {
                        return Err(Error::invalid(
                            "provider",
                            format!(
                                "pool mode spawns every sandbox on provider {} (pool.provider), not {}",
                                pool.provider_name(),
                                echo(named)
                            ),
                        ));
                    }
                }
                if request_image.as_deref().is_some_and(|i| i != pool.image()) {
                    return Err(Error::invalid(
                        "image",
                        format!(
                            "pool mode runs every sandbox in the pool VMs' image {} (pool.image)",
                            echo(pool.image())
                        ),
                    ));
                }
                (
                    Some(pool.provider_name().to_owned()),
                    pool.image().to_owned(),
                )
            }
            None => (provider_name, image),
        };
        let image_kind = check_image(&image)?;
        let placement = self.place(provider_name.as_deref()).await?;
        if let Placement::Local(provider) = &placement {
            check_image_for(&image, image_kind, provider.as_ref())?;
        }
        let local = match &placement {
            Placement::Local(provider) => Some(provider.as_ref()),
            Placement::Elsewhere { .. } => None,
        };
        check_sizes(defaults, memory_mb, vcpus, local)?;
        check_network(self.config(), request.network.as_deref(), local)?;
        let network = request
            .network
            .clone()
            .or_else(|| local.map(|provider| provider.default_network()));
        let egress = request
            .egress
            .or_else(|| template.as_ref().map(|t| t.egress.clone()))
            .unwrap_or_default();
        egress.check()?;
        // Every network value the spawn names is matched: the network, the egress mode and
        // each allowed destination as written (decisions §18).
        let mut values = vec![
            (PolicyResource::Image, Some(image.as_str())),
            (PolicyResource::Provider, Some(placement.provider_name())),
            (PolicyResource::Network, network.as_deref()),
            (PolicyResource::Network, Some(egress.mode.as_str())),
        ];
        values.extend(
            egress
                .allow
                .iter()
                .map(|entry| (PolicyResource::Network, Some(entry.as_str()))),
        );
        self.check_policies(principal, &tenant, &values, placement.provider_name())
            .await?;
        if let Placement::Local(provider) = &placement {
            check_egress_for(&egress, provider.as_ref())?;
        }
        crate::egress_reach::check_allowlist(
            &egress,
            self.config().providers.docker.egress_allow_host,
        )
        .await?;
        let mut metadata = template
            .as_ref()
            .map(|t| t.metadata.clone())
            .unwrap_or_default();
        metadata.extend(request.metadata.unwrap_or_default());
        Ok(SpawnPlan {
            provider_name: placement.provider_name().to_owned(),
            placement,
            image,
            memory_mb,
            vcpus,
            ttl: ttl.as_std(),
            metadata,
            env,
            network: request.network,
            owner,
            tenant,
            template: template.map(|t| t.name),
            egress,
        })
    }

    /// The provider for a spawn: named, else the default; unknown is 400.
    pub(crate) fn spawn_provider(&self, name: Option<&str>) -> Result<Arc<dyn Provider>, Error> {
        let registry = self.providers();
        let name = name.unwrap_or(registry.default_name());
        registry
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownProvider {
                name: name.to_owned(),
                enabled: registry.names(),
            })
    }

    /// 503 with its health error when `provider` is unhealthy.
    async fn ensure_healthy(&self, provider: &Arc<dyn Provider>) -> Result<(), Error> {
        let registry = self.providers();
        let name = provider.name();
        let mut health = registry
            .health_of(provider, crate::providers::HEALTH_MAX_AGE)
            .await;
        if !health.healthy {
            // A provider may have recovered since the cached check.
            health = registry.health_of(provider, Duration::ZERO).await;
        }
        if !health.healthy {
            return Err(Error::ProviderUnavailable {
                provider: name.to_owned(),
                message: health.error.unwrap_or_else(|| "unhealthy".to_owned()),
            });
        }
        Ok(())
    }

    /// The sandbox `existing`, if a caller spawning in `tenant` may hear of it: the owner IDs
    /// of pool mode are shared across tenants, their sandboxes are not (decisions §30).
    async fn named_to(&self, tenant: &str, existing: Option<String>) -> Option<String> {
        let id = SandboxId::parse(existing.as_deref()?).ok()?;
        let sandbox = self.store().get_sandbox(&id).await.ok()??;
        if sandbox.tenant_id == tenant {
            existing
        } else {
            None
        }
    }

    /// Step "admit and record": the owner's quota read, capacity counted, the decision made
    /// and the `creating` record inserted, in one store operation. `Err` inside is the denial.
    async fn admit_and_record(&self, plan: &SpawnPlan) -> Result<Result<Sandbox, Denial>, Error> {
        let sandbox = self.new_record(plan);
        // Pool mode: a seat first, so a full pool refuses before anything is written.
        let pool = self.providers().pool();
        if let Some(pool) = pool {
            match pool.reserve(&plan.owner, &sandbox.id).await {
                Ok(()) => {}
                Err(error @ Error::PoolFull { .. }) => {
                    return Ok(Err(Denial::PoolFull {
                        error,
                        queues: pool.queues(),
                    }))
                }
                Err(Error::OwnerHasSandbox { owner, existing }) => {
                    return Err(Error::OwnerHasSandbox {
                        existing: self.named_to(&plan.tenant, existing).await,
                        owner,
                    })
                }
                Err(error) => return Err(error),
            }
        }
        let admission = self
            .store()
            .admit_sandbox(
                &sandbox,
                plan.ttl,
                self.global_limits(),
                self.config().worker.lease_ttl.as_std(),
            )
            .await;
        let admission = match admission {
            Ok(admission) if admission.allowed => admission,
            other => {
                if let Some(pool) = pool {
                    pool.cancel(&sandbox.id);
                }
                let admission = other?;
                return Ok(Err(Denial::Store(admission)));
            }
        };
        Ok(if admission.allowed {
            self.inner.held_leases.record(
                sandbox.id.as_str(),
                add_duration(sandbox.created_at, self.config().worker.lease_ttl.as_std()),
            );
            Ok(sandbox)
        } else {
            Err(Denial::Store(admission))
        })
    }

    fn new_record(&self, plan: &SpawnPlan) -> Sandbox {
        let now = self.clock().now();
        let id = SandboxId::generate();
        Sandbox {
            preview_domain: format!("{id}.{}", self.config().server.preview_domain),
            id,
            state: SandboxState::Creating,
            provider: plan.provider_name.clone(),
            image: plan.image.clone(),
            memory_mb: plan.memory_mb,
            vcpus: plan.vcpus,
            created_at: now,
            expires_at: add_duration(now, plan.ttl),
            metadata: plan.metadata.clone(),
            worker_id: Some(self.worker_id().to_owned()),
            tenant_id: plan.tenant.clone(),
            owner_id: plan.owner.clone(),
            template: plan.template.clone(),
            network: plan.network.clone(),
            destroyed_at: None,
            state_reason: None,
            state_message: None,
            paused_at: None,
            paused_for: std::time::Duration::ZERO,
            egress: plan.egress.clone(),
            env: plan.env.clone(),
            exec_path: None,
        }
    }

    /// A ready warm runtime for `plan`, when a pool has one (`warm/`): a local spawn that
    /// names no network, of the spec of the template it names or of any pool.
    fn take_warm(&self, plan: &SpawnPlan) -> Option<SandboxId> {
        // Warm runtimes start with the provider's network and any egress.
        if plan.network.is_some()
            || plan.egress != svc_core::egress::Egress::default()
            || self.providers().pool().is_some()
        {
            return None;
        }
        let Placement::Local(provider) = &plan.placement else {
            return None;
        };
        let spec = crate::warm::WarmSpec {
            provider: provider.name().to_owned(),
            image: plan.image.clone(),
            memory_mb: plan.memory_mb,
            vcpus: plan.vcpus,
        };
        self.inner.warm.take(plan.template.as_deref(), &spec)
    }

    /// Steps "provider spawn" (or claiming the `warm` runtime), "mark running" and "publish",
    /// run in a task of their own.
    async fn create_runtime(
        self,
        provider: Arc<dyn Provider>,
        record: Sandbox,
        warm: Option<SandboxId>,
    ) -> Result<Sandbox, Error> {
        let undo = SpawnUndo {
            plane: self.clone(),
            sandbox: Some(record.clone()),
            provider: Arc::clone(&provider),
        };
        let claimed = match warm {
            Some(warm) => self.claim_warm(&provider, &warm, &record.id).await,
            None => false,
        };
        let image_pulled = if claimed {
            false
        } else {
            let mut spec = spawn_spec(&record, &self.inner.installation_id);
            spec.progress = self.pull_progress(&record);
            match self.spawn_runtime(&provider, spec).await {
                Ok(runtime) => runtime.image_pulled,
                Err(failure) => return Err(undo.run(failure).await),
            }
        };
        let exec_path = provider.exec_path(&record.id).await;
        let running = match self
            .store()
            .mark_sandbox_running(&record.id, exec_path.as_deref())
            .await
        {
            Ok(Some(running)) => running,
            Ok(None) => {
                let error = Error::internal(
                    "marking a spawned sandbox running",
                    std::io::Error::other("the record left the creating state during the spawn"),
                );
                return Err(undo.run(StepFailure::ours(error)).await);
            }
            Err(err) => return Err(undo.run(StepFailure::ours(err.into())).await),
        };
        undo.disarm();
        let data = sandbox_event_data(&running);
        self.events().publish_in(
            &running.tenant_id,
            Some(&running.id),
            EventPayload::SandboxCreated(SandboxEventData {
                image_pulled,
                ..data.clone()
            }),
        );
        self.events().publish_in(
            &running.tenant_id,
            Some(&running.id),
            EventPayload::SandboxRunning(data),
        );
        tracing::info!(sandbox_id = %running.id, tenant_id = %running.tenant_id, provider = %running.provider, image = %running.image, warm = claimed, "sandbox spawned");
        Ok(running)
    }

    /// Hands the warm runtime `warm` to sandbox `id`. False when the provider could not (the
    /// runtime died, say): the runtime is removed and the spawn starts cold.
    async fn claim_warm(
        &self,
        provider: &Arc<dyn Provider>,
        warm: &SandboxId,
        id: &SandboxId,
    ) -> bool {
        match provider.claim(warm, id).await {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(sandbox_id = %id, runtime = %warm, error = %err, "claiming a warm runtime failed; spawning cold");
                if provider.destroy(warm).await.is_err() {
                    self.retry_runtime_removal(warm, provider);
                }
                false
            }
        }
    }

    /// Asks the provider for the runtime, within `defaults.spawn_timeout`. The provider call
    /// runs as its own task: past the deadline it keeps going, and whatever it creates late is
    /// destroyed when it finishes.
    pub(crate) async fn spawn_runtime(
        &self,
        provider: &Arc<dyn Provider>,
        spec: SpawnSpec,
    ) -> Result<RuntimeInfo, StepFailure> {
        let deadline = self.config().defaults.spawn_timeout;
        let id = spec.id.clone();
        let mut call = {
            let provider = Arc::clone(provider);
            tokio::spawn(async move { provider.spawn(&spec).await })
        };
        match tokio::time::timeout(deadline.as_std(), &mut call).await {
            Ok(Ok(Ok(runtime))) => Ok(runtime),
            Ok(Ok(Err(err))) => Err(StepFailure::provider(classify(
                provider.name(),
                "spawn",
                err,
            ))),
            Ok(Err(joined)) => {
                // The panic's payload may hold internal detail: it goes to the log only.
                tracing::error!(sandbox_id = %id, error = %joined, "the provider's spawn panicked");
                Err(StepFailure::provider(Error::provider(
                    provider.name(),
                    "spawn",
                    ProviderError::failed("the provider's spawn task panicked"),
                )))
            }
            Err(_) => {
                // Whatever the call still creates is removed once it returns.
                self.remove_runtime_later(id, Arc::clone(provider), call);
                Err(StepFailure::provider(Error::provider(
                    provider.name(),
                    "spawn",
                    ProviderError::failed(format!(
                        "the runtime was not ready within {deadline} (defaults.spawn_timeout)"
                    )),
                )))
            }
        }
    }

    /// Undoes a spawn whose record exists, in reverse: removes the runtime, ends the record as
    /// `error` (`spawn_failed`), publishes `sandbox.error` and the failure. A runtime that
    /// cannot be removed now (provider unreachable), or a record that cannot be ended now
    /// (store unreachable), is retried in the background; the record is ended first either
    /// way, so a spawn reported failed never comes back to life, and the start-up sweep
    /// (`recover.rs`) removes what a restart in between left behind.
    async fn undo_spawn(
        &self,
        sandbox: &Sandbox,
        provider: &Arc<dyn Provider>,
        failure: &StepFailure,
    ) {
        let removal = provider.destroy(&sandbox.id).await;
        let mut message = failure.error.public_message();
        if let Err(err) = &removal {
            tracing::warn!(sandbox_id = %sandbox.id, error = %err, "rolling back a spawn: the runtime could not be removed yet; retrying in the background");
            message.push_str("; removing its runtime had to be retried");
        }
        if !self.end_failed_spawn(sandbox, &message).await {
            let (record, message) = (sandbox.clone(), message.clone());
            self.retry_in_background(format!("end-failed:{}", sandbox.id), move |plane| {
                let (record, message) = (record.clone(), message.clone());
                async move { plane.end_failed_spawn(&record, &message).await }
            });
        }
        self.publish_failure(
            Some(&sandbox.id),
            "spawn",
            &sandbox.provider,
            &failure.error,
            failure.provider_at_fault,
        );
        if removal.is_err() {
            self.retry_runtime_removal(&sandbox.id, provider);
        }
        tracing::warn!(sandbox_id = %sandbox.id, tenant_id = %sandbox.tenant_id, error = %failure.error, "spawn failed and was rolled back");
    }

    /// Removes a runtime in the background until it is gone.
    pub(crate) fn retry_runtime_removal(&self, id: &SandboxId, provider: &Arc<dyn Provider>) {
        let (id, provider) = (id.clone(), Arc::clone(provider));
        self.retry_in_background(format!("remove-runtime:{id}"), move |_| {
            let (id, provider) = (id.clone(), Arc::clone(&provider));
            async move { provider.destroy(&id).await.is_ok() }
        });
    }

    /// Removes whatever a provider call still in flight creates: waits for `call` to return,
    /// then removes the runtime (retrying in the background when that fails).
    fn remove_runtime_later(
        &self,
        id: SandboxId,
        provider: Arc<dyn Provider>,
        call: JoinHandle<Result<RuntimeInfo, ProviderError>>,
    ) {
        let plane = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = plane.shutdown_token().cancelled() => return,
                _ = call => {}
            }
            if provider.destroy(&id).await.is_err() {
                plane.retry_runtime_removal(&id, &provider);
            }
        });
    }

    /// Ends the record of a failed spawn as `error` and publishes `sandbox.error`, once. False
    /// when the store could not be written.
    pub(crate) async fn end_failed_spawn(&self, sandbox: &Sandbox, message: &str) -> bool {
        let ending = Ending {
            reason: StateReason::SpawnFailed,
            message: message.to_owned(),
        };
        match self
            .store()
            .end_sandbox(&sandbox.id, EndedState::Error, &ending, self.clock().now())
            .await
        {
            Ok(Some(ended)) => {
                self.inner.held_leases.forget(ended.id.as_str());
                self.inner.exec_jobs.forget(&ended.id);
                self.spawn_queue().capacity_changed();
                let mut data = sandbox_event_data(&ended);
                data.error = Some(message.to_owned());
                self.events().publish_in(
                    &ended.tenant_id,
                    Some(&ended.id),
                    EventPayload::SandboxError(data),
                );
                true
            }
            Ok(None) => true,
            Err(err) => {
                tracing::error!(sandbox_id = %sandbox.id, error = %err, "rolling back a spawn: the record could not be marked error; retrying in the background");
                false
            }
        }
    }
}

impl StepFailure {
    fn provider(error: Error) -> Self {
        let provider_at_fault = matches!(error, Error::Provider { .. });
        StepFailure {
            error,
            provider_at_fault,
        }
    }

    fn ours(error: Error) -> Self {
        StepFailure {
            error,
            provider_at_fault: false,
        }
    }
}

/// Undoes a spawn unless disarmed. Dropped while armed (the task panicked or was aborted), it
/// starts the undo on the runtime by itself.
struct SpawnUndo {
    plane: ControlPlane,
    sandbox: Option<Sandbox>,
    provider: Arc<dyn Provider>,
}

impl SpawnUndo {
    async fn run(mut self, failure: StepFailure) -> Error {
        if let Some(sandbox) = self.sandbox.take() {
            self.plane
                .undo_spawn(&sandbox, &self.provider, &failure)
                .await;
        }
        failure.error
    }

    fn disarm(mut self) {
        self.sandbox = None;
    }
}

impl Drop for SpawnUndo {
    fn drop(&mut self) {
        let Some(sandbox) = self.sandbox.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(sandbox_id = %sandbox.id, "a spawn ended without its undo and no runtime is left to run it; recovery will at the next start");
            return;
        };
        let plane = self.plane.clone();
        let provider = Arc::clone(&self.provider);
        runtime.spawn(async move {
            let failure = StepFailure::ours(Error::internal(
                "spawning a sandbox",
                std::io::Error::other("the spawn task ended before it finished"),
            ));
            plane.undo_spawn(&sandbox, &provider, &failure).await;
        });
    }
}

/// A host-path image is only for providers that build root filesystems from one (microVMs).
pub(crate) fn check_image_for(
    image: &str,
    kind: ImageKind,
    provider: &dyn Provider,
) -> Result<(), Error> {
    if kind == ImageKind::HostPath && !provider.capabilities().contains(&Capability::Microvm) {
        return Err(Error::invalid(
            "image",
            format!(
                "{} is a host path, which only microVM providers accept; provider {} needs an image reference",
                echo(image),
                provider.name()
            ),
        ));
    }
    Ok(())
}

/// Egress other than `all` needs a provider that enforces it (capability `egress`).
pub(crate) fn check_egress_for(
    egress: &svc_core::egress::Egress,
    provider: &dyn Provider,
) -> Result<(), Error> {
    if egress.mode != svc_core::egress::EgressMode::All
        && !provider.capabilities().contains(&Capability::Egress)
    {
        return Err(Error::invalid(
            "egress",
            format!(
                "provider {} cannot enforce egress mode {} (no capability egress); use all",
                provider.name(),
                egress.mode.as_str()
            ),
        ));
    }
    Ok(())
}

/// What the provider is asked to create for `sandbox`.
fn spawn_spec(sandbox: &Sandbox, installation: &str) -> SpawnSpec {
    let worker = sandbox.worker_id.clone().unwrap_or_default();
    SpawnSpec {
        id: sandbox.id.clone(),
        image: sandbox.image.clone(),
        memory_mb: sandbox.memory_mb,
        vcpus: sandbox.vcpus,
        env: sandbox.env.clone(),
        network: sandbox.network.clone(),
        labels: BTreeMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_SANDBOX_ID.to_owned(), sandbox.id.to_string()),
            (LABEL_OWNER.to_owned(), sandbox.owner_id.clone()),
            (LABEL_TENANT.to_owned(), sandbox.tenant_id.clone()),
            (LABEL_WORKER.to_owned(), worker),
            (LABEL_INSTALLATION.to_owned(), installation.to_owned()),
        ]),
        multi_user: false,
        egress: sandbox.egress.clone(),
        progress: Default::default(),
    }
}

/// The sizes a spawn or template may ask for (decisions §30): at least the provider's minimum
/// memory, at most `defaults.max_memory_mb` and `defaults.max_vcpus`, and no more vCPUs than
/// this host has when it runs the provider; 400 naming the field and the limit.
pub(crate) fn check_sizes(
    defaults: &svc_core::config::DefaultsConfig,
    memory_mb: u32,
    vcpus: u32,
    provider: Option<&dyn Provider>,
) -> Result<(), Error> {
    if let Some(provider) = provider {
        let least = provider.min_memory_mb();
        if memory_mb < least {
            return Err(Error::invalid(
                "memory_mb",
                format!(
                    "{memory_mb} MiB is below provider {}'s minimum of {least} MiB",
                    provider.name()
                ),
            ));
        }
    }
    if u64::from(memory_mb) > defaults.max_memory_mb {
        return Err(Error::invalid(
            "memory_mb",
            format!(
                "{memory_mb} MiB is above the limit of {} MiB (defaults.max_memory_mb)",
                defaults.max_memory_mb
            ),
        ));
    }
    if vcpus > defaults.max_vcpus {
        return Err(Error::invalid(
            "vcpus",
            format!(
                "{vcpus} is above the limit of {} (defaults.max_vcpus)",
                defaults.max_vcpus
            ),
        ));
    }
    let host = host_cpus();
    if provider.is_some() && vcpus > host {
        return Err(Error::invalid(
            "vcpus",
            format!("{vcpus} is more than this host's {host} CPUs"),
        ));
    }
    Ok(())
}

/// The CPUs this process may use, read once.
fn host_cpus() -> u32 {
    static CPUS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
    })
}

/// A spawn's `network` (decisions §30): the provider's own network, or one the operator listed
/// in `providers.docker.allowed_networks`; `host`, `container:<...>` and anything else are 400.
fn check_network(
    config: &svc_core::config::Config,
    network: Option<&str>,
    provider: Option<&dyn Provider>,
) -> Result<(), Error> {
    let Some(named) = network else {
        return Ok(());
    };
    let own = provider.map_or_else(
        || config.providers.docker.network_mode.clone(),
        |p| p.default_network(),
    );
    let listed = &config.providers.docker.allowed_networks;
    if named == own || listed.iter().any(|n| n == named) {
        return Ok(());
    }
    Err(Error::invalid(
        "network",
        format!(
            "network {} is not allowed: name the provider's network ({own}) or one listed in \
             providers.docker.allowed_networks",
            echo(named)
        ),
    ))
}

/// Owner: `X-User-ID` (already validated), else the body's `owner_id`, else the OIDC subject,
/// else none (decisions §5).
fn resolve_owner(principal: &Principal, body_owner: Option<&str>) -> Result<String, Error> {
    if let Some(owner) = &principal.owner {
        return Ok(owner.as_str().to_owned());
    }
    match body_owner {
        // An OIDC caller owns what it spawns, when its subject is a valid owner ID.
        None => Ok(principal
            .subject
            .as_deref()
            .and_then(|sub| OwnerId::parse(sub).ok())
            .map(|o| o.as_str().to_owned())
            .unwrap_or_default()),
        Some(owner) => {
            let owner =
                OwnerId::parse(owner).map_err(|e| Error::invalid("owner_id", e.to_string()))?;
            principal.check_may_act_as("owner_id", owner.as_str())?;
            Ok(owner.as_str().to_owned())
        }
    }
}
