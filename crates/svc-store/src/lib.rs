//! Durable state of svc behind one object-safe [`Store`] trait. Methods are domain operations,
//! each atomic in its backend, so callers never read-modify-write. Backends: [`sqlite`] (the
//! embedded default); PostgreSQL joins with the scale-out work and runs the same contract suite.

mod error;
mod filter;
pub mod sqlite;

use std::time::Duration;

use async_trait::async_trait;
use svc_core::sandbox::Sandbox;
use svc_core::template::Template;
use svc_core::{SandboxId, Timestamp};

pub use error::StoreError;
pub use filter::{SandboxFilter, StateFilter};

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Every piece of durable state, as domain operations.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The backend name for diagnostics (`sqlite`, `postgres`).
    fn backend(&self) -> &'static str;

    /// Round-trips a trivial query; returns how long it took.
    async fn ping(&self) -> StoreResult<Duration>;

    /// Saves a new sandbox. An existing ID is a [`StoreError::Conflict`].
    async fn insert_sandbox(&self, sandbox: &Sandbox) -> StoreResult<()>;

    /// One sandbox, in any state.
    async fn get_sandbox(&self, id: &SandboxId) -> StoreResult<Option<Sandbox>>;

    /// Sandboxes matching `filter`, newest first.
    async fn list_sandboxes(&self, filter: &SandboxFilter) -> StoreResult<Vec<Sandbox>>;

    /// Number of sandboxes that are not destroyed, optionally of one owner.
    async fn count_active_sandboxes(&self, owner_id: Option<&str>) -> StoreResult<u64>;

    /// Number of sandboxes that are not destroyed on one provider.
    async fn count_sandboxes_on_provider(&self, provider: &str) -> StoreResult<u64>;

    /// Moves a sandbox that is not yet destroyed to `destroyed`. Returns the updated record, or
    /// `None` when it does not exist or was already destroyed (so exactly one caller wins).
    async fn mark_sandbox_destroyed(
        &self,
        id: &SandboxId,
        at: Timestamp,
    ) -> StoreResult<Option<Sandbox>>;

    /// Sets `expires_at` of a sandbox that is not destroyed. Returns the updated record, or `None`
    /// when there is no such active sandbox.
    async fn set_sandbox_expiry(
        &self,
        id: &SandboxId,
        expires_at: Timestamp,
    ) -> StoreResult<Option<Sandbox>>;

    /// Active sandboxes whose `expires_at` is at or before `now`, oldest expiry first.
    async fn list_expired_sandboxes(&self, now: Timestamp) -> StoreResult<Vec<Sandbox>>;

    /// Deletes destroyed records destroyed before `cutoff`; returns how many.
    async fn purge_destroyed_before(&self, cutoff: Timestamp) -> StoreResult<u64>;

    /// Saves a new template. An existing name is a [`StoreError::Conflict`].
    async fn insert_template(&self, template: &Template) -> StoreResult<()>;

    /// One template by name.
    async fn get_template(&self, name: &str) -> StoreResult<Option<Template>>;

    /// Every template, by name.
    async fn list_templates(&self) -> StoreResult<Vec<Template>>;

    /// Replaces an existing template (matched by name), keeping its `created_at`. Returns the
    /// stored record, or `None` when there is no such template.
    async fn update_template(&self, template: &Template) -> StoreResult<Option<Template>>;

    /// Deletes a template; false when there was none.
    async fn delete_template(&self, name: &str) -> StoreResult<bool>;

    /// Flushes and releases connections; later calls fail.
    async fn close(&self);
}
