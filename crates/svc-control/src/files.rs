//! The file API above the provider: path validation, capability checks, `file.*` events.

use bytes::Bytes;
use serde_json::{json, Map};
use svc_core::error::Resource;
use svc_core::event::EventType;
use svc_core::exec::parse_mode;
use svc_core::path::SandboxPath;
use svc_core::{Capability, Error, SandboxId};
use svc_provider::{ByteStream, FileInfo, Provider, ProviderError};

use crate::{ControlPlane, Principal};

/// Default mode of written files.
pub const DEFAULT_FILE_MODE: u32 = 0o644;

/// How `content` of a write is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentEncoding {
    /// Text as is.
    Utf8,
    /// Standard base64, for binary content.
    Base64,
}

impl ContentEncoding {
    /// Parses `utf8` (default) or `base64`.
    pub fn parse(value: Option<&str>) -> Result<Self, Error> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            None | Some("utf8" | "utf-8" | "") => Ok(ContentEncoding::Utf8),
            Some("base64") => Ok(ContentEncoding::Base64),
            Some(other) => Err(Error::invalid(
                "encoding",
                format!("unknown encoding {other:?} (allowed: utf8, base64)"),
            )),
        }
    }
}

/// Parses a caller's path.
pub fn sandbox_path(field: &str, value: &str) -> Result<SandboxPath, Error> {
    SandboxPath::parse(value).map_err(|e| Error::invalid(field, e.to_string()))
}

fn file_data(path: &SandboxPath, size: Option<usize>) -> Map<String, serde_json::Value> {
    let mut data = Map::new();
    data.insert("path".into(), json!(path.as_str()));
    if let Some(size) = size {
        data.insert("size".into(), json!(size));
    }
    data
}

impl ControlPlane {
    /// Maps a provider's file error: a missing path is 404, bad input 400, a failing backend
    /// 500 with `provider.failed`.
    fn file_error(
        &self,
        sandbox_id: &SandboxId,
        provider: &str,
        operation: &str,
        err: ProviderError,
    ) -> Error {
        match err {
            ProviderError::FileNotFound { path } => Error::not_found(Resource::File, path),
            other => self.provider_failure(sandbox_id.as_str(), provider, operation, other),
        }
    }

