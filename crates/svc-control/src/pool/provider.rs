//! The pool as a [`Provider`]: logical sandboxes in, pool VM operations out.

use std::collections::BTreeMap;

use async_trait::async_trait;
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::{Capability, SandboxId};
use svc_provider::{
    ByteStream, ExecControl, ExecSession, ExecSpec, ExecState, ExecUser, FileInfo, Provider,
    ProviderError, RuntimeFailure, RuntimeInfo, RuntimeStatus, SandboxStats, SnapshotInfo,
    SpawnSpec, Upload, LABEL_POOL,
};

use svc_provider::shell_files::ShellFiles;

use super::workspace::{self, relative};
use super::{Place, Pool};

impl Pool {
    /// The place of `id`, loading the pool first; `None` for runtimes that are not logical
    /// sandboxes (they pass through to the wrapped provider).
    async fn logical(&self, id: &SandboxId) -> Result<Option<Place>, ProviderError> {
        self.ensure_loaded().await?;
        Ok(self.place_of(id))
    }

    /// Where `path` of a logical sandbox really is: inside its workspace (else refused), with
    /// every symlink of the part that exists followed (one that leads out is refused too).
    async fn real_path(
        &self,
        place: &Place,
        path: &SandboxPath,
    ) -> Result<SandboxPath, ProviderError> {
        workspace::confine(&place.workspace, path)?;
        let (code, printed) = self
            .script(
                &place.vm,
                workspace::RESOLVE,
                &[&relative(&place.workspace), &relative(path)],
            )
            .await?;
        match code {
            0 => workspace::resolved(&place.workspace, &printed),
            workspace::OUTSIDE => Err(ProviderError::InvalidRequest {
                message: format!(
                    "path {path} leads outside this sandbox's workspace {} through a symlink",
                    place.workspace
                ),
            }),
            code => Err(ProviderError::failed(format!(
                "resolving {path} in the workspace failed (exit code {code})"
            ))),
        }
    }

    /// [`Pool::real_path`] for operations that may not touch the workspace itself.
    async fn real_file(
        &self,
        place: &Place,
        path: &NonRootPath,
    ) -> Result<NonRootPath, ProviderError> {
        let real = self.real_path(place, path).await?;
        workspace::non_root_in(&place.workspace, real)
    }

    /// File operations run as the workspace's user inside the VM, where the provider gives a
    /// filesystem of its own (a container or a guest) and switches users: the kernel keeps
    /// them inside what the user may reach, so no check beforehand (and no race with one) is
    /// needed. `None` elsewhere (the mock, whose commands run on the host): there, root's
    /// operations follow the symlink check of [`Pool::real_path`].
    fn user_files<'a>(&'a self, place: &'a Place) -> Option<ShellFiles<'a>> {
        let own_filesystem = self
            .inner
            .capabilities()
            .iter()
            .any(|c| matches!(c, Capability::Container | Capability::Microvm));
        (own_filesystem && self.switches_users()).then(|| {
            ShellFiles::new(
                self.inner.as_ref(),
                &place.vm,
                Some(ExecUser {
                    uid: place.seat.uid,
                    gid: place.seat.uid,
                    home: place.workspace.clone(),
                }),
            )
        })
    }

    /// Hands what the file API (running as root) made to the workspace's user.
    async fn give_to_user(&self, place: &Place, path: &SandboxPath) -> Result<(), ProviderError> {
        if !self.switches_users() {
            return Ok(());
        }
        self.must(
            &place.vm,
            "handing a file to the workspace user",
            workspace::GIVE_TO_USER,
            &[
                &place.seat.uid.to_string(),
                &relative(&place.workspace),
                &relative(path),
            ],
        )
        .await
        .map(drop)
    }

    /// Makes the workspace of a reserved seat; starts its VM first when it is the first seat.
    async fn seat(&self, spec: &SpawnSpec) -> Result<(), ProviderError> {
        let (vm, ready, owner, uid) = {
            let seats = self.seats();
            let (vm, seat) = seats.find(&spec.id).ok_or_else(|| {
                ProviderError::failed(format!(
                    "sandbox {} has no seat in the pool (pool mode reserves one at admission)",
                    spec.id
                ))
            })?;
            (
                vm.id.clone(),
                std::sync::Arc::clone(&vm.ready),
                seat.owner.clone(),
                seat.uid,
            )
        };
        let started = ready
            .get_or_init(|| async { self.create_vm(&vm).await.map_err(|e| e.to_string()) })
            .await;
        if let Err(message) = started {
            return Err(ProviderError::failed(format!(
                "pool VM {vm} could not start: {message}"
            )));
        }
        let uid = self.uid_arg(uid);
        self.must(
            &vm,
            "making the workspace",
            workspace::MAKE_WORKSPACE,
            &[&owner, &uid, spec.id.as_str()],
        )
        .await?;
        if !self.seats().place(&spec.id, spec.env.clone()) {
            // Destroyed while its workspace was being made.
            let _ = self
                .script(
                    &vm,
                    workspace::REMOVE_WORKSPACE,
                    &[&owner, &uid, spec.id.as_str()],
                )
                .await;
            return Err(ProviderError::failed(
                "the sandbox left the pool while it was being seated",
            ));
        }
        Ok(())
    }

