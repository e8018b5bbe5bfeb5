//! Pool mode (decisions §15): each user's logical sandbox is a workspace `/workspace/<owner>`
//! in a shared pool VM, a runtime of `pool.provider` that is never a sandbox of its own.
//!
//! [`Pool`] stands in the provider registry in place of the provider it wraps, so the spawn
//! pipeline, exec, files, the reaper and reconciliation treat logical sandboxes like any
//! other: `spawn` seats the sandbox in a VM (starting one when needed) and makes its
//! workspace, `destroy` removes the workspace and lets an emptied VM go after
//! `pool.idle_timeout`, exec runs in the workspace as the workspace's own unprivileged user,
//! and every file path is confined to the workspace (file operations run as that user too
//! where the provider allows, so the kernel enforces it; on the mock, a symlink check does).
//! Seats are reserved at admission ([`Pool::reserve`]), so a full pool refuses (or queues)
//! before anything is written, and one user never holds two. Runtimes of the wrapped provider that are not
//! pool VMs (sandboxes from before pool mode) pass straight through.

mod provider;
mod seats;
mod workspace;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use svc_core::config::PoolConfig;
use svc_core::{Capability, Clock, Error, OwnerId, SandboxId};
use svc_provider::shell_files::ShellFiles;
use svc_provider::{
    ExecUser, Provider, ProviderError, SpawnSpec, LABEL_INSTALLATION, LABEL_MANAGED, LABEL_POOL,
    LABEL_SANDBOX_ID, LABEL_WORKER,
};
use svc_store::Store;
use tokio::sync::OnceCell;

use seats::{Refusal, Seat, Seats};

/// Value of [`LABEL_POOL`] on pool VMs.
const POOL_VM: &str = "vm";

/// `GET /pool/status` (interface Pool status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PoolStatus {
    /// Whether pool mode is on.
    pub enabled: bool,
    /// Pool VMs now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vms: Option<u64>,
    /// `pool.max_vms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_vms: Option<u64>,
    /// Users seated across every VM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_users: Option<u64>,
    /// `pool.max_users_per_vm`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_users_per_vm: Option<u64>,
}

impl PoolStatus {
    /// The status when pool mode is off.
    pub fn disabled() -> Self {
        PoolStatus {
            enabled: false,
            vms: None,
            max_vms: None,
            total_users: None,
            max_users_per_vm: None,
        }
    }
}

/// Who this worker is, for pool VM labels and leases.
#[derive(Debug, Clone)]
pub struct PoolIdentity {
    /// `worker.id`.
    pub worker_id: String,
    /// The store's installation ID.
    pub installation_id: String,
    /// `worker.lease_ttl`.
    pub lease_ttl: Duration,
}

/// The pool: seats, VMs and the provider they run on.
pub struct Pool {
    config: PoolConfig,
    inner: Arc<dyn Provider>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    identity: PoolIdentity,
    capabilities: &'static [Capability],
    seats: Mutex<Seats>,
    /// The VMs and workspaces of an earlier run, found once before the first use.
    loaded: OnceCell<()>,
    this: Weak<Pool>,
}

/// What a logical sandbox's seat says about where it runs.
struct Place {
    vm: SandboxId,
    workspace: svc_core::path::SandboxPath,
    seat: Seat,
}

