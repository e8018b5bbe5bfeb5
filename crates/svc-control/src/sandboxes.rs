//! The sandbox lifecycle: the spawn pipeline and its mirror image, destroy, plus get, list,
//! extend and prune. Spawn runs, in order: resolve (template, defaults) → admission → provider
//! spawn → save → publish. A failure after the provider created the runtime undoes it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use svc_core::clock::add_duration;
use svc_core::error::Resource;
use svc_core::event::EventType;
use svc_core::sandbox::{
    check_image, check_ttl_positive, size_or_default, ExtendRequest, Sandbox, SandboxState,
    SpawnRequest,
};
use svc_core::template::{Template, TemplateSpawnRequest};
use svc_core::{Capability, Error, OwnerId, SandboxId};
use svc_provider::{
    Provider, SpawnSpec, LABEL_MANAGED, LABEL_OWNER, LABEL_SANDBOX_ID, LABEL_TENANT, LABEL_WORKER,
};
use svc_store::{SandboxFilter, StateFilter};

use crate::admission::check_ttl;
use crate::principal::DEFAULT_TENANT;
use crate::provider_errors::{failure_data, provider_error};
use crate::{ControlPlane, Principal};

/// `GET /sandboxes` query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSandboxes {
    /// `running`, `error`, `destroyed` or `all`; default: everything not destroyed.
    pub state: Option<String>,
    /// Exact owner.
    pub owner_id: Option<String>,
    /// Exact provider.
    pub provider: Option<String>,
}

/// A spawn with every default applied.
struct ResolvedSpawn {
    provider: Arc<dyn Provider>,
    image: String,
    memory_mb: u32,
    vcpus: u32,
    ttl: Duration,
    metadata: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
    network: Option<String>,
    owner: String,
    tenant: String,
    template: Option<String>,
}

/// The `data` of `sandbox.*` events (decisions §12).
fn sandbox_event_data(sandbox: &Sandbox, reason: Option<&str>) -> Map<String, Value> {
    let mut data = Map::new();
    data.insert("provider".into(), json!(sandbox.provider));
    data.insert("image".into(), json!(sandbox.image));
    data.insert("owner_id".into(), json!(sandbox.owner_id));
    data.insert("tenant_id".into(), json!(sandbox.tenant_id));
    data.insert("worker_id".into(), json!(sandbox.worker_id));
    if let Some(reason) = reason {
        data.insert("reason".into(), json!(reason));
    }
    data
}

impl ControlPlane {
    fn resolve_owner(principal: &Principal, body_owner: Option<&str>) -> Result<String, Error> {
        if let Some(owner) = &principal.owner {
            return Ok(owner.as_str().to_owned());
        }
        match body_owner {
            None => Ok(String::new()),
            Some(owner) => OwnerId::parse(owner)
                .map(|o| o.as_str().to_owned())
                .map_err(|e| Error::invalid("owner_id", e.to_string())),
        }
    }

    /// The provider for a spawn: named, else the default. Unknown is 400, unhealthy 503.
    async fn spawn_provider(&self, name: Option<&str>) -> Result<Arc<dyn Provider>, Error> {
        let registry = self.providers();
        let name = name.unwrap_or(registry.default_name());
        let provider = registry.get(name).ok_or_else(|| Error::UnknownProvider {
            name: name.to_owned(),
            enabled: registry.names(),
        })?;
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
        Ok(Arc::clone(provider))
    }

    async fn resolve_spawn(
        &self,
        principal: &Principal,
        request: SpawnRequest,
        template: Option<Template>,
    ) -> Result<ResolvedSpawn, Error> {
        let defaults = &self.config().defaults;
        let template = match (template, &request.template) {
            (Some(template), _) => Some(template),
            (None, Some(name)) => {
                Some(self.store().get_template(name).await?.ok_or_else(|| {
                    Error::invalid("template", format!("template {name:?} does not exist"))
                })?)
            }
            (None, None) => None,
        };
        let owner = Self::resolve_owner(principal, request.owner_id.as_deref())?;
        let tenant = match request.tenant_id.as_deref() {
            None => principal.tenant_id.clone(),
            Some(DEFAULT_TENANT) => DEFAULT_TENANT.to_owned(),
            Some(other) => {
                return Err(Error::invalid(
                    "tenant_id",
                    format!("tenant {other:?} does not exist"),
                ))
            }
        };
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
        let ttl = ttl.as_std();
        let provider_name = request
            .provider
            .or_else(|| template.as_ref().map(|t| t.provider.clone()));
        let provider = self.spawn_provider(provider_name.as_deref()).await?;
        let env = request.env.unwrap_or_default();
        svc_core::sandbox::check_env(&env)?;
        let mut metadata = template
            .as_ref()
            .map(|t| t.metadata.clone())
            .unwrap_or_default();
        metadata.extend(request.metadata.unwrap_or_default());
        Ok(ResolvedSpawn {
            provider,
            image,
            memory_mb,
            vcpus,
            ttl,
            metadata,
            env,
            network: request.network,
            owner,
            tenant,
            template: template.map(|t| t.name),
        })
    }

