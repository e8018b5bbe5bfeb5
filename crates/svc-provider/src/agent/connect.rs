//! How the host reaches an agent: a plain Unix socket (containers, tests), or a VMM's vsock
//! socket, where the host writes `CONNECT <port>\n` and the VMM answers `OK <host port>\n`
//! before the stream belongs to the guest (Firecracker, and QEMU through
//! `vhost-device-vsock`).

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::ProviderError;

/// A byte stream to an agent.
pub trait AgentIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> AgentIo for T {}

/// A connection to an agent.
pub type AgentStream = Box<dyn AgentIo>;

/// Opens connections to one agent.
#[async_trait]
pub trait Connector: Send + Sync + 'static {
    /// A fresh connection, ready for a request.
    async fn connect(&self) -> Result<AgentStream, ProviderError>;
}

fn unreachable(path: &std::path::Path, err: &dyn std::fmt::Display) -> ProviderError {
    ProviderError::unavailable(format!(
        "the guest agent at {} is unreachable: {err}",
        path.display()
    ))
}

/// An agent listening on a Unix socket.
#[derive(Debug, Clone)]
pub struct UnixConnector {
    path: PathBuf,
}

impl UnixConnector {
    /// The agent at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        UnixConnector { path: path.into() }
    }
}

#[async_trait]
impl Connector for UnixConnector {
    async fn connect(&self) -> Result<AgentStream, ProviderError> {
        let stream = UnixStream::connect(&self.path)
            .await
            .map_err(|e| unreachable(&self.path, &e))?;
        Ok(Box::new(stream))
    }
}

/// An agent behind a VMM's vsock Unix socket, on guest port `port`.
#[derive(Debug, Clone)]
pub struct VsockConnector {
    path: PathBuf,
    port: u32,
    /// How long the VMM may take to answer the handshake.
    handshake_timeout: Duration,
}

impl VsockConnector {
    /// The agent on guest `port` behind the VMM socket at `path`.
    pub fn new(path: impl Into<PathBuf>, port: u32) -> Self {
        VsockConnector {
            path: path.into(),
            port,
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

#[async_trait]
impl Connector for VsockConnector {
    async fn connect(&self) -> Result<AgentStream, ProviderError> {
        let stream = UnixStream::connect(&self.path)
            .await
            .map_err(|e| unreachable(&self.path, &e))?;
        let mut stream = BufReader::new(stream);
        let handshake = async {
            stream
                .get_mut()
                .write_all(format!("CONNECT {}\n", self.port).as_bytes())
                .await?;
            let mut line = String::new();
            stream.read_line(&mut line).await?;
            Ok::<_, std::io::Error>(line)
        };
        let line = tokio::time::timeout(self.handshake_timeout, handshake)
            .await
            .map_err(|_| unreachable(&self.path, &"no answer to CONNECT"))?
            .map_err(|e| unreachable(&self.path, &e))?;
        if !line.starts_with("OK ") {
            let answer = line.trim();
            return Err(unreachable(
                &self.path,
                &format!("CONNECT {} answered {answer:?}", self.port),
            ));
        }
        // The reader may hold bytes past the answer line already: they are the agent's, so
        // the buffered reader stays in front of the stream.
        Ok(Box::new(stream))
    }
}
