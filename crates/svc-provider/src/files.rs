//! File primitives' types.

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::ProviderError;
use svc_core::Timestamp;

/// File content as a stream of chunks, so large files never sit in memory whole.
pub type ByteStream = BoxStream<'static, Result<Bytes, ProviderError>>;

/// File content on its way into a sandbox: a stream, and its size when the sender announced it
/// (a streamed upload's `Content-Length`). Providers write it whole or not at all: a stream
/// that fails leaves any file already at the path as it was.
pub struct Upload {
    /// The bytes.
    pub stream: ByteStream,
    /// How many bytes the stream promises, when known.
    pub size: Option<u64>,
}

impl Upload {
    /// Content already in memory.
    pub fn bytes(bytes: Bytes) -> Self {
        let size = Some(bytes.len() as u64);
        Upload {
            stream: Box::pin(futures::stream::once(async move { Ok(bytes) })),
            size,
        }
    }

    /// Content arriving as `stream`, `size` bytes long when known: a stream that ends short of
    /// `size` or runs past it fails there, so no provider completes a file of the wrong length.
    pub fn stream(stream: ByteStream, size: Option<u64>) -> Self {
        let Some(size) = size else {
            return Upload { stream, size };
        };
        let exact = futures::stream::unfold(
            (stream, 0u64, false),
            move |(mut stream, sent, done)| async move {
                if done {
                    return None;
                }
                let failed = |message: String| {
                    Some((
                        Err(ProviderError::failed(message)),
                        (futures::stream::empty().boxed(), sent, true),
                    ))
                };
                match stream.next().await {
                    Some(Ok(chunk)) => {
                        let sent = sent + chunk.len() as u64;
                        if sent > size {
                            return failed(format!(
                                "the upload holds more than its announced {size} bytes"
                            ));
                        }
                        Some((Ok(chunk), (stream, sent, false)))
                    }
                    Some(Err(err)) => Some((Err(err), (stream, sent, true))),
                    None if sent == size => None,
                    None => failed(format!(
                        "the upload ended after {sent} of its announced {size} bytes"
                    )),
                }
            },
        );
        Upload {
            stream: Box::pin(exact),
            size: Some(size),
        }
    }
}

/// One file or directory (interface FileInfo).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FileInfo {
    /// Last path component.
    pub name: String,
    /// Absolute path inside the sandbox.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// True for directories.
    pub is_dir: bool,
    /// Last modification.
    #[schema(value_type = String, format = DateTime)]
    pub mod_time: Timestamp,
    /// Permission bits, rendered as 4-digit octal (`0644`).
    #[serde(serialize_with = "serialize_mode")]
    #[schema(value_type = String, example = "0644")]
    pub mode: u32,
}

fn serialize_mode<S: serde::Serializer>(mode: &u32, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&format_args!("{:04o}", mode & 0o7777))
}