impl Pool {
    /// The pool over `inner`, the provider of its VMs.
    pub fn new(
        config: PoolConfig,
        inner: Arc<dyn Provider>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        identity: PoolIdentity,
    ) -> Arc<Self> {
        // A logical sandbox has no console or usage of its own: the VM's would show the
        // other users'. It cannot be paused alone (that would freeze the other users' VM), nor
        // made from a warm runtime (a seat is a workspace, not a runtime). Built once per
        // process.
        let capabilities: &'static [Capability] = Box::leak(
            inner
                .capabilities()
                .iter()
                .copied()
                .filter(|c| {
                    !matches!(
                        c,
                        Capability::Console
                            | Capability::Stats
                            | Capability::Pause
                            | Capability::WarmPool
                    )
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        Arc::new_cyclic(|this| Pool {
            seats: Mutex::new(Seats::new(config.max_vms, config.max_users_per_vm)),
            config,
            inner,
            store,
            clock,
            identity,
            capabilities,
            loaded: OnceCell::new(),
            this: this.clone(),
        })
    }

    fn seats(&self) -> MutexGuard<'_, Seats> {
        // Every change to the seats is a single step: a panic cannot leave it half-made.
        self.seats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The provider name of the pool's VMs (and of its logical sandboxes).
    pub fn provider_name(&self) -> &'static str {
        self.inner.name()
    }

    /// `pool.image`.
    pub fn image(&self) -> &str {
        &self.config.image
    }

    /// `pool.overflow` is `queue`.
    pub fn queues(&self) -> bool {
        self.config.overflow == svc_core::config::SpawnOverflow::Queue
    }

    /// Status for `GET /pool/status`.
    pub fn status(&self) -> PoolStatus {
        let (vms, users) = self.seats().counts();
        PoolStatus {
            enabled: true,
            vms: Some(vms as u64),
            max_vms: Some(u64::from(self.config.max_vms)),
            total_users: Some(users as u64),
            max_users_per_vm: Some(u64::from(self.config.max_users_per_vm)),
        }
    }

    /// [`Pool::reserve`] for tests that spawn through the provider directly (the conformance
    /// cases), without admission.
    #[cfg(feature = "test-support")]
    pub async fn reserve_for_tests(&self, owner: &str, id: &SandboxId) -> Result<(), Error> {
        self.reserve(OwnerId::parse(owner).ok().as_ref(), id).await
    }

    /// Reserves a seat for `owner`'s new sandbox `id` (admission): 409 when the owner holds a
    /// sandbox (here or, per the store, on another worker), 503 when the pool is full.
    pub(crate) async fn reserve(
        &self,
        owner: Option<&OwnerId>,
        id: &SandboxId,
    ) -> Result<(), Error> {
        let Some(owner) = owner.map(OwnerId::as_str) else {
            return Err(Error::invalid(
                "X-User-ID",
                "an anonymous caller has no workspace in pool mode: name the owner",
            ));
        };
        if workspace::workspace_of(owner).is_none() {
            return Err(Error::invalid(
                "X-User-ID",
                format!("{owner:?} cannot name a workspace in pool mode"),
            ));
        }
        self.ensure_loaded()
            .await
            .map_err(|e| Error::provider(self.inner.name(), "load the pool", e))?;
        if let Some(existing) = self.store.newest_active_sandbox_of_owner(owner).await? {
            return Err(Error::OwnerHasSandbox {
                owner: owner.to_owned(),
                existing: Some(existing.id.to_string()),
            });
        }
        let reserved = self.seats().reserve(owner, id);
        match reserved {
            Ok(_) => Ok(()),
            Err(Refusal::Taken { existing }) => Err(Error::OwnerHasSandbox {
                owner: owner.to_owned(),
                existing: Some(existing.to_string()),
            }),
            Err(Refusal::Full { vms }) => Err(Error::PoolFull {
                message: format!(
                    "the pool is full: {vms} VMs (pool.max_vms {}) with {} users each (pool.max_users_per_vm)",
                    self.config.max_vms, self.config.max_users_per_vm
                ),
            }),
        }
    }

    /// Gives back a seat reserved for a spawn that was not admitted after all.
    pub(crate) fn cancel(&self, id: &SandboxId) {
        self.free_seat(id);
    }

    /// Frees the seat of `id`; an emptied VM goes after `pool.idle_timeout` unless someone
    /// sits down in it first.
    fn free_seat(&self, id: &SandboxId) -> Option<(SandboxId, Seat)> {
        let now = Instant::now();
        let (vm, seat, empty) = self.seats().release(id, now)?;
        if empty {
            self.retire_when_idle(vm.clone(), now);
        }
        Some((vm, seat))
    }

    fn retire_when_idle(&self, vm: SandboxId, since: Instant) {
        let Some(pool) = self.this.upgrade() else {
            return;
        };
        let grace = self.config.idle_timeout.as_std();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if pool.seats().take_idle(&vm, since) {
                tracing::info!(vm = %vm, "destroying an idle pool VM");
                pool.destroy_vm(&vm).await;
            }
        });
    }

    /// Destroys a VM that is out of the seats, and lets its lease go.
    async fn destroy_vm(&self, vm: &SandboxId) {
        if let Err(err) = self.inner.destroy(vm).await {
            // Reconciliation of the next start finds it empty and retires it then.
            tracing::warn!(vm = %vm, error = %err, "a pool VM could not be destroyed");
            return;
        }
        let _ = self
            .store
            .release_lease(&lease_id(vm), &self.identity.worker_id, self.clock.now())
            .await;
    }

    /// Where `id` sits, when it is a placed logical sandbox.
    fn place_of(&self, id: &SandboxId) -> Option<Place> {
        let seats = self.seats();
        let (vm, seat) = seats.find(id)?;
        Some(Place {
            vm: vm.id.clone(),
            workspace: workspace::workspace_of(&seat.owner)?,
            seat: seat.clone(),
        })
        .filter(|place| place.seat.placed)
    }

    /// Whether commands can run as the workspace's own user.
    fn switches_users(&self) -> bool {
        self.inner.runs_exec_as_user()
    }

    /// The user argument of the workspace scripts.
    fn uid_arg(&self, uid: u32) -> String {
        if self.switches_users() {
            uid.to_string()
        } else {
            "-".to_owned()
        }
    }

    /// Runs a workspace script as root in `vm` with `/` as working directory; its exit code
    /// and what it printed.
    async fn script(
        &self,
        vm: &SandboxId,
        script: &str,
        args: &[&str],
    ) -> Result<(i32, String), ProviderError> {
        let root = self.switches_users().then(|| ExecUser {
            uid: 0,
            gid: 0,
            home: svc_core::path::SandboxPath::root(),
        });
        let out = ShellFiles::new(self.inner.as_ref(), vm, root)
            .in_dir(svc_core::path::SandboxPath::root())
            .script(script, args)
            .await?;
        if out.code != 0 && !out.stderr.is_empty() {
            tracing::debug!(vm = %vm, code = out.code, stderr = %String::from_utf8_lossy(&out.stderr), "pool script failed");
        }
        Ok((out.code, String::from_utf8_lossy(&out.stdout).into_owned()))
    }

    /// Runs a script that must succeed.
    async fn must(
        &self,
        vm: &SandboxId,
        what: &str,
        script: &str,
        args: &[&str],
    ) -> Result<String, ProviderError> {
        match self.script(vm, script, args).await? {
            (0, out) => Ok(out),
            (code, _) => Err(ProviderError::failed(format!(
                "{what} in pool VM {vm} failed (exit code {code})"
            ))),
        }
    }

    /// Starts pool VM `vm`: its lease first, then the runtime, then its workspace parent.
    async fn create_vm(&self, vm: &SandboxId) -> Result<(), ProviderError> {
        let lease = self
            .store
            .acquire_lease(
                &lease_id(vm),
                &self.identity.worker_id,
                self.identity.lease_ttl,
                self.clock.now(),
            )
            .await
            .map_err(|e| ProviderError::caused("taking the pool VM's lease", e))?;
        if let svc_core::worker::LeaseAcquire::Held(held) = lease {
            return Err(ProviderError::failed(format!(
                "pool VM {vm} is leased by worker {}",
                held.holder_id
            )));
        }
        let spec = SpawnSpec {
            id: vm.clone(),
            image: self.config.image.clone(),
            memory_mb: u32::try_from(self.config.memory_mb).unwrap_or(u32::MAX),
            vcpus: self.config.vcpus,
            env: BTreeMap::new(),
            network: None,
            labels: BTreeMap::from([
                (LABEL_MANAGED.to_owned(), "true".to_owned()),
                (LABEL_SANDBOX_ID.to_owned(), vm.to_string()),
                (LABEL_WORKER.to_owned(), self.identity.worker_id.clone()),
                (
                    LABEL_INSTALLATION.to_owned(),
                    self.identity.installation_id.clone(),
                ),
                (LABEL_POOL.to_owned(), POOL_VM.to_owned()),
            ]),
            multi_user: true,
            egress: svc_core::egress::Egress::default(),
            progress: Default::default(),
        };
        let made = async {
            self.inner.spawn(&spec).await?;
            self.must(vm, "preparing the VM", workspace::PREPARE_VM, &[])
                .await
                .map(drop)
        }
        .await;
        if let Err(err) = made {
            let _ = self.inner.destroy(vm).await;
            let _ = self
                .store
                .release_lease(&lease_id(vm), &self.identity.worker_id, self.clock.now())
                .await;
            return Err(err);
        }
        tracing::info!(vm = %vm, provider = self.inner.name(), "pool VM started");
        Ok(())
    }

    /// Finds the pool VMs and workspaces an earlier run of this worker left, once.
    async fn ensure_loaded(&self) -> Result<(), ProviderError> {
        self.loaded.get_or_try_init(|| self.load()).await.map(drop)
    }

    async fn load(&self) -> Result<(), ProviderError> {
        let runtimes = match self.inner.inventory().await {
            Ok(runtimes) => runtimes,
            Err(ProviderError::Unsupported { .. }) => return Ok(()),
            Err(err) => return Err(err),
        };
        for runtime in runtimes.into_iter().filter(|r| self.is_our_vm(&r.labels)) {
            let vm = runtime.sandbox_id;
            if !runtime.running {
                self.destroy_vm(&vm).await;
                continue;
            }
            let listing = self
                .must(&vm, "listing workspaces", workspace::LIST_WORKSPACES, &[])
                .await?;
            let mut seats = BTreeMap::new();
            for (id, owner, uid) in listing.lines().filter_map(workspace::parse_listing) {
                let Ok(id) = SandboxId::parse(&id) else {
                    continue;
                };
                let record = self
                    .store
                    .get_sandbox(&id)
                    .await
                    .map_err(|e| ProviderError::caused(format!("reading sandbox {id}"), e))?;
                match record.filter(|r| r.holds_runtime()) {
                    Some(record) => {
                        seats.insert(
                            id,
                            Seat {
                                owner,
                                uid: uid.unwrap_or(seats::FIRST_UID),
                                env: record.env,
                                placed: true,
                            },
                        );
                    }
                    None => {
                        // Its sandbox ended while svc was down.
                        let uid = uid.map_or_else(|| "-".to_owned(), |u| u.to_string());
                        let _ = self
                            .script(
                                &vm,
                                workspace::REMOVE_WORKSPACE,
                                &[&owner, &uid, id.as_str()],
                            )
                            .await;
                    }
                }
            }
            let _ = self
                .store
                .acquire_lease(
                    &lease_id(&vm),
                    &self.identity.worker_id,
                    self.identity.lease_ttl,
                    self.clock.now(),
                )
                .await;
            tracing::info!(vm = %vm, users = seats.len(), "found a pool VM of an earlier run");
            let idle = self.seats().adopt(vm.clone(), seats, Instant::now());
            if let Some(since) = idle {
                self.retire_when_idle(vm, since);
            }
        }
        Ok(())
    }

    /// A pool VM this worker of this installation made.
    fn is_our_vm(&self, labels: &BTreeMap<String, String>) -> bool {
        let is = |key: &str, value: &str| labels.get(key).map(String::as_str) == Some(value);
        is(LABEL_POOL, POOL_VM)
            && is(LABEL_WORKER, &self.identity.worker_id)
            && is(LABEL_INSTALLATION, &self.identity.installation_id)
    }
}

/// The lease of pool VM `vm`.
fn lease_id(vm: &SandboxId) -> String {
    format!("pool-vm:{vm}")
}
