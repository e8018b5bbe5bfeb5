//! The worker registry as the control plane keeps it (decisions §11): this process registers
//! itself as its worker at start-up, a heartbeat loop refreshes the record and renews every
//! lease the worker holds, and shutdown records it `offline`. Staleness is computed when a
//! worker is read, from `worker.stale_after`.

use std::time::Duration;

use svc_core::access::Action;
use svc_core::error::Resource;
use svc_core::worker::{Lease, Worker, WorkerCapacity, WorkerHeartbeat, WorkerStatus};
use svc_core::Error;
use svc_store::KeyPage;
use tokio_util::sync::CancellationToken;

use crate::identity::{WorkerToken, WorkerTokenRequest, SCOPE_HEARTBEAT, SCOPE_LEASE};
use crate::paging::{Page, PageRequest, MAX_PAGE};
use crate::{ControlPlane, Principal};

/// What a single-node server can do (decisions §11).
const LOCAL_CAPABILITIES: [&str; 5] = ["api", "single_node", "spawn", "exec", "files"];

/// The host's name, read once (`/proc`, else `HOSTNAME`, else `localhost`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

impl ControlPlane {
    /// This worker as its heartbeat describes it.
    /// In a fleet (`worker.rpc.enabled`) its capacity is its own and it says where other nodes
    /// reach it (decisions §22); otherwise its capacity is the global limits' (§11).
    fn local_heartbeat(&self, status: WorkerStatus) -> WorkerHeartbeat {
        let (defaults, worker) = (&self.config().defaults, &self.config().worker);
        let fleet = worker.rpc.enabled;
        WorkerHeartbeat {
            hostname: self.inner.hostname.clone(),
            status,
            providers: self.providers().names(),
            capabilities: LOCAL_CAPABILITIES.map(str::to_owned).to_vec(),
            capacity: WorkerCapacity {
                max_sandboxes: if fleet {
                    worker.max_sandboxes
                } else {
                    defaults.max_sandboxes
                },
                max_sandboxes_per_owner: defaults.max_sandboxes_per_owner,
            },
            url: fleet.then(|| worker.url()),
        }
    }

    /// Every registered worker, `stale` as of now.
    pub(crate) async fn workers_now(&self) -> Result<Vec<Worker>, Error> {
        let now = self.clock().now();
        let window = self.stale_after();
        Ok(self
            .store()
            .list_workers(&KeyPage::ALL)
            .await?
            .into_iter()
            .map(|w| w.with_staleness(now, window))
            .collect())
    }

    fn stale_after(&self) -> Duration {
        self.config().worker.stale_after.as_std()
    }

    /// Registers this process as worker `worker.id` (`online`), at start-up.
    pub async fn register_local_worker(&self) -> Result<Worker, Error> {
        let worker = self
            .store()
            .upsert_worker(
                self.worker_id(),
                &self.local_heartbeat(WorkerStatus::Online),
                self.clock().now(),
            )
            .await?;
        Ok(worker)
    }

    /// One heartbeat: the record refreshed, then every lease this worker holds renewed.
    pub(crate) async fn heartbeat_once(&self) -> Result<u64, Error> {
        let now = self.clock().now();
        self.store()
            .upsert_worker(
                self.worker_id(),
                &self.local_heartbeat(WorkerStatus::Online),
                now,
            )
            .await?;
        let lease_ttl = self.config().worker.lease_ttl.as_std();
        let renewed = self
            .store()
            .renew_leases_held_by(self.worker_id(), lease_ttl, now)
            .await?;
        self.inner.held_leases.renewed(now, lease_ttl);
        Ok(renewed)
    }

    /// Records this worker `offline` (the end of a shutdown).
    pub async fn mark_local_offline(&self) {
        self.set_local_status(WorkerStatus::Offline).await;
    }

    async fn set_local_status(&self, status: WorkerStatus) {
        let result = self
            .store()
            .set_worker_status(self.worker_id(), status, self.clock().now())
            .await;
        if let Err(err) = result {
            tracing::warn!(error = %err, %status, "recording this worker's status failed");
        }
    }

