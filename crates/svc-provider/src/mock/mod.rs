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

use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use tokio::io::AsyncWriteExt;

use crate::{
    ByteStream, ExecSession, ExecSpec, FileInfo, Provider, ProviderError, RuntimeInfo,
    RuntimeStatus, SandboxStats, SpawnSpec, Upload,
};

mod archive;
mod exec;
mod files;
mod freeze;
mod stats;

const CAPABILITIES: &[Capability] = &[
    Capability::Spawn,
    Capability::Exec,
    Capability::ExecStream,
    Capability::Files,
    Capability::Console,
    Capability::Health,
    Capability::RuntimeInventory,
    Capability::Stats,
    Capability::Pause,
    Capability::WarmPool,
];

/// What `<id>.json` records about a runtime.
#[derive(Debug, Serialize, Deserialize)]
struct RuntimeRecord {
    image: String,
    labels: BTreeMap<String, String>,
    /// The spawn's memory limit, reported by `stats` (not enforced); absent in records
    /// written before it was kept.
    #[serde(default)]
    memory_mb: Option<u32>,
}

/// Sandboxes as host directories under one root.
#[derive(Debug)]
pub struct MockProvider {
    root: PathBuf,
    freezer: freeze::Freezer,
}

impl MockProvider {
    /// A provider keeping its sandboxes under `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        MockProvider {
            root: root.into(),
            freezer: freeze::Freezer::default(),
        }
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

    fn log_path(&self, id: &SandboxId) -> PathBuf {
        self.root.join(format!("{id}.log"))
    }

    /// The sandbox directory, or `RuntimeNotFound` when it is gone.
    async fn existing_dir(&self, id: &SandboxId) -> Result<PathBuf, ProviderError> {
        let dir = self.sandbox_dir(id);
        match tokio::fs::metadata(&dir).await {
            Ok(meta) if meta.is_dir() => Ok(dir),
            _ => Err(ProviderError::RuntimeNotFound { id: id.to_string() }),
        }
    }

    /// A working directory inside the sandbox, as a host path that cannot lie outside it.
    async fn workdir(
        &self,
        sandbox_dir: &Path,
        workdir: Option<&SandboxPath>,
    ) -> Result<PathBuf, ProviderError> {
        let Some(path) = workdir else {
            return Ok(sandbox_dir.to_path_buf());
        };
        let info = files::stat(sandbox_dir.to_path_buf(), path.clone())
            .await
            .map_err(|e| match e {
                ProviderError::FileNotFound { path } => ProviderError::InvalidRequest {
                    message: format!("workdir {path} does not exist"),
                },
                other => other,
            })?;
        if !info.is_dir {
            return Err(ProviderError::InvalidRequest {
                message: format!("workdir {path} is not a directory"),
            });
        }
        let host = tokio::fs::canonicalize(sandbox_dir.join(path.relative())).await?;
        let base = tokio::fs::canonicalize(sandbox_dir).await?;
        if !host.starts_with(&base) {
            return Err(ProviderError::InvalidRequest {
                message: format!("workdir {path} escapes the sandbox"),
            });
        }
        Ok(host)
    }

    /// Appends to the sandbox's command log (what `logs` returns for the mock).
    async fn log_line(&self, id: &SandboxId, line: &str) {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .await;
        if let Ok(mut file) = file {
            let _ = file.write_all(format!("{line}\n").as_bytes()).await;
        }
    }

    async fn spawn_inner(&self, spec: &SpawnSpec) -> Result<(), ProviderError> {
        let record = RuntimeRecord {
            image: spec.image.clone(),
            labels: spec.labels.clone(),
            memory_mb: Some(spec.memory_mb),
        };
        let json = serde_json::to_vec(&record)
            .map_err(|e| ProviderError::caused("encoding the runtime record", e))?;
        let (root, dir, record_path) = (
            self.root.clone(),
            self.sandbox_dir(&spec.id),
            self.record_path(&spec.id),
        );
        // One trip to the blocking pool for the whole runtime, not one per file operation.
        files::blocking(move || {
            std::fs::create_dir_all(&root)?;
            std::fs::create_dir(&dir)?;
            std::fs::write(&record_path, json)?;
            Ok(())
        })
        .await
    }

    /// Removes everything of a runtime in one trip to the blocking pool; what is already gone
    /// is fine.
    fn remove_runtime(dir: &Path, log: &Path, record: &Path) -> Result<(), ProviderError> {
        match std::fs::symlink_metadata(dir) {
            Ok(meta) if meta.is_dir() => remove_if_present(std::fs::remove_dir_all(dir))?,
            // Whatever else stands in the runtime's place goes too.
            Ok(_) => remove_if_present(std::fs::remove_file(dir))?,
            Err(err) => remove_if_present(Err(err))?,
        }
        remove_if_present(std::fs::remove_file(log))?;
        remove_if_present(std::fs::remove_file(record))
    }
}

