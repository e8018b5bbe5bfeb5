//! Providers own the actual sandboxes. One object-safe [`Provider`] trait covers lifecycle,
//! health, inventory, logs, files and ONE exec primitive ([`Provider::exec`] returning an
//! [`ExecSession`]): buffered, streamed and interactive exec are all built on it above the
//! provider, and timeouts are applied there once. Operations a backend lacks answer
//! [`ProviderError::Unsupported`] from the trait defaults, matching its declared capabilities.

pub mod agent;
pub mod archive;
mod builder;
pub mod docker;
mod error;
mod exec;
mod files;
pub mod microvm;
pub mod mock;
mod process;
mod provider;
mod pull;
pub mod shell_files;

pub use builder::{BuildUpdate, ImageBuilder};
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
pub use pull::{ProgressSink, PullProgress, PullTally};

/// A byte stream both ways to a port inside a sandbox ([`Provider::connect`]).
pub type PortStream = Box<dyn PortIo>;

/// What a [`PortStream`] is made of.
pub trait PortIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> PortIo for T {}

/// Connects to `addr`, a sandbox's port on this host; a refusal or an unreachable address is
/// [`ProviderError::Unreachable`].
pub async fn connect_tcp(
    addr: std::net::SocketAddr,
    port: u16,
) -> Result<PortStream, ProviderError> {
    let connecting = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::net::TcpStream::connect(addr),
    );
    match connecting.await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(Box::new(stream))
        }
        Ok(Err(err)) => Err(ProviderError::Unreachable {
            message: format!("nothing answers on port {port} in the sandbox ({err})"),
        }),
        Err(_) => Err(ProviderError::Unreachable {
            message: format!("port {port} in the sandbox did not answer within 5s"),
        }),
    }
}
