//! Providers own the actual sandboxes. One object-safe [`Provider`] trait covers lifecycle,
//! health, inventory, logs, files and ONE exec primitive ([`Provider::exec`] returning an
//! [`ExecSession`]): buffered, streamed and interactive exec are all built on it above the
//! provider, and timeouts are applied there once. Operations a backend lacks answer
//! [`ProviderError::Unsupported`] from the trait defaults, matching its declared capabilities.

pub mod agent;
pub mod archive;
pub mod docker;
mod error;
mod exec;
mod files;
pub mod microvm;
pub mod mock;
mod process;
mod provider;
pub mod shell_files;

pub use error::ProviderError;
pub use exec::{
    ExecChunk, ExecControl, ExecSession, ExecSpec, ExecState, ExecUser, ExitStatus, OutputStream,
    Signal, StdStream, TtySize,
};
pub use files::{ByteStream, FileInfo, Upload};
pub use provider::{
    Provider, RuntimeFailure, RuntimeInfo, RuntimeStatus, SandboxStats, SnapshotInfo, SpawnSpec,
    LABEL_INSTALLATION, LABEL_MANAGED, LABEL_OWNER, LABEL_POOL, LABEL_SANDBOX_ID, LABEL_TEMPLATE,
    LABEL_TENANT, LABEL_WARM, LABEL_WARM_SPEC, LABEL_WORKER,
};
