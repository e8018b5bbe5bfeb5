//! `Connect`: a TCP connection to a port on the guest's loopback, spliced onto the host's
//! connection (previews of a server inside a microVM).

use std::time::Duration;

use futures::SinkExt;
use svc_agent_proto::{ErrorKind, Frame, FrameCodec, Reply};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// How long a port inside the guest may take to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Answers the request on `framed`, then copies bytes both ways until either side closes.
pub(crate) async fn serve<S>(mut framed: Framed<S, FrameCodec>, port: u16)
where
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let connecting = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(("127.0.0.1", port)));
    let reply = match connecting.await {
        Ok(Ok(upstream)) => Ok(upstream),
        Ok(Err(err)) => Err(format!(
            "nothing answers on port {port} in the guest ({err})"
        )),
        Err(_) => Err(format!("port {port} in the guest did not answer within 5s")),
    };
    let mut upstream = match reply {
        Ok(upstream) => upstream,
        Err(message) => {
            let reply = Reply::Error {
                kind: ErrorKind::NotFound,
                message,
            };
            if let Ok(frame) = Frame::json(&reply) {
                let _ = framed.send(frame).await;
            }
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    let Ok(done) = Frame::json(&Reply::Done) else {
        return;
    };
    if framed.send(done).await.is_err() {
        return;
    }
    // Bytes the host sent right behind its request belong to the TCP stream.
    let parts = framed.into_parts();
    let mut host = parts.io;
    if !parts.read_buf.is_empty() && upstream.write_all(&parts.read_buf).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut host, &mut upstream).await;
}