fn remove_if_present(result: std::io::Result<()>) -> Result<(), ProviderError> {
    match result {
        // A path below something that is not a directory cannot exist either.
        Err(err) if !matches!(err.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            Err(err.into())
        }
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
        tokio::fs::create_dir_all(&self.root).await.map_err(|e| {
            ProviderError::unavailable(format!("cannot create {}: {e}", self.root.display()))
        })?;
        let metadata = tokio::fs::metadata(&self.root).await?;
        if metadata.permissions().readonly() {
            return Err(ProviderError::unavailable(format!(
                "{} is read-only",
                self.root.display()
            )));
        }
        Ok(())
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError> {
        if let Err(err) = self.spawn_inner(spec).await {
            // Leaves nothing behind: a half-made runtime would be adopted by reconciliation.
            let _ = self.destroy(&spec.id).await;
            return Err(err);
        }
        Ok(RuntimeInfo::started(spec, false))
    }

    async fn connect(&self, id: &SandboxId, port: u16) -> Result<crate::PortStream, ProviderError> {
        // Mock sandboxes are host processes: their ports are the host's loopback ones.
        self.existing_dir(id).await?;
        crate::connect_tcp(std::net::SocketAddr::from(([127, 0, 0, 1], port)), port).await
    }

    async fn claim(&self, warm: &SandboxId, id: &SandboxId) -> Result<(), ProviderError> {
        let moves = [
            (self.sandbox_dir(warm), self.sandbox_dir(id)),
            (self.record_path(warm), self.record_path(id)),
            (self.log_path(warm), self.log_path(id)),
        ];
        self.freezer.forget(warm);
        let warm_id = warm.to_string();
        // The directory moves first: once it has, the runtime is `id`'s (inventory lists
        // directories by their record, which follows at once).
        files::blocking(move || {
            for (index, (from, to)) in moves.iter().enumerate() {
                match std::fs::rename(from, to) {
                    Ok(()) => {}
                    // A runtime that never wrote a log has none to move.
                    Err(err) if index == 2 && err.kind() == ErrorKind::NotFound => {}
                    Err(err) if index == 0 && err.kind() == ErrorKind::NotFound => {
                        return Err(ProviderError::RuntimeNotFound { id: warm_id })
                    }
                    Err(err) => return Err(err.into()),
                }
            }
            Ok(())
        })
        .await
    }

    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError> {
        let (dir, log, record) = (
            self.sandbox_dir(id),
            self.log_path(id),
            self.record_path(id),
        );
        self.freezer.forget(id);
        files::blocking(move || Self::remove_runtime(&dir, &log, &record)).await
    }

    async fn pause(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.existing_dir(id).await?;
        self.freezer.set(id, true)
    }

    async fn resume(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.existing_dir(id).await?;
        self.freezer.set(id, false)
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        match tokio::fs::metadata(self.sandbox_dir(id)).await {
            Ok(meta) if meta.is_dir() => Ok(RuntimeStatus::Running),
            Ok(_) => Ok(RuntimeStatus::Missing),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(RuntimeStatus::Missing),
            Err(err) => Err(err.into()),
        }
    }

    async fn stats(&self, id: &SandboxId) -> Result<SandboxStats, ProviderError> {
        let dir = self.existing_dir(id).await?;
        // A record that cannot be read only loses the limit, which is then unknown (0).
        let memory_mb = match tokio::fs::read(self.record_path(id)).await {
            Ok(bytes) => serde_json::from_slice::<RuntimeRecord>(&bytes)
                .ok()
                .and_then(|record| record.memory_mb),
            Err(_) => None,
        };
        let limit = memory_mb.map_or(0, |mb| u64::from(mb) * 1024 * 1024);
        stats::sample(dir, limit).await
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
                image_pulled: false,
            });
        }
        runtimes.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        Ok(runtimes)
    }

    async fn logs(&self, id: &SandboxId, lines: usize) -> Result<Vec<String>, ProviderError> {
        self.existing_dir(id).await?;
        let text = match tokio::fs::read_to_string(self.log_path(id)).await {
            Ok(text) => text,
            Err(err) if err.kind() == ErrorKind::NotFound => String::new(),
            Err(err) => return Err(err.into()),
        };
        Ok(crate::process::last_lines(&text, lines))
    }

    fn runs_exec_as_user(&self) -> bool {
        // Switching users needs root; the processes are the host's.
        rustix::process::geteuid().is_root()
    }

    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> Result<ExecSession, ProviderError> {
        let dir = self.existing_dir(id).await?;
        let home = match &spec.user {
            Some(user) if !self.runs_exec_as_user() => {
                return Err(ProviderError::InvalidRequest {
                    message: format!(
                        "cannot run commands as user {}: the mock provider switches users only when svc runs as root",
                        user.uid
                    ),
                })
            }
            Some(user) => self.workdir(&dir, Some(&user.home)).await?,
            None => dir.clone(),
        };
        let workdir = match &spec.workdir {
            Some(_) => self.workdir(&dir, spec.workdir.as_ref()).await?,
            None => home.clone(),
        };
        self.log_line(id, &format!("$ {}", spec.argv.join(" ")))
            .await;
        let (session, command) = exec::start(&home, &workdir, &spec)?;
        if let Err(err) = self.freezer.track(id, &command) {
            let _ = command.kill();
            return Err(err);
        }
        Ok(session)
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        mode: u32,
        content: Upload,
    ) -> Result<(), ProviderError> {
        files::write(
            self.existing_dir(id).await?,
            path.clone(),
            mode,
            content.stream,
        )
        .await
    }

    async fn read_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        archive::pack(self.existing_dir(id).await?, dir.clone()).await
    }

    async fn write_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
        archive: ByteStream,
    ) -> Result<(), ProviderError> {
        archive::extract(self.existing_dir(id).await?, dir.clone(), archive).await
    }

    async fn read_file(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        files::read(self.existing_dir(id).await?, path.clone()).await
    }

    async fn delete_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        files::delete(self.existing_dir(id).await?, path.clone(), recursive).await
    }

    async fn list_dir(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<Vec<FileInfo>, ProviderError> {
        files::list(self.existing_dir(id).await?, path.clone()).await
    }

    async fn move_path(
        &self,
        id: &SandboxId,
        from: &NonRootPath,
        to: &NonRootPath,
    ) -> Result<(), ProviderError> {
        files::rename(self.existing_dir(id).await?, from.clone(), to.clone()).await
    }

    async fn chmod(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
        mode: u32,
    ) -> Result<(), ProviderError> {
        files::chmod(self.existing_dir(id).await?, path.clone(), mode).await
    }

    async fn stat(&self, id: &SandboxId, path: &SandboxPath) -> Result<FileInfo, ProviderError> {
        files::stat(self.existing_dir(id).await?, path.clone()).await
    }

    async fn glob(
        &self,
        id: &SandboxId,
        pattern: &SandboxGlob,
    ) -> Result<Vec<String>, ProviderError> {
        files::glob(self.existing_dir(id).await?, pattern.clone()).await
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
            multi_user: false,
            egress: svc_core::egress::Egress::default(),
            progress: Default::default(),
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
    async fn file_paths_cannot_escape_the_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("secret.txt");
        std::fs::write(&outside, b"host secret").unwrap();
        let mock = MockProvider::new(dir.path().join("mock"));
        let spec = spec();
        mock.spawn(&spec).await.unwrap();
        let sandbox = mock.sandbox_dir(&spec.id);
        std::os::unix::fs::symlink("/etc", sandbox.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../secret.txt", sandbox.join("rel")).unwrap();
        std::os::unix::fs::symlink(&outside, sandbox.join("direct")).unwrap();
        let path = |p: &str| SandboxPath::parse(p).unwrap();
        for escaping in ["/abs/passwd", "/rel", "/direct"] {
            let Err(err) = mock.read_file(&spec.id, &path(escaping)).await else {
                panic!("{escaping} escaped the sandbox");
            };
            assert!(
                matches!(
                    err,
                    ProviderError::InvalidRequest { .. } | ProviderError::FileNotFound { .. }
                ),
                "{escaping}: {err:?}"
            );
            // A write lands beside the path and is renamed over it: it replaces a symlink
            // rather than writing through it, and cannot create directories through one.
            let written = mock
                .write_file(
                    &spec.id,
                    &NonRootPath::new(path(escaping)).unwrap(),
                    0o644,
                    Upload::bytes(bytes::Bytes::from_static(b"x")),
                )
                .await;
            if escaping == "/abs/passwd" {
                assert!(written.is_err(), "{escaping}");
            }
        }
        assert_eq!(
            std::fs::read(&outside).unwrap(),
            b"host secret",
            "the host file is untouched"
        );
        // `..` is resolved lexically at the sandbox root.
        let err = mock
            .stat(&spec.id, &path("/../../secret.txt"))
            .await
            .unwrap_err();
        assert!(matches!(err, ProviderError::FileNotFound { .. }), "{err:?}");
        assert!(
            mock.glob(&spec.id, &SandboxGlob::new("/abs/*").unwrap())
                .await
                .unwrap()
                .is_empty(),
            "glob does not follow symlinks"
        );
        let mut exec = ExecSpec {
            argv: vec!["pwd".into()],
            env: BTreeMap::new(),
            workdir: Some(SandboxPath::parse("/abs").unwrap()),
            tty: None,
            stdin: false,
            user: None,
        };
        assert!(
            mock.exec(&spec.id, exec.clone()).await.is_err(),
            "a workdir through a symlink cannot leave"
        );
        exec.workdir = None;
        assert!(mock.exec(&spec.id, exec).await.is_ok());
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
