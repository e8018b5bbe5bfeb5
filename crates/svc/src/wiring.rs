//! Builds the pieces from configuration: the store, the providers and the control plane. The
//! one place where backends are picked; everything else sees `Arc<dyn ..>`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use svc_control::{
    Authenticator, ControlPlane, ControlPlaneParts, Pool, PoolIdentity, ProviderRegistry,
};
use svc_core::config::{Config, DatabaseDriver, PROVIDER_FIRECRACKER, PROVIDER_QEMU};
use svc_core::Clock;
use svc_provider::docker::DockerProvider;
use svc_provider::microvm::MicrovmProvider;
use svc_provider::mock::MockProvider;
use svc_provider::Provider;
use svc_store::postgres::PgStore;
use svc_store::sqlite::SqliteStore;
use svc_store::{EventLog, Store};

/// The store, and with PostgreSQL the event log the replicas share.
pub(crate) struct OpenedStore {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) event_log: Option<Arc<dyn EventLog>>,
}

/// Connections a PostgreSQL store keeps at most.
const POSTGRES_POOL_SIZE: usize = 16;

/// Opens the configured store and runs its migrations.
pub(crate) async fn open_store(config: &Config) -> anyhow::Result<OpenedStore> {
    match config.database.driver {
        DatabaseDriver::Sqlite => {
            let store = SqliteStore::open(&config.database.path)
                .await
                .with_context(|| format!("opening sqlite database {:?}", config.database.path))?;
            Ok(OpenedStore {
                store: Arc::new(store),
                event_log: None,
            })
        }
        DatabaseDriver::Postgres => {
            // The DSN may hold a password: it is never part of a message.
            let store = Arc::new(
                PgStore::connect(config.database.dsn.expose(), POSTGRES_POOL_SIZE)
                    .await
                    .context("opening the postgres database (database.dsn)")?,
            );
            Ok(OpenedStore {
                event_log: Some(Arc::clone(&store) as Arc<dyn EventLog>),
                store,
            })
        }
    }
}

fn mock_root(config: &Config) -> PathBuf {
    let configured = &config.providers.mock.root_dir;
    if configured.as_os_str().is_empty() {
        std::env::temp_dir().join("svc-mock")
    } else {
        configured.clone()
    }
}

/// Providers disabled for new spawns that still have sandboxes in the store: they stay
/// reachable so those sandboxes can be destroyed, reaped and recovered.
async fn retired_providers(
    config: &Config,
    store: &dyn Store,
) -> anyhow::Result<Vec<Arc<dyn Provider>>> {
    let mut retired: Vec<Arc<dyn Provider>> = Vec::new();
    if !config.providers.docker.enabled && store.count_sandboxes_on_provider("docker").await? > 0 {
        match DockerProvider::connect(engine_only(&config.providers.docker)).await {
            Ok(docker) => retired.push(Arc::new(docker)),
            Err(err) => {
                tracing::warn!(error = %err, "the disabled docker provider could not be set up to clean up its sandboxes");
            }
        }
    }
    if !config.providers.mock.enabled && store.count_sandboxes_on_provider("mock").await? > 0 {
        retired.push(Arc::new(MockProvider::new(mock_root(config))));
    }
    // MicroVMs outlive svc: their records in `data_dir` are all a retired provider needs.
    if !config.providers.firecracker.enabled
        && store
            .count_sandboxes_on_provider(PROVIDER_FIRECRACKER)
            .await?
            > 0
    {
        retired.push(Arc::new(MicrovmProvider::firecracker(
            config.providers.firecracker.clone(),
            None,
        )));
    }
    if !config.providers.qemu.enabled && store.count_sandboxes_on_provider(PROVIDER_QEMU).await? > 0
    {
        retired.push(Arc::new(MicrovmProvider::qemu(
            config.providers.qemu.clone(),
            None,
        )));
    }
    for provider in &retired {
        tracing::info!(
            provider = provider.name(),
            "provider is disabled for new spawns; it still destroys and reaps its sandboxes"
        );
    }
    Ok(retired)
}

