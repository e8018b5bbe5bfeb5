//! File primitives' types.

use bytes::Bytes;
use futures::stream::BoxStream;
use svc_core::Timestamp;

/// File content as a stream of chunks, so large files never sit in memory whole.
pub type ByteStream = BoxStream<'static, Result<Bytes, crate::ProviderError>>;

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
