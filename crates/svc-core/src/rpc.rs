//! The worker RPC contract (interface "Worker RPC contract"; docs/worker-rpc.md): typed,
//! transport-neutral request and response envelopes between a control plane and a worker.
//! Mutating methods (spawn, destroy) carry a lease token, the resource and the generation the
//! sender holds; a worker refuses a token whose generation is not the lease's current one, so a
//! control plane that lost the lease can never act on the sandbox. Remote execution stays gated
//! until a transport enforces this contract; the envelopes are fixed now so both ends agree.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::duration::GoDuration;
use crate::worker::{Lease, Worker, WorkerHeartbeat};

/// What a mutating request proves it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseToken {
    /// The leased resource (the sandbox ID).
    pub resource_id: String,
    /// The generation the sender holds.
    pub generation: u64,
}

/// A runtime to create (the provider-facing part of a spawn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcSpawnSpec {
    /// Provider on the worker.
    pub provider: String,
    /// Image.
    pub image: String,
    /// Memory limit in MiB.
    pub memory_mb: u32,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Default environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Network, when not the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Labels for the runtime.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A method and its parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "method", content = "params", rename_all = "snake_case")]
pub enum WorkerRequest {
    /// The worker's state, as `POST /worker/{id}/heartbeat` carries it.
    Heartbeat(WorkerHeartbeat),
    /// Create the runtime of sandbox `lease.resource_id`.
    Spawn {
        /// The sandbox lease held by the sender.
        lease: LeaseToken,
        /// What to create.
        spec: RpcSpawnSpec,
    },
    /// Remove the runtime of sandbox `lease.resource_id`.
    Destroy {
        /// The sandbox lease held by the sender.
        lease: LeaseToken,
    },
    /// The runtime's status.
    Status {
        /// The sandbox.
        sandbox_id: String,
    },
    /// Extend a lease the worker holds.
    RenewLease {
        /// The leased resource.
        resource_id: String,
        /// New lifetime from now.
        ttl: GoDuration,
    },
    /// Stop taking work; with `drain`, finish what runs first.
    Shutdown {
        /// Let running work finish.
        drain: bool,
    },
}

impl WorkerRequest {
    /// The lease token of a mutating method; `None` for the others.
    pub fn lease(&self) -> Option<&LeaseToken> {
        match self {
            WorkerRequest::Spawn { lease, .. } | WorkerRequest::Destroy { lease } => Some(lease),
            _ => None,
        }
    }
}

/// A request envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcRequest {
    /// Correlates the response.
    pub id: String,
    /// The worker addressed.
    pub worker_id: String,
    /// When the sender stops waiting.
    pub deadline: Timestamp,
    /// The method.
    #[serde(flatten)]
    pub request: WorkerRequest,
}

/// A result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", content = "value", rename_all = "snake_case")]
pub enum WorkerResponse {
    /// After a heartbeat.
    Worker(Worker),
    /// The runtime exists and runs.
    Spawned {
        /// The sandbox.
        sandbox_id: String,
        /// Whether its image had to be pulled.
        image_pulled: bool,
    },
    /// The runtime is gone.
    Destroyed {
        /// The sandbox.
        sandbox_id: String,
    },
    /// `running`, `stopped` or `missing`.
    Status {
        /// The sandbox.
        sandbox_id: String,
        /// Its runtime's state.
        status: String,
    },
    /// The renewed lease.
    Lease(Lease),
    /// Shutdown accepted.
    ShuttingDown,
    /// Refused or failed, with the service's error code (`lease_conflict`, `provider_error`, ...).
    Error {
        /// Error code as in HTTP error bodies.
        code: String,
        /// What went wrong.
        message: String,
    },
}

/// A response envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcResponse {
    /// The request's `id`.
    pub id: String,
    /// The result.
    #[serde(flatten)]
    pub response: WorkerResponse,
}

/// Why a mutating request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// No lease exists for the resource.
    #[error("no lease on {0}")]
    NoLease(String),
    /// The token's generation is not the lease's current one.
    #[error("stale lease generation {presented} for {resource} (current {current})")]
    StaleGeneration {
        /// The resource.
        resource: String,
        /// What the request carried.
        presented: u64,
        /// What the lease is at.
        current: u64,
    },
    /// The lease has expired.
    #[error("the lease on {0} has expired")]
    Expired(String),
}