/// The enabled providers, in the order `docker`, `firecracker`, `qemu`, `mock`, and the default.
pub(crate) async fn providers(
    config: &Config,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ProviderRegistry> {
    let (providers, default) = enabled_providers(config).await?;
    Ok(ProviderRegistry::new(providers, default, clock))
}

/// The enabled providers and the default's name.
async fn enabled_providers(config: &Config) -> anyhow::Result<(Vec<Arc<dyn Provider>>, String)> {
    let mut providers: Vec<Arc<dyn Provider>> = Vec::new();
    let mut docker_answers = false;
    if config.providers.docker.enabled {
        // An engine that does not answer leaves the provider listed as unhealthy (decisions §2),
        // and it becomes healthy once the engine appears.
        // Fails only for `providers.docker.agent: always` without a usable agent, which stops
        // start-up (decisions §14).
        let docker = DockerProvider::connect(config.providers.docker.clone())
            .await
            .map_err(|err| anyhow::anyhow!("the docker provider: {err}"))?
            .with_agent_deadline(config.defaults.spawn_timeout.as_std());
        docker_answers = docker.health().await.is_ok();
        if !docker_answers {
            tracing::info!("no Docker engine answers; the docker provider is unhealthy");
        }
        providers.push(Arc::new(docker));
    }
    if config.providers.firecracker.enabled || config.providers.qemu.enabled {
        // Images are exported through the Docker engine whether or not the docker provider is
        // enabled for spawns (decisions §14).
        let docker = DockerProvider::connect(engine_only(&config.providers.docker))
            .await
            .ok()
            .map(Arc::new);
        let mut microvm = Vec::new();
        if config.providers.firecracker.enabled {
            microvm.push(MicrovmProvider::firecracker(
                config.providers.firecracker.clone(),
                docker.clone(),
            ));
        }
        if config.providers.qemu.enabled {
            microvm.push(MicrovmProvider::qemu(config.providers.qemu.clone(), docker));
        }
        // Their start-up health check runs in `Provider::warm_up`, off the start-up path.
        providers.extend(
            microvm
                .into_iter()
                .map(|provider| Arc::new(provider) as Arc<dyn Provider>),
        );
    }
    if config.providers.mock.enabled {
        providers.push(Arc::new(MockProvider::new(mock_root(config))));
    }
    let default = if config.providers.default.is_empty() {
        // Auto: docker when it answers at start-up, else mock (decisions §2).
        if docker_answers {
            "docker".to_owned()
        } else {
            providers
                .iter()
                .find(|p| p.name() != "docker")
                .or(providers.first())
                .map(|p| p.name().to_owned())
                .unwrap_or_default()
        }
    } else {
        config.providers.default.clone()
    };
    if !default.is_empty() && !providers.iter().any(|p| p.name() == default) {
        bail!("providers.default: provider {default:?} is not enabled");
    }
    if providers.is_empty() {
        tracing::warn!("no provider is enabled; every spawn will fail and /ready answers 503");
    }
    if config.providers.mock.enabled && providers.len() > 1 {
        tracing::warn!(
            "the mock provider is enabled beside another: it runs commands as host processes, \
             with svc's rights, so any caller who may spawn reaches the host; disable it \
             (providers.mock.enabled: false) outside development"
        );
    }
    Ok((providers, default))
}

/// Pool mode: the pool takes the place of the provider its VMs run on (`pool.provider`, else
/// the default), so every spawn on it becomes a workspace in a pool VM.
fn with_pool(
    config: &Config,
    providers: &mut [Arc<dyn Provider>],
    default: &str,
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    installation_id: &str,
) -> anyhow::Result<Option<Arc<Pool>>> {
    if !config.pool.enabled {
        return Ok(None);
    }
    let name = if config.pool.provider.is_empty() {
        default
    } else {
        config.pool.provider.as_str()
    };
    let Some(slot) = providers.iter_mut().find(|p| p.name() == name) else {
        bail!("pool.provider: provider {name:?} is not enabled");
    };
    let pool = Pool::new(
        config.pool.clone(),
        Arc::clone(slot),
        Arc::clone(store),
        Arc::clone(clock),
        PoolIdentity {
            worker_id: config.worker.id.clone(),
            installation_id: installation_id.to_owned(),
            lease_ttl: config.worker.lease_ttl.as_std(),
        },
    );
    *slot = Arc::clone(&pool) as Arc<dyn Provider>;
    tracing::info!(
        provider = name,
        max_vms = config.pool.max_vms,
        max_users_per_vm = config.pool.max_users_per_vm,
        "pool mode: sandboxes are workspaces in shared pool VMs"
    );
    Ok(Some(pool))
}

/// The control plane over an opened store.
pub(crate) async fn control_plane(
    config: Arc<Config>,
    opened: &OpenedStore,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ControlPlane> {
    let store = Arc::clone(&opened.store);
    let authenticator = Authenticator::from_config(&config.auth)?;
    let retired = retired_providers(&config, store.as_ref()).await?;
    let installation_id = store
        .installation_id()
        .await
        .context("reading the store's installation ID")?;
    let (mut enabled, default) = enabled_providers(&config).await?;
    let pool = with_pool(
        &config,
        &mut enabled,
        &default,
        &store,
        &clock,
        &installation_id,
    )?;
    let mut registry =
        ProviderRegistry::new(enabled, default, Arc::clone(&clock)).with_retired(retired);
    if let Some(pool) = pool {
        registry = registry.with_pool(pool);
    }
    let providers = Arc::new(registry);
    let builder = image_builder(&config).await;
    Ok(ControlPlane::new(ControlPlaneParts {
        config,
        store,
        providers,
        clock,
        authenticator,
        installation_id,
        event_log: opened.event_log.clone(),
        builder,
    }))
}

/// Template builds go through the Docker engine whatever provider a template spawns on
/// (decisions §17); the engine is reached lazily, so one that appears later is used.
async fn image_builder(config: &Config) -> Option<Arc<dyn svc_provider::ImageBuilder>> {
    match DockerProvider::connect(engine_only(&config.providers.docker)).await {
        Ok(docker) => Some(Arc::new(docker)),
        Err(err) => {
            tracing::warn!(error = %err, "template builds are unavailable: the Docker engine client could not be set up");
            None
        }
    }
}

/// The docker settings for a provider that spawns nothing (a retired one, the image exporter):
/// it needs no agent of its own, and reaches agent-run containers through their labels.
fn engine_only(
    config: &svc_core::config::DockerProviderConfig,
) -> svc_core::config::DockerProviderConfig {
    svc_core::config::DockerProviderConfig {
        agent: svc_core::config::DockerAgentMode::Never,
        ..config.clone()
    }
}