    /// `POST /sandboxes`.
    pub async fn spawn_sandbox(
        &self,
        principal: &Principal,
        request: SpawnRequest,
    ) -> Result<Sandbox, Error> {
        let resolved = self.resolve_spawn(principal, request, None).await?;
        self.run_spawn(resolved).await
    }

    /// `POST /templates/{name}/spawn`.
    pub async fn spawn_from_template(
        &self,
        principal: &Principal,
        name: &str,
        request: TemplateSpawnRequest,
    ) -> Result<Sandbox, Error> {
        let template = self.get_template(name).await?;
        let spawn = SpawnRequest {
            ttl: request.ttl,
            provider: request.provider,
            ..SpawnRequest::default()
        };
        let resolved = self.resolve_spawn(principal, spawn, Some(template)).await?;
        self.run_spawn(resolved).await
    }

    async fn run_spawn(&self, resolved: ResolvedSpawn) -> Result<Sandbox, Error> {
        let reservation = match self
            .inner
            .admission
            .admit(
                &self.config().defaults,
                self.store().as_ref(),
                resolved.ttl,
                &resolved.owner,
            )
            .await
        {
            Ok(reservation) => reservation,
            Err(err) => {
                if let Error::ResourceLimit { reason, .. } = &err {
                    let mut data = Map::new();
                    data.insert("reason".into(), json!(reason.as_str()));
                    data.insert("owner_id".into(), json!(resolved.owner));
                    self.events()
                        .publish(EventType::ResourceLimit, "", Some(data));
                }
                return Err(err);
            }
        };
        let now = self.clock().now();
        let id = SandboxId::generate();
        let sandbox = Sandbox {
            preview_domain: format!("{id}.{}", self.config().server.preview_domain),
            id,
            state: SandboxState::Running,
            provider: resolved.provider.name().to_owned(),
            image: resolved.image,
            memory_mb: resolved.memory_mb,
            vcpus: resolved.vcpus,
            created_at: now,
            expires_at: add_duration(now, resolved.ttl),
            metadata: resolved.metadata,
            worker_id: Some(self.worker_id().to_owned()),
            tenant_id: resolved.tenant,
            owner_id: resolved.owner,
            template: resolved.template,
            network: resolved.network,
            destroyed_at: None,
            env: resolved.env,
        };
        let spec = SpawnSpec {
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
                (LABEL_WORKER.to_owned(), self.worker_id().to_owned()),
            ]),
        };
        let provider = resolved.provider;
        let runtime = match provider.spawn(&spec).await {
            Ok(runtime) => runtime,
            Err(err) => {
                let err = provider_error(provider.name(), "spawn", err);
                self.publish_spawn_failure(&sandbox, &err, true);
                return Err(err);
            }
        };
        if let Err(err) = self.store().insert_sandbox(&sandbox).await {
            let err = Error::from(err);
            if let Err(undo) = provider.destroy(&sandbox.id).await {
                tracing::error!(sandbox_id = %sandbox.id, error = %undo, "rolling back a spawn left a runtime behind");
            }
            self.publish_spawn_failure(&sandbox, &err, false);
            return Err(err);
        }
        drop(reservation);
        let mut data = sandbox_event_data(&sandbox, None);
        if runtime.image_pulled {
            data.insert("image_pulled".into(), json!(true));
        }
        let id = sandbox.id.as_str();
        self.events()
            .publish(EventType::SandboxCreated, id, Some(data.clone()));
        self.events()
            .publish(EventType::SandboxRunning, id, Some(data));
        tracing::info!(sandbox_id = id, provider = %sandbox.provider, image = %sandbox.image, "sandbox spawned");
        Ok(sandbox)
    }

    fn publish_spawn_failure(&self, sandbox: &Sandbox, err: &Error, provider_failed: bool) {
        let id = sandbox.id.as_str();
        let mut data = sandbox_event_data(sandbox, None);
        data.insert("error".into(), json!(err.public_message()));
        self.events()
            .publish(EventType::SandboxError, id, Some(data));
        let failure = failure_data("spawn", &sandbox.provider, err);
        self.events()
            .publish(EventType::OperationFailed, id, Some(failure.clone()));
        if provider_failed {
            self.events()
                .publish(EventType::ProviderFailed, id, Some(failure));
        }
        tracing::warn!(sandbox_id = id, error = %err, "spawn failed");
    }

    /// A sandbox the caller may see, in any state. Malformed IDs are simply not found.
    pub async fn get_sandbox(&self, principal: &Principal, id: &str) -> Result<Sandbox, Error> {
        let not_found = || Error::not_found(Resource::Sandbox, id);
        let parsed = SandboxId::parse(id).map_err(|_| not_found())?;
        let sandbox = self
            .store()
            .get_sandbox(&parsed)
            .await?
            .ok_or_else(not_found)?;
        if !principal.can_see_tenant(&sandbox.tenant_id) {
            return Err(not_found());
        }
        Ok(sandbox)
    }

    /// A sandbox the caller may see that is not destroyed (for exec, files, logs, extend).
    pub async fn get_active_sandbox(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Sandbox, Error> {
        let sandbox = self.get_sandbox(principal, id).await?;
        if !sandbox.is_active() {
            return Err(Error::SandboxDestroyed { id: id.to_owned() });
        }
        Ok(sandbox)
    }

    /// `GET /sandboxes`.
    pub async fn list_sandboxes(
        &self,
        principal: &Principal,
        query: ListSandboxes,
    ) -> Result<Vec<Sandbox>, Error> {
        let state = match query.state.as_deref() {
            None | Some("") => StateFilter::Active,
            Some("all") => StateFilter::All,
            Some(other) => StateFilter::Only(SandboxState::parse(other).ok_or_else(|| {
                Error::invalid(
                    "state",
                    format!("unknown state {other:?} (allowed: running, error, destroyed, all)"),
                )
            })?),
        };
        let filter = SandboxFilter {
            state,
            owner_id: query.owner_id,
            provider: query.provider,
            tenant_id: principal.visible_tenant().map(str::to_owned),
        };
        Ok(self.store().list_sandboxes(&filter).await?)
    }

    /// `DELETE /sandboxes/{id}`: idempotent; a second destroy answers the same, without event.
    pub async fn destroy_sandbox(&self, principal: &Principal, id: &str) -> Result<(), Error> {
        let sandbox = self.get_sandbox(principal, id).await?;
        self.destroy(&sandbox, None).await
    }

    /// Removes the runtime, then marks the record destroyed and publishes `sandbox.destroyed`.
    pub(crate) async fn destroy(
        &self,
        sandbox: &Sandbox,
        reason: Option<&str>,
    ) -> Result<(), Error> {
        if !sandbox.is_active() {
            return Ok(());
        }
        // Whatever can spawn can destroy.
        let provider = self.capable_provider(&sandbox.provider, Capability::Spawn)?;
        if let Err(err) = provider.destroy(&sandbox.id).await {
            return Err(self.provider_failure(
                sandbox.id.as_str(),
                provider.name(),
                "destroy",
                err,
            ));
        }
        let now = self.clock().now();
        if let Some(destroyed) = self
            .store()
            .mark_sandbox_destroyed(&sandbox.id, now)
            .await?
        {
            self.events().publish(
                EventType::SandboxDestroyed,
                destroyed.id.as_str(),
                Some(sandbox_event_data(&destroyed, reason)),
            );
            tracing::info!(sandbox_id = %destroyed.id, reason, "sandbox destroyed");
        }
        Ok(())
    }

    /// `POST /sandboxes/{id}/extend`: `expires_at = now + ttl`, within the max TTL from creation.
    pub async fn extend_sandbox(
        &self,
        principal: &Principal,
        id: &str,
        request: ExtendRequest,
    ) -> Result<Sandbox, Error> {
        let sandbox = self.get_active_sandbox(principal, id).await?;
        check_ttl_positive(request.ttl)?;
        let ttl = request.ttl.as_std();
        let now = self.clock().now();
        check_ttl(
            &self.config().defaults,
            sandbox.lifetime_if_extended(now, ttl),
        )?;
        self.store()
            .set_sandbox_expiry(&sandbox.id, add_duration(now, ttl))
            .await?
            .ok_or(Error::SandboxDestroyed { id: id.to_owned() })
    }

    /// Destroys the expired sandboxes the caller can see; returns how many were destroyed.
    pub async fn prune_expired(&self, principal: &Principal) -> Result<u64, Error> {
        let now = self.clock().now();
        let expired = self.store().list_expired_sandboxes(now).await?;
        let mut pruned = 0;
        for sandbox in expired
            .iter()
            .filter(|s| principal.can_see_tenant(&s.tenant_id))
        {
            match self.destroy(sandbox, Some("expired")).await {
                Ok(()) => pruned += 1,
                Err(err) => {
                    tracing::warn!(sandbox_id = %sandbox.id, error = %err, "destroying an expired sandbox failed");
                }
            }
        }
        Ok(pruned)
    }
}
