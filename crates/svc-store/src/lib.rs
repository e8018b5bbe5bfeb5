//! Durable state of svc behind one object-safe [`Store`] trait. Methods are domain operations,
//! each atomic in its backend, so callers never read-modify-write. Backends: [`sqlite`] (the
//! embedded default) and [`postgres`] (one database shared by several replicas); both store the
//! same rows with the same encodings (`rows`, shared) and pass the same contract suite.

mod error;
mod filter;
pub mod postgres;
mod rows;
pub mod sqlite;

use std::time::Duration;

use async_trait::async_trait;
use svc_core::access::Role;
use svc_core::admission::Admission;
use svc_core::audit::{AuditEntry, AuditFilter};
use svc_core::build::TemplateBuild;
use svc_core::quota::{GlobalLimits, OwnerQuota, QuotaLimits, QuotaSummary};
use svc_core::sandbox::{Ending, Sandbox};
use svc_core::template::Template;
use svc_core::tenant::{Member, Policy, Tenant};
use svc_core::worker::{Lease, LeaseAcquire, LeaseCounts, Worker, WorkerHeartbeat, WorkerStatus};
use svc_core::{BuildId, OwnerId, SandboxId, Timestamp};

pub use error::StoreError;
pub use filter::{KeyPage, SandboxFilter, SandboxPosition, StateFilter};

/// The two ways a sandbox ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedState {
    /// Removed on purpose (request, expiry, prune) or found gone.
    Destroyed,
    /// Failed (a spawn that did not complete, a provider failure).
    Error,
}

impl EndedState {
    /// The sandbox state it gives.
    pub fn state(self) -> svc_core::sandbox::SandboxState {
        match self {
            EndedState::Destroyed => svc_core::sandbox::SandboxState::Destroyed,
            EndedState::Error => svc_core::sandbox::SandboxState::Error,
        }
    }
}

/// One exec as kept for restarts (decisions §8): the API's record as JSON, and the provider's
/// handle on the command when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredExec {
    /// `ex-...`.
    pub exec_id: String,
    /// The sandbox it runs in.
    pub sandbox_id: SandboxId,
    /// When it started (orders a sandbox's records).
    pub started_at: Timestamp,
    /// Whether it has ended.
    pub ended: bool,
    /// The provider's reference to the command (a docker exec ID).
    pub handle: Option<String>,
    /// The record, JSON.
    pub record: String,
}

/// How a build ended ([`Store::end_build`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildEnding {
    /// `succeeded`, `failed` or `cancelled`.
    pub status: svc_core::build::BuildStatus,
    /// The image, on success.
    pub image: Option<String>,
    /// Why not, otherwise.
    pub error: Option<String>,
    /// When.
    pub at: Timestamp,
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Events shared by the replicas of one database (PostgreSQL; decisions §12): each replica
/// appends the events it publishes and reads the others'. A notification wakes readers; the
/// rows are the truth, so a reader that was away catches up from them.
#[async_trait]
pub trait EventLog: Send + Sync + 'static {
    /// Appends `(event ID, payload)` pairs published by `instance` at `at`, in order, and
    /// notifies the other replicas. An ID already appended is skipped.
    async fn append_events(
        &self,
        instance: &str,
        events: &[(String, String)],
        at: Timestamp,
    ) -> StoreResult<()>;

    /// Rows after `after`, oldest first, at most `limit`: `(seq, payload)`, the payload left out
    /// (`None`) for rows `instance` appended itself.
    async fn events_after(
        &self,
        instance: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<(i64, Option<String>)>>;

    /// The highest row number now (0 when empty): where a new reader starts.
    async fn last_event_seq(&self) -> StoreResult<i64>;

    /// Returns when another instance than `instance` appended events, or after `timeout`
    /// (whichever comes first; also after the listener reconnected, so the reader catches up).
    async fn wait_for_events(&self, instance: &str, timeout: Duration);

    /// Deletes rows appended before `before`; how many.
    async fn prune_events(&self, before: Timestamp) -> StoreResult<u64>;
}

