//! The host side of `Connect`: after the agent's answer the connection is the TCP stream to a
//! port inside the guest, except that the frame decoder may already hold its first bytes.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::AgentStream;

/// An agent connection turned byte stream, `early` bytes first.
pub(super) struct Spliced {
    pub(super) early: BytesMut,
    pub(super) io: AgentStream,
}

impl AsyncRead for Spliced {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.early.is_empty() {
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        let n = self.early.len().min(buf.remaining());
        buf.put_slice(&self.early[..n]);
        self.early.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Spliced {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
