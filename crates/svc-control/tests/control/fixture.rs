//! The control plane on real parts it can break at will: the mock provider in a temporary
//! directory and in-memory SQLite, each behind a wrapper that injects faults (a store write
//! that fails or panics on the Nth call, a provider spawn that fails, hangs or is slow), and a
//! manual clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use svc_control::{
    Authenticator, ControlPlane, ControlPlaneParts, EventFilter, Principal, ProviderRegistry,
    Subscription,
};
use svc_core::access::Role;
use svc_core::admission::Admission;
use svc_core::audit::{AuditEntry, AuditFilter};
use svc_core::config::Config;
use svc_core::quota::{GlobalLimits, OwnerQuota, QuotaLimits, QuotaSummary};
use svc_core::sandbox::{Ending, Sandbox};
use svc_core::template::Template;
use svc_core::tenant::{Member, Policy, Tenant};
use svc_core::worker::{Lease, LeaseAcquire, LeaseCounts, Worker, WorkerHeartbeat, WorkerStatus};
use svc_core::{Capability, ManualClock, OwnerId, SandboxId, Timestamp};
use svc_provider::mock::MockProvider;
use svc_provider::{Provider, ProviderError, RuntimeInfo, RuntimeStatus, SpawnSpec};
use svc_store::sqlite::SqliteStore;
use svc_store::{EndedState, SandboxFilter, Store, StoreError, StoreResult};

/// What the provider does at spawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnFault {
    /// Works.
    None,
    /// Answers an error.
    Fail,
    /// Never answers.
    Hang,
    /// Works, after this long.
    Slow(Duration),
    /// Panics.
    Panic,
    /// Answers an error once the test calls [`FaultyProvider::release`].
    FailWhenReleased,
}

/// The mock provider with injectable faults.
pub struct FaultyProvider {
    inner: MockProvider,
    pub spawn_fault: Mutex<SpawnFault>,
    pub destroy_fails: Mutex<bool>,
    pub spawns_started: AtomicUsize,
    released: tokio::sync::Notify,
    /// Runtimes reported as existing but no longer running (a container that exited).
    pub stopped: Mutex<std::collections::HashSet<SandboxId>>,
}

