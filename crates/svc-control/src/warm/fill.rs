//! The warm pools' background loop: keeps every pool in line with its template (which any
//! replica may change, so the templates are read again every `defaults.warm_check_interval`
//! and at once after a local change), adopts the ready runtimes a previous process left (once,
//! before the first start), replaces ready runtimes that stopped, and starts what the pools
//! lack, sharing `defaults.max_warm_runtimes` round robin, [`FILL_CONCURRENCY`] at a time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use svc_core::{Capability, Error, SandboxId};
use svc_provider::{
    Provider, RuntimeInfo, RuntimeStatus, SpawnSpec, LABEL_INSTALLATION, LABEL_MANAGED,
    LABEL_OWNER, LABEL_SANDBOX_ID, LABEL_TEMPLATE, LABEL_TENANT, LABEL_WARM, LABEL_WARM_SPEC,
    LABEL_WORKER,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{Discarded, WarmSpec};
use crate::ControlPlane;

/// Warm runtimes started at once, over every pool: a refill must not crowd out the spawns
/// people are waiting for.
pub(crate) const FILL_CONCURRENCY: usize = 2;
/// How long a pool waits after a failed start before trying again.
const START_BACKOFF: Duration = Duration::from_secs(5);

/// True for a runtime started warm and not claimed yet: it is still listed under the ID its
/// labels name. Such runtimes belong to the pools, not to reconciliation.
pub(crate) fn is_unclaimed_warm(runtime: &RuntimeInfo) -> bool {
    runtime.labels.get(LABEL_WARM).map(String::as_str) == Some("true")
        && runtime.labels.get(LABEL_SANDBOX_ID).map(String::as_str)
            == Some(runtime.sandbox_id.as_str())
}

/// Runs until `cancel` fires.
pub(crate) async fn run(plane: ControlPlane, cancel: CancellationToken) {
    if plane.providers().pool().is_some() {
        // Pool mode: every sandbox is a workspace in a pool VM; there is nothing to warm.
        return;
    }
    let interval = plane
        .config()
        .defaults
        .warm_check_interval
        .as_std()
        .max(Duration::from_millis(100));
    let fills = Arc::new(Semaphore::new(FILL_CONCURRENCY));
    let mut adopted = false;
    let mut synced = false;
    let mut next_check = tokio::time::Instant::now() + interval;
    loop {
        let due = tokio::time::Instant::now() >= next_check;
        // The templates are read at start, on every check and after a change here; a claim or
        // a finished start only needs the pools looked at.
        if !synced || due || plane.inner.warm.take_templates_changed() {
            match plane.sync_warm_pools().await {
                Ok(()) => synced = true,
                Err(err) => {
                    tracing::warn!(error = %err, "warm pools: reading the templates failed");
                }
            }
        }
        if synced && !adopted {
            adopted = plane.adopt_warm_runtimes().await;
        }
        if due {
            plane.check_warm_runtimes().await;
            next_check = tokio::time::Instant::now() + interval;
        }
        if adopted {
            plane.start_warm_runtimes(&fills);
        }
        tokio::select! {
            () = cancel.cancelled() => break,
            () = plane.inner.warm.woken() => {}
            () = tokio::time::sleep_until(next_check) => {}
        }
    }
    tracing::debug!("warm pools stopped");
}

impl ControlPlane {
    /// The provider for warm runtimes called `name`: enabled here and able to hand one over.
    fn warm_provider(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.providers()
            .get(name)
            .filter(|p| p.capabilities().contains(&Capability::WarmPool))
    }

    fn warm_cap(&self) -> usize {
        self.config().defaults.max_warm_runtimes as usize
    }

    /// Reads the templates and reshapes the pools to them.
    async fn sync_warm_pools(&self) -> Result<(), Error> {
        let templates = self
            .store()
            .list_templates(&svc_store::KeyPage::ALL, None)
            .await?;
        let wanted: BTreeMap<String, (WarmSpec, u32)> = templates
            .into_iter()
            .filter(|t| t.warm_pool > 0 && self.warm_provider(&t.provider).is_some())
            .map(|t| {
                let spec = WarmSpec {
                    provider: t.provider,
                    image: t.image,
                    memory_mb: t.memory_mb,
                    vcpus: t.vcpus,
                };
                (t.name, (spec, t.warm_pool))
            })
            .collect();
        for discarded in self.inner.warm.reconfigure(&wanted) {
            self.discard_warm(discarded);
        }
        Ok(())
    }

    /// Removes a runtime that left its pool, in the background (retried until it is gone).
    fn discard_warm(&self, discarded: Discarded) {
        let Some(provider) = self.providers().for_cleanup(&discarded.provider).cloned() else {
            return;
        };
        let plane = self.clone();
        tokio::spawn(async move {
            if let Err(err) = provider.destroy(&discarded.id).await {
                tracing::warn!(runtime = %discarded.id, error = %err, "removing a warm runtime failed; retrying in the background");
                plane.retry_runtime_removal(&discarded.id, &provider);
            }
        });
    }

    /// Takes the ready runtimes a previous process of this worker left into their pools, and
    /// removes those no pool wants (template gone or changed, pool full, runtime stopped).
    /// False when a provider could not list its runtimes: tried again on the next round, and
    /// nothing is started until then (a pool would overfill).
    async fn adopt_warm_runtimes(&self) -> bool {
        let mut complete = true;
        let (mut adopted, mut removed) = (0usize, 0usize);
        for provider in self.providers().all() {
            if !provider.capabilities().contains(&Capability::WarmPool) {
                continue;
            }
            let runtimes = match provider.inventory().await {
                Ok(runtimes) => runtimes,
                Err(err) => {
                    tracing::warn!(provider = provider.name(), error = %err, "warm pools: listing runtimes failed; adoption retried");
                    complete = false;
                    continue;
                }
            };
            for runtime in runtimes {
                let label = |key: &str| runtime.labels.get(key).map(String::as_str);
                if !is_unclaimed_warm(&runtime)
                    || !self.made_here(&runtime)
                    || label(LABEL_WORKER) != Some(self.worker_id())
                {
                    continue;
                }
                let (template, spec) = (
                    label(LABEL_TEMPLATE).unwrap_or_default(),
                    label(LABEL_WARM_SPEC).unwrap_or_default(),
                );
                if runtime.running
                    && self.inner.warm.adopt(
                        template,
                        spec,
                        runtime.sandbox_id.clone(),
                        self.warm_cap(),
                    )
                {
                    adopted += 1;
                    continue;
                }
                removed += 1;
                self.discard_warm(Discarded {
                    provider: provider.name().to_owned(),
                    id: runtime.sandbox_id.clone(),
                });
            }
        }
        if adopted + removed > 0 {
            tracing::info!(
                adopted,
                removed,
                "warm pools: took over the runtimes of a previous start"
            );
        }
        complete
    }

    /// Replaces ready runtimes whose provider says they no longer run.
    async fn check_warm_runtimes(&self) {
        for (template, provider_name, id) in self.inner.warm.ready_runtimes() {
            let Some(provider) = self.providers().for_cleanup(&provider_name) else {
                continue;
            };
            match provider.status(&id).await {
                Ok(RuntimeStatus::Running) => continue,
                Ok(status) => {
                    tracing::warn!(template, runtime = %id, ?status, "a warm runtime failed its health check; replacing it");
                }
                Err(err) => {
                    tracing::warn!(template, runtime = %id, error = %err, "a warm runtime could not be checked; replacing it");
                }
            }
            if self.inner.warm.remove_ready(&template, &id) {
                self.discard_warm(Discarded {
                    provider: provider_name,
                    id,
                });
            }
        }
    }

    /// Starts what the pools lack, each start in a task of its own.
    fn start_warm_runtimes(&self, fills: &Arc<Semaphore>) {
        let (starts, surplus) = self.inner.warm.plan(self.warm_cap(), Instant::now());
        for discarded in surplus {
            self.discard_warm(discarded);
        }
        for (template, spec) in starts {
            let plane = self.clone();
            let fills = Arc::clone(fills);
            tokio::spawn(async move {
                let Ok(_permit) = fills.acquire_owned().await else {
                    return;
                };
                plane.start_warm_runtime(&template, spec).await;
            });
        }
    }

    async fn start_warm_runtime(&self, template: &str, spec: WarmSpec) {
        let Some(provider) = self.warm_provider(&spec.provider).cloned() else {
            self.inner
                .warm
                .start_failed(template, Instant::now() + START_BACKOFF);
            return;
        };
        if self.shutdown_token().is_cancelled() {
            return;
        }
        let id = SandboxId::generate();
        let started = self
            .spawn_runtime(&provider, self.warm_spawn_spec(&id, template, &spec))
            .await;
        match started {
            Ok(_) => {
                if !self.inner.warm.started(template, &spec, id.clone()) {
                    self.discard_warm(Discarded {
                        provider: spec.provider,
                        id,
                    });
                } else {
                    tracing::debug!(template, runtime = %id, "warm runtime ready");
                }
                // Another may be due now that this one is in.
                self.inner.warm.wake();
            }
            Err(failure) => {
                tracing::warn!(template, error = %failure.error, "starting a warm runtime failed");
                self.inner
                    .warm
                    .start_failed(template, Instant::now() + START_BACKOFF);
            }
        }
    }

    /// What a warm runtime is started as: no owner, tenant or environment yet (those come
    /// with the sandbox that claims it), labelled as warm for `template`.
    fn warm_spawn_spec(&self, id: &SandboxId, template: &str, spec: &WarmSpec) -> SpawnSpec {
        SpawnSpec {
            id: id.clone(),
            image: spec.image.clone(),
            memory_mb: spec.memory_mb,
            vcpus: spec.vcpus,
            env: BTreeMap::new(),
            network: None,
            labels: BTreeMap::from([
                (LABEL_MANAGED.to_owned(), "true".to_owned()),
                (LABEL_SANDBOX_ID.to_owned(), id.to_string()),
                (LABEL_OWNER.to_owned(), String::new()),
                (LABEL_TENANT.to_owned(), String::new()),
                (LABEL_WORKER.to_owned(), self.worker_id().to_owned()),
                (
                    LABEL_INSTALLATION.to_owned(),
                    self.inner.installation_id.clone(),
                ),
                (LABEL_WARM.to_owned(), "true".to_owned()),
                (LABEL_TEMPLATE.to_owned(), template.to_owned()),
                (LABEL_WARM_SPEC.to_owned(), spec.label()),
            ]),
            multi_user: false,
            egress: svc_core::egress::Egress::default(),
            progress: Default::default(),
        }
    }
}