    /// `GET /workers`: a page, by ID.
    pub async fn list_workers(
        &self,
        principal: &Principal,
        page: PageRequest,
    ) -> Result<Page<Worker>, Error> {
        self.authorize(principal, Action::ReadWorkers)?;
        let paging = page.open::<String>("/workers", String::new(), MAX_PAGE)?;
        let now = self.clock().now();
        let window = self.stale_after();
        let workers = self
            .store()
            .list_workers(&paging.key_page())
            .await?
            .into_iter()
            .map(|w| w.with_staleness(now, window))
            .collect();
        Ok(paging.finish(workers, |w: &Worker| w.id.clone()))
    }

    /// `GET /workers/{id}`.
    pub async fn get_worker(&self, principal: &Principal, id: &str) -> Result<Worker, Error> {
        self.authorize(principal, Action::ReadWorkers)?;
        self.store()
            .get_worker(id)
            .await?
            .map(|w| w.with_staleness(self.clock().now(), self.stale_after()))
            .ok_or_else(|| Error::not_found(Resource::Worker, id))
    }

    /// `POST /admin/workers/{id}/heartbeat`: upserts the record as if that worker had sent a
    /// heartbeat (registry repair).
    pub async fn admin_heartbeat(
        &self,
        principal: &Principal,
        id: &str,
        heartbeat: WorkerHeartbeat,
    ) -> Result<Worker, Error> {
        self.authorize(principal, Action::ManageWorkers)?;
        self.record_heartbeat(id, heartbeat).await
    }

    /// Saves a heartbeat of worker `id` (validated).
    pub(crate) async fn record_heartbeat(
        &self,
        id: &str,
        heartbeat: WorkerHeartbeat,
    ) -> Result<Worker, Error> {
        check_worker_id(id)?;
        let now = self.clock().now();
        Ok(self
            .store()
            .upsert_worker(id, &heartbeat, now)
            .await?
            .with_staleness(now, self.stale_after()))
    }

    /// `POST /admin/workers/{id}/drain` (with `draining`) and `/undrain` (with `online`):
    /// a draining worker takes no new sandboxes and keeps serving its own (decisions §22).
    pub async fn set_draining(
        &self,
        principal: &Principal,
        id: &str,
        draining: bool,
    ) -> Result<Worker, Error> {
        self.authorize(principal, Action::ManageWorkers)?;
        let status = if draining {
            WorkerStatus::Draining
        } else {
            WorkerStatus::Online
        };
        let now = self.clock().now();
        self.store()
            .set_worker_status(id, status, now)
            .await?
            .map(|worker| worker.with_staleness(now, self.stale_after()))
            .ok_or_else(|| Error::not_found(Resource::Worker, id))
    }

    /// `DELETE /admin/workers/{id}`.
    pub async fn delete_worker(&self, principal: &Principal, id: &str) -> Result<(), Error> {
        self.authorize(principal, Action::ManageWorkers)?;
        if !self.store().delete_worker(id).await? {
            return Err(Error::not_found(Resource::Worker, id));
        }
        Ok(())
    }
}

/// What a worker route's request presents (`X-Worker-ID`, `X-Worker-Token`; unchecked).
#[derive(Clone, Copy, Default)]
pub struct WorkerCredentials<'a> {
    /// `X-Worker-ID`.
    pub worker_id: Option<&'a str>,
    /// `X-Worker-Token`.
    pub token: Option<&'a str>,
}

/// `POST /worker/{id}/leases/{resourceID}/renew` body.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct RenewRequest {
    /// New lifetime from now; default `worker.lease_ttl`, at most `24h`.
    #[schema(value_type = Option<String>, example = "60s")]
    pub ttl: Option<svc_core::GoDuration>,
}

/// `{lease}`: the renewed lease.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LeaseBody {
    /// The lease, with the generation for fencing.
    pub lease: Lease,
}

