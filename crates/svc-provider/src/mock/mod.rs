//! The `mock` provider (decisions §14): each sandbox is a private directory on the host, which is
//! its filesystem root. It is for development and tests, not isolation. Beside each sandbox
//! directory a `<id>.json` file keeps its image and labels, so a restarted server finds its
//! runtimes again through [`Provider::inventory`].

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use svc_core::{Capability, SandboxId};

use crate::{Provider, ProviderError, RuntimeInfo, RuntimeStatus, SpawnSpec};

const CAPABILITIES: &[Capability] = &[
    Capability::Spawn,
    Capability::Health,
    Capability::RuntimeInventory,
];

/// What `<id>.json` records about a runtime.
#[derive(Debug, Serialize, Deserialize)]
struct RuntimeRecord {
    image: String,
    labels: BTreeMap<String, String>,
}

/// Sandboxes as host directories under one root.
#[derive(Debug)]
pub struct MockProvider {
    root: PathBuf,
}

impl MockProvider {
    /// A provider keeping its sandboxes under `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        MockProvider { root: root.into() }
    }

    /// The directory holding every sandbox.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The host directory that is the sandbox's filesystem root.
    pub fn sandbox_dir(&self, id: &SandboxId) -> PathBuf {
        self.root.join(id.as_str())
    }

    fn record_path(&self, id: &SandboxId) -> PathBuf {
        self.root.join(format!("{id}.json"))
    }

    async fn spawn_inner(&self, spec: &SpawnSpec) -> Result<(), ProviderError> {
        tokio::fs::create_dir_all(&self.root).await?;
        tokio::fs::create_dir(self.sandbox_dir(&spec.id)).await?;
        let record = RuntimeRecord {
            image: spec.image.clone(),
            labels: spec.labels.clone(),
        };
        let json = serde_json::to_vec(&record).map_err(|e| ProviderError::failed(e.to_string()))?;
        tokio::fs::write(self.record_path(&spec.id), json).await?;
        Ok(())
    }
}

async fn remove_if_present(result: std::io::Result<()>) -> Result<(), ProviderError> {
    match result {
        Err(err) if err.kind() != ErrorKind::NotFound => Err(err.into()),
        _ => Ok(()),
    }
}

#[async_trait]
impl Provider for MockProvider {
    fn name(&self) -> &'static str {
        "mock"
    }

    fn capabilities(&self) -> &'static [Capability] {
        CAPABILITIES
    }

    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut config = serde_json::Map::new();
        config.insert("root_dir".into(), self.root.display().to_string().into());
        config.insert("isolation".into(), "none (host processes)".into());
        config
    }

    async fn health(&self) -> Result<(), ProviderError> {
        tokio::fs::create_dir_all(&self.root)
            .await
            .map_err(|e| ProviderError::Unavailable {
                message: format!("cannot create {}: {e}", self.root.display()),
            })?;
        let metadata = tokio::fs::metadata(&self.root).await?;
        if metadata.permissions().readonly() {
            return Err(ProviderError::Unavailable {
                message: format!("{} is read-only", self.root.display()),
            });
        }
        Ok(())
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError> {
        if let Err(err) = self.spawn_inner(spec).await {
            // Leaves nothing behind: a half-made runtime would be adopted by reconciliation.
            let _ = self.destroy(&spec.id).await;
            return Err(err);
        }
        Ok(RuntimeInfo {
            sandbox_id: spec.id.clone(),
            image: spec.image.clone(),
            labels: spec.labels.clone(),
            running: true,
        })
    }

    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError> {
        remove_if_present(tokio::fs::remove_dir_all(self.sandbox_dir(id)).await).await?;
        remove_if_present(tokio::fs::remove_file(self.record_path(id)).await).await
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        match tokio::fs::metadata(self.sandbox_dir(id)).await {
            Ok(meta) if meta.is_dir() => Ok(RuntimeStatus::Running),
            Ok(_) => Ok(RuntimeStatus::Missing),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(RuntimeStatus::Missing),
            Err(err) => Err(err.into()),
        }
    }

    async fn inventory(&self) -> Result<Vec<RuntimeInfo>, ProviderError> {
        let mut entries = match tokio::fs::read_dir(&self.root).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        let mut runtimes = Vec::new();
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| SandboxId::parse(n).ok())
            else {
                continue;
            };
            let Ok(bytes) = tokio::fs::read(entry.path()).await else {
                continue;
            };
            let Ok(record) = serde_json::from_slice::<RuntimeRecord>(&bytes) else {
                continue;
            };
            let running = self.status(&id).await? == RuntimeStatus::Running;
            runtimes.push(RuntimeInfo {
                sandbox_id: id,
                image: record.image,
                labels: record.labels,
                running,
            });
        }
        runtimes.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        Ok(runtimes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SpawnSpec {
        SpawnSpec {
            id: SandboxId::generate(),
            image: "alpine:latest".into(),
            memory_mb: 128,
            vcpus: 1,
            env: BTreeMap::new(),
            network: None,
            labels: BTreeMap::from([(crate::LABEL_MANAGED.into(), "true".into())]),
        }
    }

    #[tokio::test]
    async fn lifecycle_and_inventory() {
        let dir = tempfile::tempdir().unwrap();
        let mock = MockProvider::new(dir.path().join("mock"));
        mock.health().await.unwrap();
        let spec = spec();
        let runtime = mock.spawn(&spec).await.unwrap();
        assert!(runtime.running);
        assert_eq!(mock.status(&spec.id).await.unwrap(), RuntimeStatus::Running);
        let inventory = mock.inventory().await.unwrap();
        assert_eq!(inventory.len(), 1);
        assert_eq!(inventory[0].labels, spec.labels);
        // A second spawn of the same ID fails and leaves nothing of its own behind.
        assert!(mock.spawn(&spec).await.is_err());
        mock.destroy(&spec.id).await.unwrap();
        mock.destroy(&spec.id).await.unwrap();
        assert_eq!(mock.status(&spec.id).await.unwrap(), RuntimeStatus::Missing);
        assert!(mock.inventory().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn unusable_root_is_unhealthy() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let mock = MockProvider::new(file.join("mock"));
        assert!(matches!(
            mock.health().await,
            Err(ProviderError::Unavailable { .. })
        ));
        assert!(mock.spawn(&spec()).await.is_err());
    }
}