    /// Forgets a failed VM: its seats are freed, and it is removed.
    async fn drop_failed_vm(&self, vm: &SandboxId) {
        let failed = self
            .seats()
            .vm(vm)
            .is_some_and(|vm| matches!(vm.ready.get(), Some(Err(_))));
        if failed {
            self.seats().remove_vm(vm);
            self.destroy_vm(vm).await;
        }
    }
}

#[async_trait]
impl Provider for Pool {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> &'static [Capability] {
        self.capabilities
    }

    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut config = self.inner.config_summary();
        config.insert("pool".into(), true.into());
        config.insert("pool_image".into(), self.config.image.clone().into());
        config.insert("pool_max_vms".into(), self.config.max_vms.into());
        config.insert(
            "pool_max_users_per_vm".into(),
            self.config.max_users_per_vm.into(),
        );
        config
    }

    fn default_network(&self) -> String {
        self.inner.default_network()
    }

    fn min_memory_mb(&self) -> u32 {
        self.inner.min_memory_mb()
    }

    async fn health(&self) -> Result<(), ProviderError> {
        self.inner.health().await
    }

    async fn warm_up(&self) {
        self.inner.warm_up().await;
        if let Err(err) = self.ensure_loaded().await {
            tracing::warn!(error = %err, "the pool's VMs of an earlier run could not be found yet; retried on first use");
        }
    }

    fn take_failures(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<RuntimeFailure>> {
        let mut failures = self.inner.take_failures()?;
        let pool = self.this.upgrade()?;
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        // A VM that dies takes every workspace in it along.
        tokio::spawn(async move {
            while let Some(failure) = failures.recv().await {
                let vm = &failure.sandbox_id;
                let was_vm = pool.seats().vm(vm).is_some();
                if !was_vm {
                    let _ = sender.send(failure);
                    continue;
                }
                let seats = pool.seats().remove_vm(vm);
                tracing::warn!(vm = %vm, users = seats.len(), error = %failure.message, "a pool VM ended on its own");
                // What is left of it goes, and its lease with it.
                pool.destroy_vm(vm).await;
                for (id, _) in seats {
                    let _ = sender.send(RuntimeFailure {
                        sandbox_id: id,
                        message: format!(
                            "its pool VM {} ended: {}",
                            failure.sandbox_id, failure.message
                        ),
                        provider_wide: failure.provider_wide,
                    });
                }
            }
        });
        Some(receiver)
    }

    fn runs_exec_as_user(&self) -> bool {
        false
    }

    /// A workspace's commands take its VM's path.
    async fn exec_path(&self, id: &SandboxId) -> Option<String> {
        match self.logical(id).await.ok()? {
            Some(place) => self.inner.exec_path(&place.vm).await,
            None => self.inner.exec_path(id).await,
        }
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError> {
        self.ensure_loaded().await?;
        if let Err(err) = self.seat(spec).await {
            let vm = self.seats().find(&spec.id).map(|(vm, _)| vm.id.clone());
            self.free_seat(&spec.id);
            if let Some(vm) = vm {
                self.drop_failed_vm(&vm).await;
            }
            return Err(err);
        }
        Ok(RuntimeInfo {
            sandbox_id: spec.id.clone(),
            image: self.config.image.clone(),
            labels: spec.labels.clone(),
            running: true,
            image_pulled: false,
        })
    }

    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError> {
        self.ensure_loaded().await?;
        let found = {
            let seats = self.seats();
            match seats.find(id) {
                Some((vm, seat)) => Ok(Some((
                    vm.id.clone(),
                    seat.owner.clone(),
                    seat.uid,
                    seat.placed,
                ))),
                None if seats.vm(id).is_some() => Err(ProviderError::InvalidRequest {
                    message: format!("{id} is a pool VM, not a sandbox"),
                }),
                None => Ok(None),
            }
        };
        let Some((vm, owner, uid, placed)) = found? else {
            return self.inner.destroy(id).await;
        };
        if placed {
            let uid = self.uid_arg(uid);
            match self.inner.status(&vm).await? {
                RuntimeStatus::Running => {
                    self.must(
                        &vm,
                        "removing the workspace",
                        workspace::REMOVE_WORKSPACE,
                        &[&owner, &uid, id.as_str()],
                    )
                    .await?;
                }
                // Nothing of the workspace runs; the VM goes when it is empty.
                RuntimeStatus::Stopped | RuntimeStatus::Missing => {}
            }
        }
        self.free_seat(id);
        Ok(())
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        self.ensure_loaded().await?;
        let vm = self
            .seats()
            .find(id)
            .map(|(vm, seat)| (vm.id.clone(), seat.placed));
        match vm {
            Some((vm, true)) => self.inner.status(&vm).await,
            Some((_, false)) => Ok(RuntimeStatus::Missing),
            None => self.inner.status(id).await,
        }
    }

    async fn stats(&self, id: &SandboxId) -> Result<SandboxStats, ProviderError> {
        match self.logical(id).await? {
            Some(_) => Err(ProviderError::Unsupported { op: "stats" }),
            None => self.inner.stats(id).await,
        }
    }

    async fn inventory(&self) -> Result<Vec<RuntimeInfo>, ProviderError> {
        self.ensure_loaded().await?;
        let mut runtimes: Vec<RuntimeInfo> = self
            .inner
            .inventory()
            .await?
            .into_iter()
            .filter(|runtime| !runtime.labels.contains_key(LABEL_POOL))
            .collect();
        let placed: Vec<(SandboxId, String)> = self
            .seats()
            .placed()
            .map(|(id, seat)| (id.clone(), seat.owner.clone()))
            .collect();
        runtimes.extend(placed.into_iter().map(|(id, owner)| RuntimeInfo {
            labels: BTreeMap::from([
                (svc_provider::LABEL_MANAGED.to_owned(), "true".to_owned()),
                (svc_provider::LABEL_SANDBOX_ID.to_owned(), id.to_string()),
                (svc_provider::LABEL_OWNER.to_owned(), owner),
                (
                    svc_provider::LABEL_WORKER.to_owned(),
                    self.identity.worker_id.clone(),
                ),
                (
                    svc_provider::LABEL_INSTALLATION.to_owned(),
                    self.identity.installation_id.clone(),
                ),
            ]),
            sandbox_id: id,
            image: self.config.image.clone(),
            running: true,
            image_pulled: false,
        }));
        Ok(runtimes)
    }

    async fn logs(&self, id: &SandboxId, lines: usize) -> Result<Vec<String>, ProviderError> {
        match self.logical(id).await? {
            Some(_) => Err(ProviderError::Unsupported { op: "logs" }),
            None => self.inner.logs(id, lines).await,
        }
    }

    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> Result<ExecSession, ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.exec(id, spec).await;
        };
        let workdir = match spec.workdir {
            Some(dir) => {
                workspace::confine(&place.workspace, &dir)?;
                dir
            }
            None => place.workspace.clone(),
        };
        let mut env = place.seat.env.clone();
        env.extend(spec.env);
        let user = self.switches_users().then(|| ExecUser {
            uid: place.seat.uid,
            gid: place.seat.uid,
            home: place.workspace.clone(),
        });
        self.inner
            .exec(
                &place.vm,
                ExecSpec {
                    env,
                    workdir: Some(workdir),
                    user,
                    ..spec
                },
            )
            .await
    }

    async fn exec_state(
        &self,
        id: &SandboxId,
        handle: &str,
    ) -> Result<(ExecState, Option<std::sync::Arc<dyn ExecControl>>), ProviderError> {
        match self.logical(id).await? {
            Some(place) => self.inner.exec_state(&place.vm, handle).await,
            None => self.inner.exec_state(id, handle).await,
        }
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        mode: u32,
        content: Upload,
    ) -> Result<(), ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.write_file(id, path, mode, content).await;
        };
        if let Some(files) = self.user_files(&place) {
            workspace::confine(&place.workspace, path)?;
            workspace::non_root_in(&place.workspace, (**path).clone())?;
            return files.write(path, mode, content.stream).await;
        }
        let real = self.real_file(&place, path).await?;
        self.inner
            .write_file(&place.vm, &real, mode, content)
            .await?;
        self.give_to_user(&place, &real).await
    }

    async fn read_file(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.read_file(id, path).await;
        };
        if let Some(files) = self.user_files(&place) {
            workspace::confine(&place.workspace, path)?;
            return files.read(path).await;
        }
        let real = self.real_path(&place, path).await?;
        self.inner.read_file(&place.vm, &real).await
    }

    async fn delete_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.delete_file(id, path, recursive).await;
        };
        if let Some(files) = self.user_files(&place) {
            workspace::confine(&place.workspace, path)?;
            workspace::non_root_in(&place.workspace, (**path).clone())?;
            return files.delete(path, recursive).await;
        }
        // A symlink itself is deleted, not what it points to: only its directory resolves.
        let parent = self.real_path(&place, &path.parent()).await?;
        let real = workspace::non_root_in(&place.workspace, parent.join(path.file_name()))?;
        self.inner.delete_file(&place.vm, &real, recursive).await
    }

    async fn read_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.read_archive(id, dir).await;
        };
        let dir = if dir.is_root() { &place.workspace } else { dir };
        if let Some(files) = self.user_files(&place) {
            workspace::confine(&place.workspace, dir)?;
            return files.archive(dir).await;
        }
        let real = self.real_path(&place, dir).await?;
        self.inner.read_archive(&place.vm, &real).await
    }

    async fn write_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
        archive: ByteStream,
    ) -> Result<(), ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.write_archive(id, dir, archive).await;
        };
        let dir = if dir.is_root() { &place.workspace } else { dir };
        if let Some(files) = self.user_files(&place) {
            workspace::confine(&place.workspace, dir)?;
            return files.extract(dir, archive).await;
        }
        let real = self.real_path(&place, dir).await?;
        self.inner.write_archive(&place.vm, &real, archive).await
    }

    async fn list_dir(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<Vec<FileInfo>, ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.list_dir(id, path).await;
        };
        // The file API's default directory `/` means the workspace here.
        let path = if path.is_root() {
            &place.workspace
        } else {
            path
        };
        if let Some(files) = self.user_files(&place) {
            workspace::confine(&place.workspace, path)?;
            return files.list(path).await;
        }
        let real = self.real_path(&place, path).await?;
        self.inner.list_dir(&place.vm, &real).await
    }

    async fn move_path(
        &self,
        id: &SandboxId,
        from: &NonRootPath,
        to: &NonRootPath,
    ) -> Result<(), ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.move_path(id, from, to).await;
        };
        if let Some(files) = self.user_files(&place) {
            for path in [from, to] {
                workspace::confine(&place.workspace, path)?;
                workspace::non_root_in(&place.workspace, (**path).clone())?;
            }
            return files.rename(from, to).await;
        }
        let from_parent = self.real_path(&place, &from.parent()).await?;
        let from = workspace::non_root_in(&place.workspace, from_parent.join(from.file_name()))?;
        let to = self.real_file(&place, to).await?;
        self.inner.move_path(&place.vm, &from, &to).await?;
        self.give_to_user(&place, &to).await
    }

    async fn chmod(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
        mode: u32,
    ) -> Result<(), ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.chmod(id, path, mode).await;
        };
        if let Some(files) = self.user_files(&place) {
            workspace::confine(&place.workspace, path)?;
            return files.chmod(path, mode).await;
        }
        let real = self.real_path(&place, path).await?;
        self.inner.chmod(&place.vm, &real, mode).await
    }

    async fn stat(&self, id: &SandboxId, path: &SandboxPath) -> Result<FileInfo, ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.stat(id, path).await;
        };
        if let Some(files) = self.user_files(&place) {
            workspace::confine(&place.workspace, path)?;
            return files.stat(path).await;
        }
        let real = self.real_path(&place, path).await?;
        self.inner.stat(&place.vm, &real).await
    }

    async fn glob(
        &self,
        id: &SandboxId,
        pattern: &SandboxGlob,
    ) -> Result<Vec<String>, ProviderError> {
        let Some(place) = self.logical(id).await? else {
            return self.inner.glob(id, pattern).await;
        };
        workspace::confine_glob(&place.workspace, pattern)?;
        let mut found = match self.user_files(&place) {
            Some(files) => files.glob(pattern).await?,
            None => self.inner.glob(&place.vm, pattern).await?,
        };
        found.retain(|path| workspace::inside(&place.workspace, path));
        Ok(found)
    }

    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>, ProviderError> {
        self.inner.snapshots().await
    }
}
