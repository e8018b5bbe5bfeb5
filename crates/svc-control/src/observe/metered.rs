//! A provider that counts and times every call it passes on ([`OperationMetrics`]), so every
//! provider operation is measured in one place whatever calls it. Exec is counted by the exec
//! path instead, which knows its form (`exec`, `exec_stream`) and when the command ends.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::{Capability, SandboxId};
use svc_provider::{
    ByteStream, ExecControl, ExecSession, ExecSpec, ExecState, FileInfo, Provider, ProviderError,
    RuntimeFailure, RuntimeInfo, RuntimeStatus, SandboxStats, SnapshotInfo, SpawnSpec, Upload,
};

use super::operations::OperationMetrics;

/// `inner`, measured.
pub struct Metered {
    inner: Arc<dyn Provider>,
    metrics: Arc<OperationMetrics>,
}

impl Metered {
    /// Wraps `inner`.
    pub fn wrap(inner: Arc<dyn Provider>, metrics: Arc<OperationMetrics>) -> Arc<dyn Provider> {
        Arc::new(Metered { inner, metrics })
    }

    async fn measure<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        let started = Instant::now();
        let result = call.await;
        self.metrics.record(
            operation,
            self.inner.name(),
            result.is_ok(),
            started.elapsed(),
        );
        result
    }
}

#[async_trait]
impl Provider for Metered {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> &'static [Capability] {
        self.inner.capabilities()
    }

    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value> {
        self.inner.config_summary()
    }

    fn default_network(&self) -> String {
        self.inner.default_network()
    }

    fn min_memory_mb(&self) -> u32 {
        self.inner.min_memory_mb()
    }

    async fn warm_up(&self) {
        self.inner.warm_up().await;
    }

    fn take_failures(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<RuntimeFailure>> {
        self.inner.take_failures()
    }

    fn runs_exec_as_user(&self) -> bool {
        self.inner.runs_exec_as_user()
    }

    async fn exec_path(&self, id: &SandboxId) -> Option<String> {
        self.inner.exec_path(id).await
    }

    async fn health(&self) -> Result<(), ProviderError> {
        self.measure("health", self.inner.health()).await
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError> {
        self.measure("spawn", self.inner.spawn(spec)).await
    }

    async fn connect(
        &self,
        id: &SandboxId,
        port: u16,
    ) -> Result<svc_provider::PortStream, ProviderError> {
        // Not measured: one per preview request, and a refusal is the sandbox's, not ours.
        self.inner.connect(id, port).await
    }

    async fn claim(&self, warm: &SandboxId, id: &SandboxId) -> Result<(), ProviderError> {
        self.measure("claim", self.inner.claim(warm, id)).await
    }

    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.measure("destroy", self.inner.destroy(id)).await
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        self.measure("status", self.inner.status(id)).await
    }

    async fn stats(&self, id: &SandboxId) -> Result<SandboxStats, ProviderError> {
        self.measure("stats", self.inner.stats(id)).await
    }

    async fn inventory(&self) -> Result<Vec<RuntimeInfo>, ProviderError> {
        self.measure("inventory", self.inner.inventory()).await
    }

    async fn pause(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.measure("pause", self.inner.pause(id)).await
    }

    async fn resume(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.measure("resume", self.inner.resume(id)).await
    }

    async fn logs(&self, id: &SandboxId, lines: usize) -> Result<Vec<String>, ProviderError> {
        self.measure("logs", self.inner.logs(id, lines)).await
    }

    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> Result<ExecSession, ProviderError> {
        self.inner.exec(id, spec).await
    }

    async fn exec_state(
        &self,
        id: &SandboxId,
        handle: &str,
    ) -> Result<(ExecState, Option<Arc<dyn ExecControl>>), ProviderError> {
        self.inner.exec_state(id, handle).await
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        mode: u32,
        content: Upload,
    ) -> Result<(), ProviderError> {
        self.measure("write_file", self.inner.write_file(id, path, mode, content))
            .await
    }

    async fn read_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        self.measure("read_archive", self.inner.read_archive(id, dir))
            .await
    }

    async fn write_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
        archive: ByteStream,
    ) -> Result<(), ProviderError> {
        self.measure("write_archive", self.inner.write_archive(id, dir, archive))
            .await
    }

    async fn read_file(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        self.measure("read_file", self.inner.read_file(id, path))
            .await
    }

    async fn delete_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        self.measure("delete_file", self.inner.delete_file(id, path, recursive))
            .await
    }

    async fn list_dir(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<Vec<FileInfo>, ProviderError> {
        self.measure("list_files", self.inner.list_dir(id, path))
            .await
    }

    async fn move_path(
        &self,
        id: &SandboxId,
        from: &NonRootPath,
        to: &NonRootPath,
    ) -> Result<(), ProviderError> {
        self.measure("move_file", self.inner.move_path(id, from, to))
            .await
    }

    async fn chmod(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
        mode: u32,
    ) -> Result<(), ProviderError> {
        self.measure("chmod", self.inner.chmod(id, path, mode))
            .await
    }

    async fn stat(&self, id: &SandboxId, path: &SandboxPath) -> Result<FileInfo, ProviderError> {
        self.measure("stat", self.inner.stat(id, path)).await
    }

    async fn glob(
        &self,
        id: &SandboxId,
        pattern: &SandboxGlob,
    ) -> Result<Vec<String>, ProviderError> {
        self.measure("glob", self.inner.glob(id, pattern)).await
    }

    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>, ProviderError> {
        self.measure("snapshots", self.inner.snapshots()).await
    }
}