    async fn file_target(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<(SandboxId, std::sync::Arc<dyn Provider>), Error> {
        let sandbox = self.get_active_sandbox(principal, id).await?;
        let provider = self.capable_provider(&sandbox.provider, Capability::Files)?;
        Ok((sandbox.id, provider))
    }

    /// `POST /files`: writes `content` (decoded) with `mode` (octal text, default 0644).
    pub async fn write_file(
        &self,
        principal: &Principal,
        id: &str,
        path: &str,
        content: &str,
        mode: Option<&str>,
        encoding: Option<&str>,
    ) -> Result<(), Error> {
        let path = sandbox_path("path", path)?;
        let mode = match mode {
            Some(mode) => parse_mode(mode).map_err(|m| Error::invalid("mode", m))?,
            None => DEFAULT_FILE_MODE,
        };
        let bytes = match ContentEncoding::parse(encoding)? {
            ContentEncoding::Utf8 => Bytes::copy_from_slice(content.as_bytes()),
            ContentEncoding::Base64 => {
                use base64::Engine;
                Bytes::from(
                    base64::engine::general_purpose::STANDARD
                        .decode(content.trim())
                        .map_err(|e| Error::invalid("content", format!("invalid base64: {e}")))?,
                )
            }
        };
        let (sandbox_id, provider) = self.file_target(principal, id).await?;
        let size = bytes.len();
        let stream: ByteStream = Box::pin(futures::stream::once(async move { Ok(bytes) }));
        provider
            .write_file(&sandbox_id, &path, mode, stream)
            .await
            .map_err(|e| self.file_error(&sandbox_id, provider.name(), "write file", e))?;
        self.events().publish(
            EventType::FileWritten,
            sandbox_id.as_str(),
            Some(file_data(&path, Some(size))),
        );
        Ok(())
    }

    /// `GET /files`: the file's bytes as a stream.
    pub async fn read_file(
        &self,
        principal: &Principal,
        id: &str,
        path: &str,
    ) -> Result<ByteStream, Error> {
        let path = sandbox_path("path", path)?;
        let (sandbox_id, provider) = self.file_target(principal, id).await?;
        let stream = provider
            .read_file(&sandbox_id, &path)
            .await
            .map_err(|e| self.file_error(&sandbox_id, provider.name(), "read file", e))?;
        self.events().publish(
            EventType::FileRead,
            sandbox_id.as_str(),
            Some(file_data(&path, None)),
        );
        Ok(stream)
    }

    /// `DELETE /files`.
    pub async fn delete_file(
        &self,
        principal: &Principal,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), Error> {
        let path = sandbox_path("path", path)?;
        if path.is_root() {
            return Err(Error::invalid("path", "refusing to delete /"));
        }
        let (sandbox_id, provider) = self.file_target(principal, id).await?;
        provider
            .delete_file(&sandbox_id, &path, recursive)
            .await
            .map_err(|e| self.file_error(&sandbox_id, provider.name(), "delete file", e))
    }

    /// `GET /files/list`.
    pub async fn list_files(
        &self,
        principal: &Principal,
        id: &str,
        path: &str,
    ) -> Result<Vec<FileInfo>, Error> {
        let path = sandbox_path("path", path)?;
        let (sandbox_id, provider) = self.file_target(principal, id).await?;
        provider
            .list_dir(&sandbox_id, &path)
            .await
            .map_err(|e| self.file_error(&sandbox_id, provider.name(), "list files", e))
    }

    /// `POST /files/move`.
    pub async fn move_file(
        &self,
        principal: &Principal,
        id: &str,
        old_path: &str,
        new_path: &str,
    ) -> Result<(), Error> {
        let from = sandbox_path("old_path", old_path)?;
        let to = sandbox_path("new_path", new_path)?;
        let (sandbox_id, provider) = self.file_target(principal, id).await?;
        provider
            .move_path(&sandbox_id, &from, &to)
            .await
            .map_err(|e| self.file_error(&sandbox_id, provider.name(), "move file", e))
    }

    /// `POST /files/chmod`.
    pub async fn chmod_file(
        &self,
        principal: &Principal,
        id: &str,
        path: &str,
        mode: &str,
    ) -> Result<(), Error> {
        let path = sandbox_path("path", path)?;
        let mode = parse_mode(mode).map_err(|m| Error::invalid("mode", m))?;
        let (sandbox_id, provider) = self.file_target(principal, id).await?;
        provider
            .chmod(&sandbox_id, &path, mode)
            .await
            .map_err(|e| self.file_error(&sandbox_id, provider.name(), "chmod", e))
    }

    /// `GET /files/stat`.
    pub async fn stat_file(
        &self,
        principal: &Principal,
        id: &str,
        path: &str,
    ) -> Result<FileInfo, Error> {
        let path = sandbox_path("path", path)?;
        let (sandbox_id, provider) = self.file_target(principal, id).await?;
        provider
            .stat(&sandbox_id, &path)
            .await
            .map_err(|e| self.file_error(&sandbox_id, provider.name(), "stat", e))
    }

    /// `GET /files/glob`.
    pub async fn glob_files(
        &self,
        principal: &Principal,
        id: &str,
        pattern: &str,
    ) -> Result<Vec<String>, Error> {
        if !pattern.starts_with('/') {
            return Err(Error::invalid(
                "pattern",
                format!("glob pattern {pattern:?} must be absolute (start with /)"),
            ));
        }
        let (sandbox_id, provider) = self.file_target(principal, id).await?;
        provider
            .glob(&sandbox_id, pattern)
            .await
            .map_err(|e| self.file_error(&sandbox_id, provider.name(), "glob", e))
    }

    /// `GET /logs`: the most recent `lines` console or log lines.
    pub async fn sandbox_logs(
        &self,
        principal: &Principal,
        id: &str,
        lines: usize,
    ) -> Result<Vec<String>, Error> {
        let sandbox = self.get_active_sandbox(principal, id).await?;
        let provider = self.capable_provider(&sandbox.provider, Capability::Console)?;
        provider.logs(&sandbox.id, lines).await.map_err(|e| {
            self.provider_failure(sandbox.id.as_str(), provider.name(), "read logs", e)
        })
    }
}