impl FaultyProvider {
    pub fn new(root: &std::path::Path) -> Self {
        FaultyProvider {
            inner: MockProvider::new(root),
            spawn_fault: Mutex::new(SpawnFault::None),
            destroy_fails: Mutex::new(false),
            spawns_started: AtomicUsize::new(0),
            released: tokio::sync::Notify::new(),
            stopped: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// From now on, `id`'s runtime exists but no longer runs.
    pub fn stop(&self, id: &SandboxId) {
        self.stopped.lock().unwrap().insert(id.clone());
    }

    fn has_stopped(&self, id: &SandboxId) -> bool {
        self.stopped.lock().unwrap().contains(id)
    }

    pub fn set_spawn(&self, fault: SpawnFault) {
        *self.spawn_fault.lock().unwrap() = fault;
    }

    /// Lets a spawn waiting in [`SpawnFault::FailWhenReleased`] fail (or the next one at once).
    pub fn release(&self) {
        self.released.notify_one();
    }
}

#[async_trait]
impl Provider for FaultyProvider {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> &'static [Capability] {
        self.inner.capabilities()
    }

    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value> {
        self.inner.config_summary()
    }

    async fn health(&self) -> Result<(), ProviderError> {
        self.inner.health().await
    }

    async fn exec_path(&self, id: &SandboxId) -> Option<String> {
        self.inner.exec_path(id).await
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError> {
        self.spawns_started.fetch_add(1, Ordering::SeqCst);
        let fault = *self.spawn_fault.lock().unwrap();
        match fault {
            SpawnFault::None => self.inner.spawn(spec).await,
            SpawnFault::Fail => Err(ProviderError::failed("injected spawn failure")),
            SpawnFault::Hang => std::future::pending().await,
            SpawnFault::Slow(delay) => {
                tokio::time::sleep(delay).await;
                self.inner.spawn(spec).await
            }
            SpawnFault::Panic => panic!("injected provider panic"),
            SpawnFault::FailWhenReleased => {
                self.released.notified().await;
                Err(ProviderError::failed("injected spawn failure, released"))
            }
        }
    }

    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError> {
        if *self.destroy_fails.lock().unwrap() {
            return Err(ProviderError::unavailable("injected destroy failure"));
        }
        self.inner.destroy(id).await
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        if *self.destroy_fails.lock().unwrap() {
            return Err(ProviderError::unavailable("injected status failure"));
        }
        match self.inner.status(id).await? {
            RuntimeStatus::Running if self.has_stopped(id) => Ok(RuntimeStatus::Stopped),
            status => Ok(status),
        }
    }

    async fn inventory(&self) -> Result<Vec<RuntimeInfo>, ProviderError> {
        let mut runtimes = self.inner.inventory().await?;
        for runtime in &mut runtimes {
            runtime.running &= !self.has_stopped(&runtime.sandbox_id);
        }
        Ok(runtimes)
    }

    async fn pause(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.inner.pause(id).await
    }

    async fn resume(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.inner.resume(id).await
    }

    async fn claim(&self, warm: &SandboxId, id: &SandboxId) -> Result<(), ProviderError> {
        self.inner.claim(warm, id).await
    }

    async fn exec(
        &self,
        id: &SandboxId,
        spec: svc_provider::ExecSpec,
    ) -> Result<svc_provider::ExecSession, ProviderError> {
        self.inner.exec(id, spec).await
    }

    async fn connect(
        &self,
        id: &SandboxId,
        port: u16,
    ) -> Result<svc_provider::PortStream, ProviderError> {
        self.inner.connect(id, port).await
    }
}

/// What the store does on its Nth write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFault {
    /// Answers a backend error.
    Fail,
    /// Panics (a bug in the middle of a spawn).
    Panic,
}

/// SQLite in memory; write number `fail_at` (1-based, counted from [`FaultyStore::arm`]) fails.
pub struct FaultyStore {
    inner: Arc<SqliteStore>,
    /// How long the admitting write takes; it completes even when its caller is gone, as a
    /// real write handed to the database does.
    pub admit_delay: Mutex<Option<Duration>>,
    /// Admitting writes begun.
    pub admits_started: AtomicUsize,
    writes: AtomicUsize,
    /// Writes `from..from + count` (numbered since creation) fail this way.
    fault: Mutex<Option<(usize, usize, WriteFault)>>,
}

impl FaultyStore {
    pub async fn new() -> Self {
        FaultyStore {
            inner: Arc::new(SqliteStore::open(":memory:").await.unwrap()),
            admit_delay: Mutex::new(None),
            admits_started: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
            fault: Mutex::new(None),
        }
    }

    /// The `nth` write from now fails this way.
    pub fn arm(&self, nth: usize, fault: WriteFault) {
        self.arm_span(nth, 1, fault);
    }

    /// `count` writes from the `nth` one from now fail this way.
    pub fn arm_span(&self, nth: usize, count: usize, fault: WriteFault) {
        let base = self.writes.load(Ordering::SeqCst);
        *self.fault.lock().unwrap() = Some((base + nth, count, fault));
    }