impl ControlPlane {
    fn verify_worker(
        &self,
        id: &str,
        credentials: WorkerCredentials<'_>,
        scope: &str,
    ) -> Result<(), Error> {
        self.inner.worker_tokens.verify(
            id,
            credentials.worker_id,
            credentials.token,
            scope,
            self.clock().now(),
        )
    }

    /// `POST /worker/{id}/heartbeat`, with worker credentials.
    pub async fn worker_heartbeat(
        &self,
        id: &str,
        credentials: WorkerCredentials<'_>,
        heartbeat: WorkerHeartbeat,
    ) -> Result<Worker, Error> {
        self.verify_worker(id, credentials, SCOPE_HEARTBEAT)?;
        self.record_heartbeat(id, heartbeat).await
    }

    /// `POST /worker/{id}/leases/{resourceID}/renew`: 409 `lease_conflict` unless the worker
    /// holds the lease unexpired.
    pub async fn renew_worker_lease(
        &self,
        id: &str,
        credentials: WorkerCredentials<'_>,
        resource_id: &str,
        request: RenewRequest,
    ) -> Result<LeaseBody, Error> {
        self.verify_worker(id, credentials, SCOPE_LEASE)?;
        let ttl = request.ttl.unwrap_or(self.config().worker.lease_ttl);
        if ttl.is_zero() || ttl > MAX_LEASE_TTL {
            return Err(Error::invalid(
                "ttl",
                format!("must be longer than 0s and at most {MAX_LEASE_TTL}, got {ttl}"),
            ));
        }
        let now = self.clock().now();
        if let Some(lease) = self
            .store()
            .renew_lease(resource_id, id, ttl.as_std(), now)
            .await?
        {
            return Ok(LeaseBody { lease });
        }
        let holder = match self.store().get_lease(resource_id).await? {
            Some(lease) if lease.active_at(now) => lease.holder_id,
            _ => "no worker (the lease is expired or was never taken)".to_owned(),
        };
        Err(Error::LeaseHeld {
            resource: Resource::Lease,
            id: resource_id.to_owned(),
            holder,
        })
    }

    /// `POST /admin/worker-tokens`.
    pub fn mint_worker_token(
        &self,
        principal: &Principal,
        request: &WorkerTokenRequest,
    ) -> Result<WorkerToken, Error> {
        self.authorize(principal, Action::ManageWorkers)?;
        self.inner.worker_tokens.mint(request, self.clock().now())
    }
}

/// The longest lease a renewal may ask for.
const MAX_LEASE_TTL: svc_core::GoDuration = svc_core::GoDuration::from_secs(24 * 60 * 60);

/// Worker IDs follow the owner-ID rules: 1..=128 characters, no whitespace, control characters
/// or path separators.
pub fn check_worker_id(id: &str) -> Result<(), Error> {
    svc_core::OwnerId::parse(id)
        .map(|_| ())
        .map_err(|e| Error::invalid("workerID", e.to_string().replace("owner id", "worker id")))
}

/// The heartbeat loop: every `worker.heartbeat_interval` until shutdown. Then the worker is
/// `offline`; a fleet node is `draining` instead while its in-flight requests finish, and the
/// server records it `offline` once they have (decisions §22).
pub(crate) async fn run_heartbeats(plane: ControlPlane, cancel: CancellationToken) {
    let every = plane.config().worker.heartbeat_interval.as_std();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = tick.tick() => {
                if let Err(err) = plane.heartbeat_once().await {
                    tracing::warn!(error = %err, "worker heartbeat failed");
                    continue;
                }
                if let Err(err) = plane.take_over_dead_workers(&Principal::system()).await {
                    tracing::warn!(error = %err, "settling dead workers' sandboxes failed; retried after the next heartbeat");
                }
            }
        }
    }
    if plane.config().worker.rpc.enabled {
        plane.set_local_status(WorkerStatus::Draining).await;
    } else {
        plane.mark_local_offline().await;
    }
}
