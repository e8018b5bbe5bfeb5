//! Connections to ports inside sandboxes for the preview proxy, kept for reuse: hyper-util's
//! HTTP/1 client pools idle keep-alive connections per sandbox and port (its pool key is the
//! URI's authority, `<sandbox id>:<port>`), and its connector asks the provider for new ones.
//! Authorization is checked per request before the client is asked; a pooled connection only
//! saves the provider's connect (a TCP handshake, or a vsock stream through a microVM's agent).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use svc_control::preview::PortStream;
use svc_control::ControlPlane;
use svc_core::SandboxId;

/// How long an idle connection to a sandbox's port is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections kept per sandbox and port.
const MAX_IDLE: usize = 32;

/// The pooled client of one server.
pub(crate) type Upstream = Client<SandboxPorts, Body>;

/// A client whose new connections `plane` opens.
pub(crate) fn client(plane: ControlPlane) -> Upstream {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE_TIMEOUT)
        .pool_max_idle_per_host(MAX_IDLE)
        .pool_timer(TokioTimer::new())
        // The proxy sets `Host` itself (the sandbox's server sees `localhost:<port>`).
        .set_host(false)
        .build(SandboxPorts { plane })
}

/// The absolute URI the client is given for a request to `port` in `sandbox`; it goes out in
/// origin form (`path_and_query`).
pub(crate) fn uri(sandbox: &SandboxId, port: u16, path_and_query: &str) -> Option<Uri> {
    format!("http://{sandbox}:{port}{path_and_query}")
        .parse()
        .ok()
}

/// The connector: a URI's host is a sandbox ID, its port the port inside.
#[derive(Clone)]
pub(crate) struct SandboxPorts {
    plane: ControlPlane,
}

impl tower::Service<Uri> for SandboxPorts {
    type Response = PortConnection;
    type Error = ConnectFailed;
    type Future = Pin<Box<dyn Future<Output = Result<PortConnection, ConnectFailed>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectFailed>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let plane = self.plane.clone();
        Box::pin(async move {
            let port = uri.port_u16().unwrap_or(80);
            let connected = match SandboxId::named(uri.host().unwrap_or_default()) {
                Ok(sandbox) => plane.connect_preview(&sandbox, port).await,
                Err(err) => Err(err),
            };
            match connected {
                Ok(stream) => Ok(PortConnection(TokioIo::new(stream))),
                Err(err) => Err(ConnectFailed(Mutex::new(Some(err)))),
            }
        })
    }
}

/// Why a new connection could not be opened, for the handler to answer with (taken once).
#[derive(Debug)]
pub(crate) struct ConnectFailed(Mutex<Option<svc_core::Error>>);

impl ConnectFailed {
    /// The service error, once.
    pub(crate) fn take(&self) -> Option<svc_core::Error> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl std::fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some(err) => write!(f, "{err}"),
            None => f.write_str("connecting to the sandbox failed"),
        }
    }
}

impl std::error::Error for ConnectFailed {}

/// A provider's stream as the client's transport.
pub(crate) struct PortConnection(TokioIo<PortStream>);

impl Connection for PortConnection {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for PortConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for PortConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
