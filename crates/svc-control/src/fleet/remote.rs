//! Another node's provider, as the spawn pipeline sees it (decisions §22): a spawn placed on
//! another node creates, checks and removes its runtime there over the worker RPC contract,
//! each mutating call fenced by the sandbox's lease, which the chosen node holds from admission
//! on. Everything else on that runtime is the holder's to serve.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use svc_core::config::Secret;
use svc_core::rpc::{
    LeaseToken, RpcRequest, RpcResponse, RpcSpawnSpec, WorkerRequest, WorkerResponse,
};
use svc_core::{Capability, Clock, SandboxId};
use svc_provider::{Provider, ProviderError, RuntimeInfo, RuntimeStatus, SpawnSpec};
use svc_store::Store;

/// How long one call to another node may take (a spawn pulls images there).
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// Provider `name` on node `worker`, reached at `url`.
pub(crate) struct NodeProvider {
    pub(crate) name: &'static str,
    pub(crate) worker: String,
    pub(crate) url: String,
    pub(crate) token: Secret,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) client: reqwest::Client,
}

impl NodeProvider {
    /// One request of the contract to the node; its `error` result becomes a provider error
    /// (a fencing refusal is the caller's mistake, anything else the node's failure).
    async fn call(&self, request: WorkerRequest) -> Result<WorkerResponse, ProviderError> {
        let deadline = self.clock.now()
            + chrono::Duration::from_std(CALL_TIMEOUT).unwrap_or(chrono::Duration::MAX);
        let envelope = RpcRequest {
            id: format!("rpc-{}", hex::encode(rand::random::<[u8; 8]>())),
            worker_id: self.worker.clone(),
            deadline,
            request,
        };
        let url = format!("{}/rpc", self.url.trim_end_matches('/'));
        let answer = self
            .client
            .post(&url)
            .bearer_auth(self.token.expose())
            .timeout(CALL_TIMEOUT)
            .json(&envelope)
            .send()
            .await
            .map_err(|e| {
                ProviderError::unavailable(format!("worker {} at {url}: {e}", self.worker))
            })?;
        if !answer.status().is_success() {
            return Err(ProviderError::unavailable(format!(
                "worker {} at {url} answered {}",
                self.worker,
                answer.status()
            )));
        }
        let response: RpcResponse = answer.json().await.map_err(|e| {
            ProviderError::failed(format!("worker {} answered unreadably: {e}", self.worker))
        })?;
        match response.response {
            WorkerResponse::Error { code, message } if code == "lease_conflict" => {
                Err(ProviderError::InvalidRequest { message })
            }
            WorkerResponse::Error { message, .. } => Err(ProviderError::failed(format!(
                "worker {}: {message}",
                self.worker
            ))),
            other => Ok(other),
        }
    }

    /// The lease token for sandbox `id`: its current generation.
    async fn lease(&self, id: &SandboxId) -> Result<LeaseToken, ProviderError> {
        let lease = self
            .store
            .get_lease(id.as_str())
            .await
            .map_err(|e| ProviderError::caused("reading the sandbox lease", e))?
            .ok_or_else(|| ProviderError::InvalidRequest {
                message: format!("sandbox {id} has no lease"),
            })?;
        Ok(LeaseToken {
            resource_id: id.to_string(),
            generation: lease.generation,
        })
    }
}

fn unexpected(answer: &WorkerResponse) -> ProviderError {
    ProviderError::failed(format!("another node answered out of turn: {answer:?}"))
}

#[async_trait]
impl Provider for NodeProvider {
    fn name(&self) -> &'static str {
        self.name
    }

    fn capabilities(&self) -> &'static [Capability] {
        &[]
    }

    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::from_iter([("worker".to_owned(), self.worker.clone().into())])
    }

    async fn health(&self) -> Result<(), ProviderError> {
        match self
            .call(WorkerRequest::Heartbeat(Default::default()))
            .await?
        {
            WorkerResponse::Worker(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError> {
        let lease = self.lease(&spec.id).await?;
        let request = WorkerRequest::Spawn {
            lease,
            spec: RpcSpawnSpec {
                provider: self.name.to_owned(),
                image: spec.image.clone(),
                memory_mb: spec.memory_mb,
                vcpus: spec.vcpus,
                env: spec.env.clone(),
                network: spec.network.clone(),
                labels: spec.labels.clone(),
            },
        };
        match self.call(request).await? {
            WorkerResponse::Spawned { image_pulled, .. } => {
                Ok(RuntimeInfo::started(spec, image_pulled))
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError> {
        let lease = self.lease(id).await?;
        match self.call(WorkerRequest::Destroy { lease }).await? {
            WorkerResponse::Destroyed { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        let request = WorkerRequest::Status {
            sandbox_id: id.to_string(),
        };
        match self.call(request).await? {
            WorkerResponse::Status { status, .. } => Ok(match status.as_str() {
                "running" => RuntimeStatus::Running,
                "stopped" => RuntimeStatus::Stopped,
                _ => RuntimeStatus::Missing,
            }),
            other => Err(unexpected(&other)),
        }
    }
}