    fn write(&self, operation: &'static str) -> StoreResult<()> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let fault = *self.fault.lock().unwrap();
        match fault {
            Some((from, count, kind)) if (from..from + count).contains(&n) => match kind {
                WriteFault::Fail => Err(StoreError::Backend {
                    operation,
                    source: "injected write failure".into(),
                }),
                WriteFault::Panic => panic!("injected store panic in {operation}"),
            },
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Store for FaultyStore {
    fn backend(&self) -> &'static str {
        "faulty-sqlite"
    }
    async fn installation_id(&self) -> StoreResult<String> {
        self.inner.installation_id().await
    }

    async fn preview_key(&self) -> StoreResult<String> {
        self.inner.preview_key().await
    }
    async fn ping(&self) -> StoreResult<Duration> {
        self.inner.ping().await
    }
    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()> {
        self.write("insert_sandbox")?;
        self.inner.insert_sandbox(sandbox).await
    }
    async fn admit_sandbox(
        &self,
        sandbox: &Sandbox,
        lifetime: Duration,
        limits: GlobalLimits,
        lease_ttl: Duration,
    ) -> StoreResult<Admission> {
        self.write("admit_sandbox")?;
        self.admits_started.fetch_add(1, Ordering::SeqCst);
        let delay = *self.admit_delay.lock().unwrap();
        let Some(delay) = delay else {
            return self
                .inner
                .admit_sandbox(sandbox, lifetime, limits, lease_ttl)
                .await;
        };
        let inner = Arc::clone(&self.inner);
        let sandbox = sandbox.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            inner
                .admit_sandbox(&sandbox, lifetime, limits, lease_ttl)
                .await
        })
        .await
        .unwrap()
    }
    async fn check_admission(
        &self,
        owner: Option<&OwnerId>,
        lifetime: Duration,
        limits: GlobalLimits,
    ) -> StoreResult<Admission> {
        self.inner.check_admission(owner, lifetime, limits).await
    }
    async fn mark_sandbox_running(
        &self,
        id: &SandboxId,
        exec_path: Option<&str>,
    ) -> StoreResult<Option<Sandbox>> {
        self.write("mark_sandbox_running")?;
        self.inner.mark_sandbox_running(id, exec_path).await
    }
    async fn end_sandbox(
        &self,
        id: &SandboxId,
        state: EndedState,
        ending: &Ending,
        at: Timestamp,
    ) -> StoreResult<Option<Sandbox>> {
        self.write("end_sandbox")?;
        self.inner.end_sandbox(id, state, ending, at).await
    }
    async fn get_sandbox(&self, id: &SandboxId) -> StoreResult<Option<Sandbox>> {
        self.inner.get_sandbox(id).await
    }
    async fn list_sandboxes(&self, filter: &SandboxFilter) -> StoreResult<Vec<Sandbox>> {
        self.inner.list_sandboxes(filter).await
    }
    async fn newest_active_sandbox_of_owner(&self, owner_id: &str) -> StoreResult<Option<Sandbox>> {
        self.inner.newest_active_sandbox_of_owner(owner_id).await
    }
    async fn count_active_sandboxes(&self, owner_id: Option<&str>) -> StoreResult<u64> {
        self.inner.count_active_sandboxes(owner_id).await
    }
    async fn count_active_sandboxes_by_worker(
        &self,
    ) -> StoreResult<std::collections::BTreeMap<String, u64>> {
        self.inner.count_active_sandboxes_by_worker().await
    }
    async fn count_sandboxes_on_provider(&self, provider: &str) -> StoreResult<u64> {
        self.inner.count_sandboxes_on_provider(provider).await
    }
    async fn sandbox_groups(&self) -> StoreResult<Vec<svc_core::observe::SandboxGroup>> {
        self.inner.sandbox_groups().await
    }
    async fn set_sandbox_expiry(
        &self,
        id: &SandboxId,
        expires_at: Timestamp,
    ) -> StoreResult<Option<Sandbox>> {
        self.write("set_sandbox_expiry")?;
        self.inner.set_sandbox_expiry(id, expires_at).await
    }
    async fn pause_sandbox(&self, id: &SandboxId, at: Timestamp) -> StoreResult<Option<Sandbox>> {
        self.write("pause_sandbox")?;
        self.inner.pause_sandbox(id, at).await
    }
    async fn resume_sandbox(&self, id: &SandboxId, at: Timestamp) -> StoreResult<Option<Sandbox>> {
        self.write("resume_sandbox")?;
        self.inner.resume_sandbox(id, at).await
    }
    async fn reassign_sandbox(
        &self,
        id: &SandboxId,
        from: &str,
        to: &str,
    ) -> StoreResult<Option<Sandbox>> {
        self.write("reassign_sandbox")?;
        self.inner.reassign_sandbox(id, from, to).await
    }
    async fn list_expired_sandboxes(&self, now: Timestamp) -> StoreResult<Vec<Sandbox>> {
        self.inner.list_expired_sandboxes(now).await
    }
    async fn purge_destroyed_before(&self, cutoff: Timestamp) -> StoreResult<u64> {
        self.write("purge_destroyed_before")?;
        self.inner.purge_destroyed_before(cutoff).await
    }
    async fn insert_template(&self, template: &Template) -> StoreResult<()> {
        self.write("insert_template")?;
        self.inner.insert_template(template).await
    }
    async fn get_template(&self, name: &str) -> StoreResult<Option<Template>> {
        self.inner.get_template(name).await
    }
    async fn list_templates(
        &self,
        page: &svc_store::KeyPage,
        tenant: Option<&str>,
    ) -> StoreResult<Vec<Template>> {
        self.inner.list_templates(page, tenant).await
    }
    async fn update_template(&self, template: &Template) -> StoreResult<Option<Template>> {
        self.write("update_template")?;
        self.inner.update_template(template).await
    }
    async fn set_creating_message(&self, id: &SandboxId, message: &str) -> StoreResult<bool> {
        self.write("set_creating_message")?;
        self.inner.set_creating_message(id, message).await
    }
    async fn delete_template(&self, name: &str, tenant_id: Option<&str>) -> StoreResult<bool> {
        self.write("delete_template")?;
        self.inner.delete_template(name, tenant_id).await
    }
    async fn insert_build(
        &self,
        build: &svc_core::build::TemplateBuild,
        worker_id: &str,
    ) -> StoreResult<()> {
        self.write("insert_build")?;
        self.inner.insert_build(build, worker_id).await
    }
    async fn get_build(
        &self,
        template: &str,
        build_id: &svc_core::BuildId,
    ) -> StoreResult<Option<svc_core::build::TemplateBuild>> {
        self.inner.get_build(template, build_id).await
    }
    async fn list_builds(
        &self,
        template: &str,
        limit: u32,
    ) -> StoreResult<Vec<svc_core::build::TemplateBuild>> {
        self.inner.list_builds(template, limit).await
    }
    async fn list_running_builds(
        &self,
        worker_id: &str,
    ) -> StoreResult<Vec<svc_core::build::TemplateBuild>> {
        self.inner.list_running_builds(worker_id).await
    }
    async fn end_build(
        &self,
        build_id: &svc_core::BuildId,
        ending: &svc_store::BuildEnding,
        keep: u32,
    ) -> StoreResult<Option<svc_core::build::TemplateBuild>> {
        self.write("end_build")?;
        self.inner.end_build(build_id, ending, keep).await
    }
    async fn append_build_log(
        &self,
        build_id: &svc_core::BuildId,
        lines: &[String],
    ) -> StoreResult<()> {
        self.write("append_build_log")?;
        self.inner.append_build_log(build_id, lines).await
    }
    async fn build_log_after(
        &self,
        build_id: &svc_core::BuildId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<(i64, String)>> {
        self.inner.build_log_after(build_id, after, limit).await
    }
    async fn list_built_images(&self, worker_id: &str) -> StoreResult<Vec<String>> {
        self.inner.list_built_images(worker_id).await
    }
    async fn forget_built_image(&self, image: &str) -> StoreResult<bool> {
        self.write("forget_built_image")?;
        self.inner.forget_built_image(image).await
    }
    async fn active_images(&self) -> StoreResult<Vec<String>> {
        self.inner.active_images().await
    }
    async fn put_quota(
        &self,
        owner_id: &str,
        limits: QuotaLimits,
        at: Timestamp,
    ) -> StoreResult<OwnerQuota> {
        self.write("put_quota")?;
        self.inner.put_quota(owner_id, limits, at).await
    }
    async fn get_quota(&self, owner_id: &str) -> StoreResult<Option<OwnerQuota>> {
        self.inner.get_quota(owner_id).await
    }
    async fn list_quotas(&self, page: &svc_store::KeyPage) -> StoreResult<Vec<OwnerQuota>> {
        self.inner.list_quotas(page).await
    }
    async fn delete_quota(&self, owner_id: &str) -> StoreResult<bool> {
        self.write("delete_quota")?;
        self.inner.delete_quota(owner_id).await
    }
    async fn quota_summary(&self) -> StoreResult<QuotaSummary> {
        self.inner.quota_summary().await
    }
    async fn upsert_worker(
        &self,
        id: &str,
        heartbeat: &WorkerHeartbeat,
        at: Timestamp,
    ) -> StoreResult<Worker> {
        self.write("upsert_worker")?;
        self.inner.upsert_worker(id, heartbeat, at).await
    }
    async fn set_worker_status(
        &self,
        id: &str,
        status: WorkerStatus,
        at: Timestamp,
    ) -> StoreResult<Option<Worker>> {
        self.write("set_worker_status")?;
        self.inner.set_worker_status(id, status, at).await
    }
    async fn get_worker(&self, id: &str) -> StoreResult<Option<Worker>> {
        self.inner.get_worker(id).await
    }
    async fn list_workers(&self, page: &svc_store::KeyPage) -> StoreResult<Vec<Worker>> {
        self.inner.list_workers(page).await
    }
    async fn delete_worker(&self, id: &str) -> StoreResult<bool> {
        self.write("delete_worker")?;
        self.inner.delete_worker(id).await
    }
    async fn acquire_lease(
        &self,
        resource_id: &str,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<LeaseAcquire> {
        self.write("acquire_lease")?;
        self.inner
            .acquire_lease(resource_id, holder, ttl, now)
            .await
    }
    async fn renew_lease(
        &self,
        resource_id: &str,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<Option<Lease>> {
        self.write("renew_lease")?;
        self.inner.renew_lease(resource_id, holder, ttl, now).await
    }
    async fn renew_leases_held_by(
        &self,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<u64> {
        self.write("renew_leases_held_by")?;
        self.inner.renew_leases_held_by(holder, ttl, now).await
    }
    async fn release_lease(
        &self,
        resource_id: &str,
        holder: &str,
        now: Timestamp,
    ) -> StoreResult<bool> {
        self.write("release_lease")?;
        self.inner.release_lease(resource_id, holder, now).await
    }
    async fn get_lease(&self, resource_id: &str) -> StoreResult<Option<Lease>> {
        self.inner.get_lease(resource_id).await
    }
    async fn list_leases(&self) -> StoreResult<Vec<Lease>> {
        self.inner.list_leases().await
    }
    async fn lease_counts(&self, now: Timestamp) -> StoreResult<LeaseCounts> {
        self.inner.lease_counts(now).await
    }
    async fn create_tenant(&self, tenant: &Tenant) -> StoreResult<()> {
        self.write("create_tenant")?;
        self.inner.create_tenant(tenant).await
    }
    async fn get_tenant(&self, id: &str) -> StoreResult<Option<Tenant>> {
        self.inner.get_tenant(id).await
    }
    async fn list_tenants(&self) -> StoreResult<Vec<Tenant>> {
        self.inner.list_tenants().await
    }
    async fn delete_tenant(&self, id: &str) -> StoreResult<bool> {
        self.write("delete_tenant")?;
        self.inner.delete_tenant(id).await
    }
    async fn put_member(&self, member: &Member) -> StoreResult<Member> {
        self.write("put_member")?;
        self.inner.put_member(member).await
    }
    async fn list_members(&self, tenant_id: &str) -> StoreResult<Vec<Member>> {
        self.inner.list_members(tenant_id).await
    }
    async fn delete_member(&self, tenant_id: &str, subject: &str) -> StoreResult<bool> {
        self.write("delete_member")?;
        self.inner.delete_member(tenant_id, subject).await
    }
    async fn member_role(&self, tenant_id: &str, subject: &str) -> StoreResult<Option<Role>> {
        self.inner.member_role(tenant_id, subject).await
    }
    async fn create_policy(&self, policy: &Policy) -> StoreResult<()> {
        self.write("create_policy")?;
        self.inner.create_policy(policy).await
    }
    async fn get_policy(&self, tenant_id: &str, id: &str) -> StoreResult<Option<Policy>> {
        self.inner.get_policy(tenant_id, id).await
    }
    async fn list_policies(&self, tenant_id: &str) -> StoreResult<Vec<Policy>> {
        self.inner.list_policies(tenant_id).await
    }
    async fn update_policy(&self, policy: &Policy) -> StoreResult<Option<Policy>> {
        self.write("update_policy")?;
        self.inner.update_policy(policy).await
    }
    async fn delete_policy(&self, tenant_id: &str, id: &str) -> StoreResult<bool> {
        self.write("delete_policy")?;
        self.inner.delete_policy(tenant_id, id).await
    }
    async fn save_exec(&self, exec: &svc_store::StoredExec, keep_ended: u32) -> StoreResult<()> {
        self.write("save_exec")?;
        self.inner.save_exec(exec, keep_ended).await
    }
    async fn list_execs_on_worker(
        &self,
        worker_id: &str,
    ) -> StoreResult<Vec<svc_store::StoredExec>> {
        self.inner.list_execs_on_worker(worker_id).await
    }
    async fn delete_execs(&self, sandbox_id: &SandboxId) -> StoreResult<u64> {
        self.write("delete_execs")?;
        self.inner.delete_execs(sandbox_id).await
    }
    async fn insert_audit(&self, entry: &AuditEntry) -> StoreResult<()> {
        self.write("insert_audit")?;
        self.inner.insert_audit(entry).await
    }
    async fn list_audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditEntry>> {
        self.inner.list_audit(filter).await
    }
    async fn close(&self) {
        self.inner.close().await;
    }
}

/// A control plane over faulty parts.
pub struct Fixture {
    pub plane: ControlPlane,
    pub store: Arc<FaultyStore>,
    pub provider: Arc<FaultyProvider>,
    pub clock: Arc<ManualClock>,
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub async fn new() -> Self {
        Self::with(|_| {}).await
    }

    pub async fn with(adjust: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FaultyStore::new().await);
        let provider = Arc::new(FaultyProvider::new(&dir.path().join("mock")));
        let clock = Arc::new(ManualClock::new(svc_core::Clock::now(
            &svc_core::clock::SystemClock,
        )));
        let plane = Self::plane_over(&store, &provider, &clock, adjust, false);
        Fixture {
            plane,
            store,
            provider,
            clock,
            dir,
        }
    }

    /// A second control plane on the same store and provider (a restart), with the provider
    /// enabled or only retired.
    pub fn restarted(&self, retired: bool) -> ControlPlane {
        Self::plane_over(&self.store, &self.provider, &self.clock, |_| {}, retired)
    }

    /// Another control plane on the same store, provider and clock, as worker `id` (a replica).
    pub fn as_worker(&self, id: &str) -> ControlPlane {
        let id = id.to_owned();
        Self::plane_over(
            &self.store,
            &self.provider,
            &self.clock,
            |c| c.worker.id = id,
            false,
        )
    }

    /// What start-up recovery does on a restarted control plane.
    /// A restart as the server does it: recovery, then reconciliation.
    pub async fn recover_after_restart(
        &self,
    ) -> (svc_control::RecoveryReport, svc_control::ReconcileReport) {
        let plane = self.restarted(false);
        let recovered = plane
            .recover_interrupted_spawns(&Principal::system())
            .await
            .unwrap();
        let reconciled = plane.reconcile(&Principal::system()).await.unwrap();
        (recovered, reconciled)
    }

    /// Spawns with every default in a task of its own.
    pub fn spawn_in_background(&self) -> tokio::task::JoinHandle<Result<Sandbox, svc_core::Error>> {
        let (plane, admin) = (self.plane.clone(), self.admin());
        tokio::spawn(async move {
            plane
                .spawn_sandbox(&admin, svc_core::sandbox::SpawnRequest::default())
                .await
        })
    }

    /// Spawns waiting in the queue now.
    pub async fn queue_depth(&self) -> usize {
        self.plane
            .scheduler_stats()
            .await
            .unwrap()
            .queue
            .spawn_queue_depth
    }

    fn plane_over(
        store: &Arc<FaultyStore>,
        provider: &Arc<FaultyProvider>,
        clock: &Arc<ManualClock>,
        adjust: impl FnOnce(&mut Config),
        retired: bool,
    ) -> ControlPlane {
        let mut config = Config::default();
        config.defaults.spawn_timeout = svc_core::GoDuration::from_millis(300);
        adjust(&mut config);
        let clock: Arc<dyn svc_core::Clock> = Arc::clone(clock) as Arc<dyn svc_core::Clock>;
        let provider: Arc<dyn Provider> = Arc::clone(provider) as Arc<dyn Provider>;
        let registry = if retired {
            ProviderRegistry::new(Vec::new(), String::new(), Arc::clone(&clock))
                .with_retired(vec![provider])
        } else {
            ProviderRegistry::new(vec![provider], "mock".into(), Arc::clone(&clock))
        };
        ControlPlane::new(ControlPlaneParts {
            config: Arc::new(config),
            store: Arc::clone(store) as Arc<dyn Store>,
            providers: Arc::new(registry),
            clock,
            authenticator: Authenticator::Open,
            installation_id: "fixture".to_owned(),
            event_log: None,
            builder: None,
        })
    }

    /// A spawn with every default, as the anonymous admin.
    pub async fn spawn(&self) -> Result<Sandbox, svc_core::Error> {
        self.plane
            .spawn_sandbox(&self.admin(), svc_core::sandbox::SpawnRequest::default())
            .await
    }

    pub fn admin(&self) -> Principal {
        Principal::anonymous(None)
    }

    /// Every event from now on (what an admin's subscription gets).
    pub fn events(&self) -> Subscription {
        self.plane.events().subscribe(EventFilter::default(), None)
    }

    /// Every record, in any state.
    pub async fn records(&self) -> Vec<Sandbox> {
        self.store
            .list_sandboxes(&SandboxFilter {
                state: svc_store::StateFilter::All,
                ..SandboxFilter::default()
            })
            .await
            .unwrap()
    }

    /// Sandbox IDs that have a runtime directory in the mock provider.
    pub fn runtimes(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.dir.path().join("mock")) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        ids.sort();
        ids
    }

    /// Waits until the first record is in `state`, or fails naming `what`.
    pub async fn wait_for_first_record(&self, what: &str, state: svc_core::sandbox::SandboxState) {
        self.wait_for(what, || async {
            self.records()
                .await
                .first()
                .is_some_and(|r| r.state == state)
        })
        .await;
    }

    /// Waits until `check` holds, or fails naming `what`.
    pub async fn wait_for<F: std::future::Future<Output = bool>>(
        &self,
        what: &str,
        mut check: impl FnMut() -> F,
    ) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !check().await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
