//! The svc control plane: every rule between an authenticated request and a provider. The HTTP
//! layer calls one [`ControlPlane`] method per request, passing the caller's [`Principal`]; the
//! control plane decides visibility and permission, talks to the store and providers, and
//! publishes events.

mod admission;
pub mod audit;
mod builds;
mod door;
mod egress_reach;
pub mod events;
mod exec;
mod exec_controls;
mod exec_jobs;
mod exec_recovery;
mod files;
mod held_leases;
pub mod identity;
pub mod observe;
mod output_budget;
mod paging;
mod pause;
mod plane;
pub mod pool;
pub mod preview;
mod principal;
mod provider_errors;
pub mod providers;
mod pull_progress;
mod queue;
mod quotas;
pub mod ratelimit;
mod reaper;
mod reconcile;
mod recover;
mod retry;
mod runtime_failures;
mod sandboxes;
mod spawn;
mod stats;
mod takeover;
mod templates;
pub mod tenancy;
mod utf8;
mod warm;
pub mod workers;

pub use builds::BuildInput;
pub use events::{EventBus, EventFilter, Subscription};
pub use exec::{ExecCommand, ExecEnding, ExecForm, ExecOutput, RunningExec, BUFFERED_OUTPUT_LIMIT};
pub use exec_controls::ExecControls;
pub use exec_jobs::ExecReplay;
pub use files::{Download, DEFAULT_FILE_MODE};
pub use identity::{Authenticator, Credentials, Offered};
pub use paging::{Page, PageRequest, MAX_PAGE};
pub use plane::{ControlPlane, ControlPlaneParts};
pub use pool::{Pool, PoolIdentity, PoolStatus};
pub use principal::{AuthMethod, Principal, DEFAULT_TENANT};
pub use providers::{ProviderDetail, ProviderHealth, ProviderRegistry, ProviderSummary, Readiness};
pub use queue::QueueStats;
pub use reconcile::{ReconcileReport, RECONCILE_INTERVAL};
pub use recover::RecoveryReport;
pub use sandboxes::ListSandboxes;
pub use spawn::SchedulerStats;
pub use svc_core::access::{Action, Role};
pub use svc_provider::SandboxStats;
pub use svc_provider::SnapshotInfo;
pub use svc_provider::{ByteStream, FileInfo, ProviderError, Signal, StdStream, TtySize};
pub use utf8::Utf8Chunker;