/// Every piece of durable state, as domain operations.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The backend name for diagnostics (`sqlite`, `postgres`).
    fn backend(&self) -> &'static str;

    /// The database's random installation ID (made once, when the schema is created): runtimes
    /// carry it, so a deployment recognises what it made.
    async fn installation_id(&self) -> StoreResult<String>;

    /// The database's random key for signing preview tokens (made once, by a migration); a
    /// secret, never shown.
    async fn preview_key(&self) -> StoreResult<String>;

    /// Round-trips a trivial query; returns how long it took.
    async fn ping(&self) -> StoreResult<Duration>;

    /// Saves a new sandbox as it is. An existing ID is a [`StoreError::Conflict`].
    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()>;

    /// Admission and record in one write transaction: reads the owner's quota, counts the
    /// sandboxes holding a runtime (`creating`, `running`) as the limits need, decides
    /// (decisions §10 order) and, only when allowed, takes the sandbox's lease for its
    /// `worker_id` until `created_at + lease_ttl` and inserts `sandbox` (in state `creating`).
    /// Concurrent calls are serialised, so they never admit past a limit. The decision's counts
    /// are those the limits compare against (others read 0).
    async fn admit_sandbox(
        &self,
        sandbox: &Sandbox,
        lifetime: Duration,
        limits: GlobalLimits,
        lease_ttl: Duration,
    ) -> StoreResult<Admission>;

    /// The admission decision for a spawn of `owner` (none: anonymous) living `lifetime`,
    /// with every count filled in; writes nothing.
    async fn check_admission(
        &self,
        owner: Option<&OwnerId>,
        lifetime: Duration,
        limits: GlobalLimits,
    ) -> StoreResult<Admission>;

    /// Moves a `creating` sandbox to `running`. Returns the updated record, or `None` when it
    /// is not (or no longer) `creating`.
    async fn mark_sandbox_running(
        &self,
        id: &SandboxId,
        exec_path: Option<&str>,
    ) -> StoreResult<Option<Sandbox>>;

    /// Sets the `state_message` of a `creating` sandbox (how far its image pull is); false when
    /// it is not creating.
    async fn set_creating_message(&self, id: &SandboxId, message: &str) -> StoreResult<bool>;

    /// Ends a sandbox that has not ended: `state` is `destroyed` or `error`, with the reason
    /// and message of `ending`, and lets its lease lapse at `at`, in one transaction. Returns
    /// the updated record, or `None` when it does not exist or has already ended (so exactly
    /// one caller wins).
    async fn end_sandbox(
        &self,
        id: &SandboxId,
        state: EndedState,
        ending: &Ending,
        at: Timestamp,
    ) -> StoreResult<Option<Sandbox>>;

    /// One sandbox, in any state.
    async fn get_sandbox(&self, id: &SandboxId) -> StoreResult<Option<Sandbox>>;

    /// Sandboxes matching `filter`, newest first.
    async fn list_sandboxes(&self, filter: &SandboxFilter) -> StoreResult<Vec<Sandbox>>;

    /// The newest sandbox (by `created_at`, then ID) of `owner_id` holding a runtime
    /// (`creating`, `running`, `paused`), in one query that reads only that owner's rows.
    async fn newest_active_sandbox_of_owner(&self, owner_id: &str) -> StoreResult<Option<Sandbox>>;

    /// Number of sandboxes holding a runtime (`creating`, `running`, `paused`), optionally of
    /// one owner.
    async fn count_active_sandboxes(&self, owner_id: Option<&str>) -> StoreResult<u64>;

    /// Number of sandboxes holding a runtime per worker (`""`: none recorded), in one query;
    /// workers with none are absent.
    async fn count_active_sandboxes_by_worker(
        &self,
    ) -> StoreResult<std::collections::BTreeMap<String, u64>>;

    /// Sandbox records counted by state, provider and worker, in one query (diagnostics).
    async fn sandbox_groups(&self) -> StoreResult<Vec<svc_core::observe::SandboxGroup>>;

    /// Number of sandboxes holding a runtime on one provider.
    async fn count_sandboxes_on_provider(&self, provider: &str) -> StoreResult<u64>;

    /// Sets `expires_at` of a `running` sandbox. Returns the updated record, or `None` when
    /// there is no such running sandbox.
    async fn set_sandbox_expiry(
        &self,
        id: &SandboxId,
        expires_at: Timestamp,
    ) -> StoreResult<Option<Sandbox>>;

    /// Moves a `running` sandbox to `paused` at `at`. Returns the updated record, or `None`
    /// when it is not running.
    async fn pause_sandbox(&self, id: &SandboxId, at: Timestamp) -> StoreResult<Option<Sandbox>>;

    /// Moves a `paused` sandbox back to `running` at `at`, moving `expires_at` later by the
    /// time it spent paused (added to its paused total too). Returns the updated record, or
    /// `None` when it is not paused.
    async fn resume_sandbox(&self, id: &SandboxId, at: Timestamp) -> StoreResult<Option<Sandbox>>;

    /// Moves a `running` or `paused` sandbox of worker `from` to worker `to` (a live worker
    /// taking over a dead one's sandbox). Returns the updated record, or `None` when the
    /// sandbox holds no runtime or is not `from`'s any more (so one taker wins).
    async fn reassign_sandbox(
        &self,
        id: &SandboxId,
        from: &str,
        to: &str,
    ) -> StoreResult<Option<Sandbox>>;

    /// `running` sandboxes whose `expires_at` is at or before `now`, oldest expiry first.
    async fn list_expired_sandboxes(&self, now: Timestamp) -> StoreResult<Vec<Sandbox>>;

    /// Deletes records of sandboxes that ended (`destroyed`, `error`) before `cutoff`; returns
    /// how many.
    async fn purge_destroyed_before(&self, cutoff: Timestamp) -> StoreResult<u64>;

    /// Saves a new template. An existing name is a [`StoreError::Conflict`].
    async fn insert_template(&self, template: &Template) -> StoreResult<()>;

    /// One template by name.
    async fn get_template(&self, name: &str) -> StoreResult<Option<Template>>;

    /// Templates by name, a page of them. `tenant`: `None` lists every template; `Some(t)` the
    /// global ones (no tenant) and `t`'s (decisions §30).
    async fn list_templates(
        &self,
        page: &KeyPage,
        tenant: Option<&str>,
    ) -> StoreResult<Vec<Template>>;

    /// Replaces an existing template, matched by name and owning tenant (`tenant_id`, `None`
    /// for a global one), keeping its `created_at` and tenant. Returns the stored record, or
    /// `None` when there is no such template of that tenant: a template deleted and made again
    /// by another tenant between a caller's read and its write is not overwritten.
    async fn update_template(&self, template: &Template) -> StoreResult<Option<Template>>;

    /// Deletes template `name` of tenant `tenant_id` (`None`: the global one) with its builds
    /// and their logs, in one transaction; false when there was no such template of that
    /// tenant (then nothing is deleted).
    async fn delete_template(&self, name: &str, tenant_id: Option<&str>) -> StoreResult<bool>;

    /// Saves a new build (state `running`) that `worker_id` runs.
    async fn insert_build(&self, build: &TemplateBuild, worker_id: &str) -> StoreResult<()>;

    /// One build of `template`.
    async fn get_build(
        &self,
        template: &str,
        build_id: &BuildId,
    ) -> StoreResult<Option<TemplateBuild>>;

    /// A template's builds, newest first, at most `limit`.
    async fn list_builds(&self, template: &str, limit: u32) -> StoreResult<Vec<TemplateBuild>>;

    /// The builds `worker_id` runs (state `running`), in one query.
    async fn list_running_builds(&self, worker_id: &str) -> StoreResult<Vec<TemplateBuild>>;

    /// Ends a `running` build as `ending` says, records its image (when it made one) among the
    /// built images of the worker that ran it, and keeps only the newest `keep` ended builds of
    /// its template (older ones go with their logs), in one transaction. Returns the updated
    /// build, or `None` when it does not exist or has already ended (so exactly one caller
    /// wins).
    async fn end_build(
        &self,
        build_id: &BuildId,
        ending: &BuildEnding,
        keep: u32,
    ) -> StoreResult<Option<TemplateBuild>>;

    /// Appends lines to a build's log, in order.
    async fn append_build_log(&self, build_id: &BuildId, lines: &[String]) -> StoreResult<()>;

    /// A build's log lines after position `after` (0: from the first), oldest first, at most
    /// `limit`: `(position, line)`.
    async fn build_log_after(
        &self,
        build_id: &BuildId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<(i64, String)>>;

    /// The images builds of `worker_id` made that are not known to be removed yet.
    async fn list_built_images(&self, worker_id: &str) -> StoreResult<Vec<String>>;

    /// Forgets a built image (removed from its engine); false when it was not recorded.
    async fn forget_built_image(&self, image: &str) -> StoreResult<bool>;

    /// The images of sandboxes holding a runtime (`creating`, `running`, `paused`), each once.
    async fn active_images(&self) -> StoreResult<Vec<String>>;

    /// Saves the quota of `owner_id` (created or replaced; `created_at` kept on replace).
    async fn put_quota(
        &self,
        owner_id: &str,
        limits: QuotaLimits,
        at: Timestamp,
    ) -> StoreResult<OwnerQuota>;

    /// One owner's quota.
    async fn get_quota(&self, owner_id: &str) -> StoreResult<Option<OwnerQuota>>;

    /// Quotas by owner ID, a page of them.
    async fn list_quotas(&self, page: &KeyPage) -> StoreResult<Vec<OwnerQuota>>;

    /// Deletes one owner's quota; false when there was none.
    async fn delete_quota(&self, owner_id: &str) -> StoreResult<bool>;

    /// Counts of quotas, by which limits they set.
    async fn quota_summary(&self) -> StoreResult<QuotaSummary>;

    /// Registers or refreshes worker `id` from a heartbeat at `at` (`last_heartbeat` and
    /// `updated_at`; `created_at` kept). A drained worker stays `draining` while its heartbeats
    /// say `online` (only undraining makes it `online` again); any other status is taken.
    async fn upsert_worker(
        &self,
        id: &str,
        heartbeat: &WorkerHeartbeat,
        at: Timestamp,
    ) -> StoreResult<Worker>;

    /// Sets a registered worker's status (`offline` at shutdown); `None` when unknown.
    async fn set_worker_status(
        &self,
        id: &str,
        status: WorkerStatus,
        at: Timestamp,
    ) -> StoreResult<Option<Worker>>;

    /// One worker (`stale` is left false: the caller knows the window).
    async fn get_worker(&self, id: &str) -> StoreResult<Option<Worker>>;

    /// Workers by ID, a page of them.
    async fn list_workers(&self, page: &KeyPage) -> StoreResult<Vec<Worker>>;

    /// Removes a worker from the registry; false when unknown.
    async fn delete_worker(&self, id: &str) -> StoreResult<bool>;

    /// Takes `resource_id` for `holder` until `now + ttl` when it is free, expired or already
    /// `holder`'s (a new holder increments the generation); otherwise reports the holder's
    /// lease. Concurrent acquirers never both win.
    async fn acquire_lease(
        &self,
        resource_id: &str,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<LeaseAcquire>;

    /// Extends a lease to `now + ttl` when `holder` holds it unexpired; `None` otherwise.
    async fn renew_lease(
        &self,
        resource_id: &str,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<Option<Lease>>;

    /// Extends every unexpired lease `holder` holds; returns how many.
    async fn renew_leases_held_by(
        &self,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> StoreResult<u64>;

    /// Lets `holder`'s lease on `resource_id` lapse at `now`; false when `holder` does not
    /// hold it. The generation is kept.
    async fn release_lease(
        &self,
        resource_id: &str,
        holder: &str,
        now: Timestamp,
    ) -> StoreResult<bool>;

    /// One lease.
    async fn get_lease(&self, resource_id: &str) -> StoreResult<Option<Lease>>;

    /// Every lease, by resource.
    async fn list_leases(&self) -> StoreResult<Vec<Lease>>;

    /// Total, active and expired leases at `now`, and active ones per holder.
    async fn lease_counts(&self, now: Timestamp) -> StoreResult<LeaseCounts>;

    /// Saves an exec record (inserted or replaced). Saving an ended one also drops the
    /// sandbox's ended records beyond the newest `keep_ended`.
    async fn save_exec(&self, exec: &StoredExec, keep_ended: u32) -> StoreResult<()>;

    /// The exec records of the running sandboxes `worker_id` holds, in one query.
    async fn list_execs_on_worker(&self, worker_id: &str) -> StoreResult<Vec<StoredExec>>;

    /// Forgets a sandbox's exec records; how many went.
    async fn delete_execs(&self, sandbox_id: &SandboxId) -> StoreResult<u64>;

    /// Saves a new tenant. An existing ID is a [`StoreError::Conflict`].
    async fn create_tenant(&self, tenant: &Tenant) -> StoreResult<()>;

    /// One tenant.
    async fn get_tenant(&self, id: &str) -> StoreResult<Option<Tenant>>;

    /// Every tenant, by ID.
    async fn list_tenants(&self) -> StoreResult<Vec<Tenant>>;

    /// Deletes a tenant with its members and policies, in one transaction; false when there
    /// was no such tenant.
    async fn delete_tenant(&self, id: &str) -> StoreResult<bool>;

    /// Grants `member.role` to `member.subject` in `member.tenant_id` (created or replaced;
    /// `created_at` kept on replace). Returns the stored record.
    async fn put_member(&self, member: &Member) -> StoreResult<Member>;

    /// One tenant's members, by subject.
    async fn list_members(&self, tenant_id: &str) -> StoreResult<Vec<Member>>;

    /// Revokes a membership; false when there was none.
    async fn delete_member(&self, tenant_id: &str, subject: &str) -> StoreResult<bool>;

    /// The role `subject` holds in `tenant_id` by membership.
    async fn member_role(&self, tenant_id: &str, subject: &str) -> StoreResult<Option<Role>>;

    /// Saves a new policy. An existing ID is a [`StoreError::Conflict`].
    async fn create_policy(&self, policy: &Policy) -> StoreResult<()>;

    /// One policy of one tenant.
    async fn get_policy(&self, tenant_id: &str, id: &str) -> StoreResult<Option<Policy>>;

    /// One tenant's policies, highest priority first, then by ID.
    async fn list_policies(&self, tenant_id: &str) -> StoreResult<Vec<Policy>>;

    /// Replaces an existing policy (matched by tenant and ID), keeping its `created_at`.
    /// Returns the stored record, or `None` when there is no such policy.
    async fn update_policy(&self, policy: &Policy) -> StoreResult<Option<Policy>>;

    /// Deletes one policy of one tenant; false when there was none.
    async fn delete_policy(&self, tenant_id: &str, id: &str) -> StoreResult<bool>;

    /// Appends an audit entry. An existing ID is a [`StoreError::Conflict`].
    async fn insert_audit(&self, entry: &AuditEntry) -> StoreResult<()>;

    /// Audit entries matching every condition of `filter` (`since` and `until` inclusive),
    /// newest first, at most `filter.limit` of them (taken as 1..=[`MAX_AUDIT_LIMIT`]).
    ///
    /// [`MAX_AUDIT_LIMIT`]: svc_core::audit::MAX_AUDIT_LIMIT
    async fn list_audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditEntry>>;

    /// Flushes and releases connections; later calls fail.
    async fn close(&self);
}
