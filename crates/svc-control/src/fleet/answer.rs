//! The worker RPC contract as this node answers it (docs/worker-rpc.md; decisions §22): what
//! another node asks of the runtimes held here. A mutating request is fenced by the sandbox
//! lease it carries, checked against the store before anything is done, so a node that lost the
//! lease can never act on the sandbox, even with a request delayed in transit.

use std::collections::BTreeMap;
use std::sync::Arc;

use svc_core::rpc::{RpcRequest, RpcResponse, RpcSpawnSpec, WorkerRequest, WorkerResponse};
use svc_core::worker::WorkerStatus;
use svc_core::{Error, SandboxId};
use svc_provider::{Provider, RuntimeStatus, SpawnSpec};

use crate::provider_errors::classify;
use crate::{ControlPlane, Principal};

impl ControlPlane {
    /// Answers one request of the worker RPC contract; refusals and failures are its `error`
    /// result with the API's error code, never a transport error.
    pub async fn answer_rpc(&self, request: RpcRequest) -> RpcResponse {
        let id = request.id.clone();
        let response = match self.carry_out(request).await {
            Ok(response) => response,
            Err(err) => WorkerResponse::Error {
                code: err.kind().code().to_owned(),
                message: err.to_string(),
            },
        };
        RpcResponse { id, response }
    }

    async fn carry_out(&self, request: RpcRequest) -> Result<WorkerResponse, Error> {
        if request.worker_id != self.worker_id() {
            return Err(Error::invalid(
                "worker_id",
                format!(
                    "the request is addressed to worker {}, this is worker {}",
                    request.worker_id,
                    self.worker_id()
                ),
            ));
        }
        let now = self.clock().now();
        if request.deadline <= now {
            return Err(Error::invalid(
                "deadline",
                format!("{} has passed", request.deadline),
            ));
        }
        if let Some(token) = request.request.lease() {
            let current = self.store().get_lease(&token.resource_id).await?;
            request
                .check_fence(current.as_ref(), now)
                .map_err(|fence| Error::Fenced(fence.to_string()))?;
        }
        match request.request {
            WorkerRequest::Heartbeat(_) => self
                .store()
                .get_worker(self.worker_id())
                .await?
                .map(|worker| {
                    WorkerResponse::Worker(
                        worker.with_staleness(now, self.config().worker.stale_after.as_std()),
                    )
                })
                .ok_or_else(|| {
                    Error::not_found(svc_core::error::Resource::Worker, self.worker_id())
                }),
            WorkerRequest::Status { sandbox_id } => {
                let status = self.runtime_status(&sandbox_id).await?;
                Ok(WorkerResponse::Status { sandbox_id, status })
            }
            WorkerRequest::RenewLease { resource_id, ttl } => {
                let renewed = self
                    .store()
                    .renew_lease(&resource_id, self.worker_id(), ttl.as_std(), now)
                    .await?;
                renewed.map(WorkerResponse::Lease).ok_or_else(|| {
                    Error::Fenced(format!(
                        "worker {} holds no unexpired lease on {resource_id}",
                        self.worker_id()
                    ))
                })
            }
            WorkerRequest::Destroy { lease } => {
                let id = SandboxId::named(&lease.resource_id)?;
                let provider = self.provider_of_record(&id).await?;
                provider
                    .destroy(&id)
                    .await
                    .map_err(|e| classify(provider.name(), "destroy", e))?;
                Ok(WorkerResponse::Destroyed {
                    sandbox_id: id.to_string(),
                })
            }
            WorkerRequest::Spawn { lease, spec } => {
                let id = SandboxId::named(&lease.resource_id)?;
                let provider = self.enabled_provider(&spec.provider)?;
                let runtime = self
                    .spawn_runtime(&provider, rpc_spawn_spec(id, spec))
                    .await
                    .map_err(|failure| failure.error)?;
                Ok(WorkerResponse::Spawned {
                    sandbox_id: runtime.sandbox_id.to_string(),
                    image_pulled: runtime.image_pulled,
                })
            }
            WorkerRequest::Shutdown { drain } => {
                if drain {
                    self.store()
                        .set_worker_status(self.worker_id(), WorkerStatus::Draining, now)
                        .await?;
                } else {
                    self.shutdown_token().cancel();
                }
                Ok(WorkerResponse::ShuttingDown)
            }
        }
    }

    /// `running`, `stopped` or `missing`: the runtime of `sandbox_id` on this node.
    async fn runtime_status(&self, sandbox_id: &str) -> Result<String, Error> {
        let Ok(id) = SandboxId::parse(sandbox_id) else {
            return Ok("missing".to_owned());
        };
        let Some(sandbox) = self.store().get_sandbox(&id).await? else {
            return Ok("missing".to_owned());
        };
        let provider = self.enabled_provider(&sandbox.provider)?;
        let status = provider
            .status(&id)
            .await
            .map_err(|e| classify(provider.name(), "status", e))?;
        Ok(match status {
            RuntimeStatus::Running => "running",
            RuntimeStatus::Stopped => "stopped",
            RuntimeStatus::Missing => "missing",
        }
        .to_owned())
    }

    /// The enabled provider the record of sandbox `id` names.
    async fn provider_of_record(&self, id: &SandboxId) -> Result<Arc<dyn Provider>, Error> {
        let sandbox = self.find_sandbox(&Principal::system(), id).await?;
        self.enabled_provider(&sandbox.provider)
    }
}

/// The provider's spawn for an RPC spawn: the contract's fields; what it does not carry (egress
/// rules, several users) is the default.
fn rpc_spawn_spec(id: SandboxId, spec: RpcSpawnSpec) -> SpawnSpec {
    SpawnSpec {
        id,
        image: spec.image,
        memory_mb: spec.memory_mb,
        vcpus: spec.vcpus,
        env: spec.env,
        network: spec.network,
        labels: BTreeMap::from_iter(spec.labels),
        multi_user: false,
        egress: Default::default(),
        progress: Default::default(),
    }
}