impl RpcRequest {
    /// The worker's fencing rule: a mutating request must carry the current generation of an
    /// unexpired lease on its resource; other methods pass.
    pub fn check_fence(&self, current: Option<&Lease>, now: Timestamp) -> Result<(), FenceError> {
        let Some(token) = self.request.lease() else {
            return Ok(());
        };
        let Some(lease) = current.filter(|l| l.resource_id == token.resource_id) else {
            return Err(FenceError::NoLease(token.resource_id.clone()));
        };
        if lease.generation != token.generation {
            return Err(FenceError::StaleGeneration {
                resource: token.resource_id.clone(),
                presented: token.generation,
                current: lease.generation,
            });
        }
        if !lease.active_at(now) {
            return Err(FenceError::Expired(token.resource_id.clone()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::add_duration;
    use crate::worker::{WorkerCapacity, WorkerStatus};
    use std::time::Duration;

    fn token(generation: u64) -> LeaseToken {
        LeaseToken {
            resource_id: "sb-0123456789abcdef".into(),
            generation,
        }
    }

    fn envelope(request: WorkerRequest) -> RpcRequest {
        RpcRequest {
            id: "rpc-1".into(),
            worker_id: "w1".into(),
            deadline: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            request,
        }
    }

    fn every_request() -> Vec<WorkerRequest> {
        vec![
            WorkerRequest::Heartbeat(WorkerHeartbeat {
                hostname: "h".into(),
                status: WorkerStatus::Online,
                providers: vec!["docker".into()],
                capabilities: vec!["spawn".into()],
                capacity: WorkerCapacity::default(),
                url: Some("https://w1:7424".into()),
            }),
            WorkerRequest::Spawn {
                lease: token(3),
                spec: RpcSpawnSpec {
                    provider: "docker".into(),
                    image: "alpine:latest".into(),
                    memory_mb: 512,
                    vcpus: 1,
                    env: BTreeMap::from([("A".into(), "1".into())]),
                    network: None,
                    labels: BTreeMap::new(),
                },
            },
            WorkerRequest::Destroy { lease: token(3) },
            WorkerRequest::Status {
                sandbox_id: "sb-0123456789abcdef".into(),
            },
            WorkerRequest::RenewLease {
                resource_id: "sb-0123456789abcdef".into(),
                ttl: GoDuration::from_secs(60),
            },
            WorkerRequest::Shutdown { drain: true },
        ]
    }

    #[test]
    fn every_envelope_round_trips_through_json() {
        for request in every_request() {
            let sent = envelope(request);
            let wire = serde_json::to_string(&sent).unwrap();
            let back: RpcRequest = serde_json::from_str(&wire).unwrap();
            assert_eq!(back, sent, "{wire}");
        }
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        for response in [
            WorkerResponse::Spawned {
                sandbox_id: "sb-1".into(),
                image_pulled: true,
            },
            WorkerResponse::Destroyed {
                sandbox_id: "sb-1".into(),
            },
            WorkerResponse::Status {
                sandbox_id: "sb-1".into(),
                status: "running".into(),
            },
            WorkerResponse::Lease(Lease {
                resource_id: "sb-1".into(),
                holder_id: "w1".into(),
                generation: 4,
                expires_at: now,
            }),
            WorkerResponse::ShuttingDown,
            WorkerResponse::Error {
                code: "lease_conflict".into(),
                message: "stale".into(),
            },
        ] {
            let sent = RpcResponse {
                id: "rpc-1".into(),
                response,
            };
            let wire = serde_json::to_string(&sent).unwrap();
            assert_eq!(serde_json::from_str::<RpcResponse>(&wire).unwrap(), sent);
        }
    }

    #[test]
    fn the_wire_form_names_the_method() {
        let wire =
            serde_json::to_value(envelope(WorkerRequest::Destroy { lease: token(7) })).unwrap();
        assert_eq!(wire["method"], "destroy");
        assert_eq!(wire["params"]["lease"]["generation"], 7);
        assert_eq!(wire["worker_id"], "w1");
    }

    #[test]
    fn mutating_requests_need_the_current_generation_of_a_live_lease() {
        let now = crate::Clock::now(&crate::clock::SystemClock);
        let lease = Lease {
            resource_id: "sb-0123456789abcdef".into(),
            holder_id: "cp".into(),
            generation: 3,
            expires_at: add_duration(now, Duration::from_secs(30)),
        };
        let destroy = |generation| {
            envelope(WorkerRequest::Destroy {
                lease: token(generation),
            })
        };
        assert_eq!(destroy(3).check_fence(Some(&lease), now), Ok(()));
        assert!(matches!(
            destroy(2).check_fence(Some(&lease), now),
            Err(FenceError::StaleGeneration {
                presented: 2,
                current: 3,
                ..
            })
        ));
        assert!(matches!(
            destroy(3).check_fence(None, now),
            Err(FenceError::NoLease(_))
        ));
        let later = add_duration(now, Duration::from_secs(31));
        assert!(matches!(
            destroy(3).check_fence(Some(&lease), later),
            Err(FenceError::Expired(_))
        ));
        let status = envelope(WorkerRequest::Status {
            sandbox_id: "sb-0123456789abcdef".into(),
        });
        assert_eq!(status.check_fence(None, now), Ok(()), "reads need no lease");
    }
}
