//! The `docker` provider (decisions §14): one long-lived container per sandbox, created through
//! the Docker Engine API (bollard) over `providers.docker.socket`, `DOCKER_HOST`, or the default
//! socket. Containers carry svc's labels; security settings come from configuration. With the
//! fast path (`agent.rs`) each container's init is svc's agent, and exec, files and logs go
//! through it; otherwise exec uses the exec API, files the archive API (and small scripts for
//! directory operations), logs the logs API.

mod agent;
mod build;
mod egress;
pub use egress::network_gateway;
mod egress_proxy;
mod errors;
mod exec;
mod files;
mod gate;
mod stats;
mod tar;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use std::path::Path;

use async_trait::async_trait;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, ListContainersOptions, LogsOptions,
    RemoveContainerOptions, RenameContainerOptions,
};
use bollard::Docker;
use futures::StreamExt;
use svc_core::config::DockerProviderConfig;
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::{Capability, SandboxId};

use self::errors::{container_error, engine_error, status_of};
use crate::pull::{ProgressSink, PullProgress, PullTally};
use crate::{
    ByteStream, ExecControl, ExecSession, ExecSpec, ExecState, FileInfo, Provider, ProviderError,
    RuntimeInfo, RuntimeStatus, SandboxStats, SpawnSpec, Upload, LABEL_MANAGED, LABEL_SANDBOX_ID,
};

/// Capabilities a multi-user container (a pool VM) keeps for its root: making workspaces
/// for other users, reaching into them, ending their processes (see `SpawnSpec::multi_user`).
const MULTI_USER_CAPS: &[&str] = &["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"];
/// What a multi-user container's agent needs besides: it becomes each workspace's user itself
/// (the engine's exec did that from outside).
const MULTI_USER_AGENT_CAPS: &[&str] = &["SETUID", "SETGID"];
const CAPABILITIES: &[Capability] = &[
    Capability::Spawn,
    Capability::Exec,
    Capability::ExecStream,
    Capability::Files,
    Capability::Console,
    Capability::Health,
    Capability::RuntimeInventory,
    Capability::Container,
    Capability::Stats,
    Capability::WarmPool,
    Capability::Egress,
    // Kept apart from exec starts by `gate.rs`: the engine's pause can otherwise freeze an
    // exec half-started and hang every later call on the container.
    Capability::Pause,
];

/// Request timeout for engine calls (streams are not bounded by it).
const ENGINE_TIMEOUT_SECS: u64 = 120;
/// How long an image pull may take.
const PULL_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a pause is asked when runc's freezer gives up on a busy container.
const PAUSE_ATTEMPTS: u32 = 5;
/// How often a resume is asked while the runtime does not yet count the container paused.
const RESUME_ATTEMPTS: u32 = 10;
/// Keeps the container alive without depending on the image's own command; PID 1 exits on
/// TERM so the engine can stop it at once.
const KEEPALIVE: &str = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done";
/// Size of the writable `/tmp` when the root filesystem is read-only.
const READ_ONLY_TMP: &str = "rw,nosuid,nodev,size=256m";

/// Sandboxes as Docker containers.
pub struct DockerProvider {
    /// The client once the engine answered (with the API version negotiated); until then each
    /// call tries to connect, so an engine that appears later is picked up.
    client: std::sync::RwLock<Option<Docker>>,
    config: DockerProviderConfig,
    endpoint: String,
    gates: gate::Gates,
    /// Each container's address on this host, for previews; a container keeps its address
    /// while it runs.
    addresses: std::sync::Mutex<HashMap<String, std::net::IpAddr>>,
    egress_proxy: egress_proxy::EgressProxy,
    /// What new sandboxes get.
    exec_path: agent::ExecPath,
    /// How each container is reached, as decided at its spawn.
    routes: agent::Routes,
    failures: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<crate::RuntimeFailure>>>,
    /// How long a new container's agent has to answer.
    agent_deadline: Duration,
}

/// The container name of a sandbox. A claimed warm runtime is renamed to its sandbox's name,
/// which is how svc finds it from then on (its labels keep the warm ID).
fn container_name(id: &SandboxId) -> String {
    format!("svc-{id}")
}

/// The sandbox a container runs: its name's, else (a container someone renamed) its label's.
fn container_sandbox(
    names: Option<&[String]>,
    labels: &BTreeMap<String, String>,
) -> Option<SandboxId> {
    names
        .into_iter()
        .flatten()
        .find_map(|name| SandboxId::parse(name.trim_start_matches('/').strip_prefix("svc-")?).ok())
        .or_else(|| SandboxId::parse(labels.get(LABEL_SANDBOX_ID)?).ok())
}

impl DockerProvider {
    /// A provider for the configured engine. Connecting happens on first use: an engine that
    /// does not answer makes the provider unhealthy, not absent. Fails only when
    /// `providers.docker.agent` is `always` and no agent can be used.
    pub async fn connect(config: DockerProviderConfig) -> Result<Self, ProviderError> {
        let configured = config.socket.trim();
        let endpoint = if configured.is_empty() {
            std::env::var("DOCKER_HOST")
                .unwrap_or_else(|_| "unix:///var/run/docker.sock".to_owned())
        } else if configured.starts_with("tcp://")
            || configured.starts_with("http://")
            || configured.starts_with("unix://")
        {
            configured.to_owned()
        } else {
            format!("unix://{configured}")
        };
        let exec_path = agent::choose(&config, &endpoint).await?;
        if let agent::ExecPath::Engine { reason } = &exec_path {
            tracing::info!(
                reason,
                "docker sandboxes use the engine's exec and archive APIs"
            );
        }
        let (failed, failures) = tokio::sync::mpsc::unbounded_channel();
        let provider = DockerProvider {
            client: std::sync::RwLock::new(None),
            egress_proxy: egress_proxy::EgressProxy::new(
                config.egress_proxy_port,
                config.egress_allow_host,
            ),
            config,
            endpoint,
            gates: gate::Gates::default(),
            addresses: std::sync::Mutex::default(),
            exec_path,
            routes: agent::Routes::new(failed),
            failures: std::sync::Mutex::new(Some(failures)),
            agent_deadline: agent::READY_TIMEOUT,
        };
        // Connect now when the engine answers, so the first request does not pay for it.
        let _ = provider.client().await;
        Ok(provider)
    }

    /// Gives each new container's agent `deadline` to answer (the spawn deadline): one that
    /// does not is removed with its container and the spawn fails.
    #[must_use]
    pub fn with_agent_deadline(mut self, deadline: Duration) -> Self {
        self.agent_deadline = deadline;
        self
    }

    /// The connected client, connecting (and negotiating the API version) when needed.
    async fn client(&self) -> Result<Docker, ProviderError> {
        if let Some(client) = self
            .client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        {
            return Ok(client);
        }
        let unavailable = |e: &dyn std::fmt::Display| {
            ProviderError::unavailable(format!(
                "cannot reach the Docker engine at {}: {e}",
                self.endpoint
            ))
        };
        let docker = if let Some(path) = self.endpoint.strip_prefix("unix://") {
            Docker::connect_with_socket(path, ENGINE_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
        } else {
            Docker::connect_with_http(
                &self.endpoint,
                ENGINE_TIMEOUT_SECS,
                bollard::API_DEFAULT_VERSION,
            )
        }
        .map_err(|e| unavailable(&e))?;
        // The engine may be older than the client's default API version.
        let docker = tokio::time::timeout(Duration::from_secs(5), docker.negotiate_version())
            .await
            .map_err(|_| unavailable(&"no answer within 5s"))?
            .map_err(|e| unavailable(&e))?;
        *self
            .client
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(docker.clone());
        Ok(docker)
    }

    fn user(&self) -> Option<&str> {
        (!self.config.user.is_empty()).then_some(self.config.user.as_str())
    }

    /// Pulls `image` unless it is present, reporting how far the pull is to `progress`.
    /// Returns whether it pulled.
    async fn ensure_image(
        &self,
        docker: &Docker,
        image: &str,
        progress: &ProgressSink,
    ) -> Result<bool, ProviderError> {
        match docker.inspect_image(image).await {
            Ok(_) => return Ok(false),
            Err(err) if status_of(&err) == Some(404) => {}
            Err(err) => return Err(engine_error("inspecting the image", err)),
        }
        tracing::info!(image, "pulling image");
        let options = CreateImageOptions {
            from_image: Some(image.to_owned()),
            ..Default::default()
        };
        let mut pull = docker.create_image(Some(options), None, None);
        let pulling = async {
            let mut tally = PullTally::default();
            while let Some(message) = pull.next().await {
                let message =
                    message.map_err(|e| engine_error(&format!("pulling image {image}"), e))?;
                if let Some(error) = message.error_detail.and_then(|d| d.message) {
                    return Err(ProviderError::failed(format!(
                        "pulling image {image}: {error}"
                    )));
                }
                let detail = message.progress_detail.unwrap_or_default();
                if tally.update(
                    message.id.as_deref(),
                    message.status.as_deref(),
                    detail.current,
                    detail.total,
                ) {
                    let (current_bytes, total_bytes) = tally.totals();
                    progress.report(PullProgress {
                        image: image.to_owned(),
                        current_bytes,
                        total_bytes,
                    });
                }
            }
            Ok(())
        };
        tokio::time::timeout(PULL_TIMEOUT, pulling)
            .await
            .map_err(|_| {
                ProviderError::failed(format!(
                    "pulling image {image} took longer than {}s",
                    PULL_TIMEOUT.as_secs()
                ))
            })??;
        Ok(true)
    }

    fn container_body(
        &self,
        spec: &SpawnSpec,
        agent: Option<(&agent::AgentBinary, &Path)>,
    ) -> ContainerCreateBody {
        let config = &self.config;
        let mut security_opt = vec!["no-new-privileges:true".to_owned()];
        if !config.seccomp_profile.is_empty() && config.seccomp_profile != "default" {
            security_opt.push(format!("seccomp={}", config.seccomp_profile));
        }
        let tmpfs = config
            .read_only_rootfs
            .then(|| HashMap::from([("/tmp".to_owned(), READ_ONLY_TMP.to_owned())]));
        let network = if spec.egress.mode == svc_core::egress::EgressMode::None {
            // Loopback only.
            "none".to_owned()
        } else {
            spec.network
                .clone()
                .unwrap_or_else(|| config.network_mode.clone())
        };
        let mut cap_add = config.added_caps.clone();
        let mut tmpfs = tmpfs;
        let mut user = self.user().map(str::to_owned);
        if spec.multi_user {
            let agent_caps = if agent.is_some() {
                MULTI_USER_AGENT_CAPS
            } else {
                &[]
            };
            for cap in MULTI_USER_CAPS.iter().chain(agent_caps) {
                if !cap_add.iter().any(|c| c.eq_ignore_ascii_case(cap)) {
                    cap_add.push((*cap).to_owned());
                }
            }
            // The workspaces need a writable place even on a read-only root filesystem.
            if let Some(mounts) = tmpfs.as_mut() {
                mounts.insert("/workspace".to_owned(), "rw,exec,mode=0711".to_owned());
                mounts.insert("/var/lib/svc-pool".to_owned(), "rw,mode=0700".to_owned());
            }
            user = None;
        }
        let mut labels: HashMap<String, String> = spec.labels.clone().into_iter().collect();
        let (entrypoint, mounts) = match agent {
            Some((binary, dir)) => {
                labels.insert(agent::LABEL_EXEC_PATH.to_owned(), "agent".to_owned());
                labels.insert(agent::LABEL_AGENT_DIR.to_owned(), dir.display().to_string());
                let (entrypoint, mounts) = agent::container_parts(binary, dir);
                (entrypoint, Some(mounts))
            }
            None => (
                vec!["/bin/sh".to_owned(), "-c".to_owned(), KEEPALIVE.to_owned()],
                None,
            ),
        };
        ContainerCreateBody {
            image: Some(spec.image.clone()),
            entrypoint: Some(entrypoint),
            cmd: Some(Vec::new()),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(labels),
            user,
            host_config: Some(HostConfig {
                memory: Some(i64::from(spec.memory_mb) * 1024 * 1024),
                // Swap equal to the memory: no swap beyond the limit (decisions §30), where the
                // engine's default would double it.
                memory_swap: Some(i64::from(spec.memory_mb) * 1024 * 1024),
                nano_cpus: Some(i64::from(spec.vcpus) * 1_000_000_000),
                pids_limit: Some(i64::from(config.pids_limit)),
                cap_drop: Some(config.dropped_caps.clone()),
                cap_add: Some(cap_add),
                security_opt: Some(security_opt),
                readonly_rootfs: Some(config.read_only_rootfs),
                tmpfs,
                runtime: (!config.runtime.is_empty()).then(|| config.runtime.clone()),
                network_mode: Some(network),
                mounts,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The socket directory of a sandbox about to be spawned on the agent path, or why it
    /// takes the engine path: the agent runs as the container's user, which must own it.
    async fn agent_dir(
        &self,
        docker: &Docker,
        spec: &SpawnSpec,
        binary: &agent::AgentBinary,
    ) -> Result<Result<std::path::PathBuf, String>, ProviderError> {
        let user = if spec.multi_user {
            String::new()
        } else if let Some(user) = self.user() {
            user.to_owned()
        } else {
            docker
                .inspect_image(&spec.image)
                .await
                .map_err(|e| engine_error("inspecting the image", e))?
                .config
                .and_then(|c| c.user)
                .unwrap_or_default()
        };
        match agent::numeric_owner(&user) {
            Ok(owner) => Ok(Ok(
                agent::make_dir(&binary.socket_root, &spec.id, owner).await?
            )),
            Err(reason) => Ok(Err(reason)),
        }
    }

    /// The ID (content digest) of `image`, pulled first when the engine lacks it (reporting
    /// the pull to `progress`).
    pub async fn image_id(
        &self,
        image: &str,
        progress: &ProgressSink,
    ) -> Result<String, ProviderError> {
        let docker = self.client().await?;
        self.ensure_image(&docker, image, progress).await?;
        let inspected = docker
            .inspect_image(image)
            .await
            .map_err(|e| engine_error("inspecting the image", e))?;
        inspected
            .id
            .ok_or_else(|| ProviderError::failed(format!("the engine reported no ID for {image}")))
    }

    /// Writes the filesystem of `image` to `out` as a tar archive, streamed: a container is
    /// created (never started), exported and removed. The engine must have the image already
    /// ([`DockerProvider::image_id`] pulls it).
    pub async fn export_image(&self, image: &str, out: &Path) -> Result<(), ProviderError> {
        use tokio::io::AsyncWriteExt;
        let docker = self.client().await?;
        // A name no other export uses, not a time anyone reads.
        #[allow(clippy::disallowed_methods)]
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("svc-export-{}-{nanos:x}", std::process::id());
        let options = CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            // Never run; a command is given so images without one can be created.
            cmd: Some(vec!["/svc-export".to_owned()]),
            ..Default::default()
        };
        docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| engine_error("creating the export container", e))?;
        let exported = async {
            let mut file = tokio::fs::File::create(out).await?;
            let mut stream = docker.export_container(&name);
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| engine_error("exporting the image", e))?;
                file.write_all(&chunk).await?;
            }
            file.flush().await?;
            Ok::<(), ProviderError>(())
        }
        .await;
        let removed = self.remove(&name).await;
        exported.and(removed)
    }

    /// Whether the engine reports the container paused.
    async fn is_paused(&self, name: &str) -> Result<bool, ProviderError> {
        let inspect = self
            .client()
            .await?
            .inspect_container(name, None)
            .await
            .map_err(|e| container_error(name, "inspecting the container", e))?;
        Ok(inspect.state.and_then(|s| s.paused) == Some(true))
    }

    /// The container's address reachable from this host: its IP on its (first) network, or
    /// loopback for a container on the host's network.
    async fn address(&self, id: &SandboxId) -> Result<std::net::IpAddr, ProviderError> {
        let name = container_name(id);
        let cached = self
            .addresses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&name)
            .copied();
        if let Some(address) = cached {
            return Ok(address);
        }
        let inspect = self
            .client()
            .await?
            .inspect_container(&name, None)
            .await
            .map_err(|e| container_error(id.as_str(), "inspecting the container", e))?;
        let host_network = inspect
            .host_config
            .and_then(|h| h.network_mode)
            .is_some_and(|mode| mode == "host");
        let address = if host_network {
            std::net::IpAddr::from([127, 0, 0, 1])
        } else {
            inspect
                .network_settings
                .and_then(|n| n.networks)
                .into_iter()
                .flat_map(|networks| networks.into_values())
                .filter_map(|network| network.ip_address)
                .find_map(|ip| ip.parse().ok())
                .ok_or_else(|| ProviderError::Unreachable {
                    message: format!("sandbox {id} has no network address (network none?)"),
                })?
        };
        self.addresses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name, address);
        Ok(address)
    }

    async fn remove(&self, name: &str) -> Result<(), ProviderError> {
        let docker = self.client().await?;
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match docker.remove_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            Err(err) if status_of(&err) == Some(404) => Ok(()),
            // Already being removed by a concurrent call.
            Err(err) if status_of(&err) == Some(409) => Ok(()),
            Err(err) => Err(engine_error("removing the container", err)),
        }
    }

    /// An allowlist's set-up before the container exists: the egress proxy listening on the
    /// gateway of the container's network, and the container told to use it (environment)
    /// and labelled with its egress (so a restarted svc still admits it).
    async fn prepare_allowlist(
        &self,
        docker: &Docker,
        spec: &SpawnSpec,
    ) -> Result<(SpawnSpec, std::net::IpAddr), ProviderError> {
        let network = spec
            .network
            .clone()
            .unwrap_or_else(|| self.config.network_mode.clone());
        if network == "host" || network == "none" {
            return Err(ProviderError::InvalidRequest {
                message: format!(
                    "egress allowlist needs a network of the container's own, not {network}"
                ),
            });
        }
        let configs = docker
            .inspect_network(
                &network,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
            .map_err(|e| engine_error(&format!("inspecting network {network}"), e))?
            .ipam
            .and_then(|ipam| ipam.config)
            .unwrap_or_default();
        let gateway = network_gateway(&configs).ok_or_else(|| {
            ProviderError::failed(format!("network {network} has no gateway address"))
        })?;
        self.egress_proxy
            .ensure_listening(gateway, egress_lookup(docker))
            .await?;
        let mut spec = spec.clone();
        let proxy = format!("http://{gateway}:{}", self.egress_proxy.port());
        for key in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            spec.env.insert(key.to_owned(), proxy.clone());
        }
        for key in ["NO_PROXY", "no_proxy"] {
            spec.env
                .insert(key.to_owned(), "localhost,127.0.0.1,::1".to_owned());
        }
        let label = serde_json::to_string(&spec.egress)
            .map_err(|e| ProviderError::caused("encoding the egress policy", e))?;
        spec.labels
            .insert(egress_proxy::LABEL_EGRESS.to_owned(), label);
        Ok((spec, gateway))
    }

    /// After a restart, the egress proxy listens again on the gateway of every network that
    /// allowlisted containers (`containers`, from the inventory) run on: their firewalls still
    /// send them there.
    async fn resume_egress_proxy(
        &self,
        docker: &Docker,
        containers: &[bollard::models::ContainerSummary],
    ) {
        let gateways: std::collections::BTreeSet<std::net::IpAddr> = containers
            .iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .is_some_and(|labels| labels.contains_key(egress_proxy::LABEL_EGRESS))
            })
            .filter_map(|c| c.network_settings.as_ref()?.networks.as_ref())
            .flat_map(|networks| networks.values())
            .filter_map(|endpoint| endpoint.gateway.as_deref()?.parse().ok())
            .collect();
        for gateway in gateways {
            if let Err(err) = self
                .egress_proxy
                .ensure_listening(gateway, egress_lookup(docker))
                .await
            {
                tracing::warn!(%gateway, error = %err, "the egress proxy cannot listen again");
            }
        }
    }

    async fn spawn_inner(&self, spec: &SpawnSpec, name: &str) -> Result<bool, ProviderError> {
        let docker = self.client().await?;
        check_network_exists(&docker, spec.network.as_deref()).await?;
        let pulled = self
            .ensure_image(&docker, &spec.image, &spec.progress)
            .await?;
        let allowlist = spec.egress.mode == svc_core::egress::EgressMode::Allowlist;
        let prepared;
        let (spec, gateway) = if allowlist {
            let (prepared_spec, gateway) = self.prepare_allowlist(&docker, spec).await?;
            prepared = prepared_spec;
            (&prepared, Some(gateway))
        } else {
            (spec, None)
        };
        let agent_dir = match &self.exec_path {
            agent::ExecPath::Agent(binary) => match self.agent_dir(&docker, spec, binary).await? {
                Ok(dir) => Some((binary, dir)),
                Err(reason) => {
                    tracing::warn!(sandbox_id = %spec.id, reason, "this sandbox takes the engine's exec path");
                    None
                }
            },
            agent::ExecPath::Engine { .. } => None,
        };
        let route = match &agent_dir {
            Some((_, dir)) => agent::Route::from_dir(dir.clone()),
            None => agent::Route::Engine,
        };
        let options = CreateContainerOptions {
            name: Some(name.to_owned()),
            ..Default::default()
        };
        let body = self.container_body(
            spec,
            agent_dir
                .as_ref()
                .map(|(binary, dir)| (*binary, dir.as_path())),
        );
        docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| engine_error("creating the container", e))?;
        if let Err(err) = docker.start_container(name, None).await {
            let message = err.to_string();
            // An image without a shell cannot run the keep-alive loop; the container stays
            // created, which the archive API (file read and write) works with.
            if agent_dir.is_none()
                && (message.contains("executable file not found")
                    || message.contains("no such file or directory"))
            {
                tracing::warn!(sandbox_id = %spec.id, image = %spec.image, "image has no /bin/sh; container left created, exec is unavailable");
                return Ok(pulled);
            }
            return Err(engine_error("starting the container", err));
        }
        if let agent::Route::Agent { client, .. } = &route {
            let init = docker
                .inspect_container(name, None)
                .await
                .map_err(|e| engine_error("inspecting the container", e))?
                .state
                .and_then(|s| s.pid);
            route.started(init.unwrap_or_default());
            agent::wait_ready(&docker, name, client, self.agent_deadline).await?;
        }
        self.routes.insert(&docker, name, &spec.id, route);
        if let Some(gateway) = gateway {
            let inspect = docker
                .inspect_container(name, None)
                .await
                .map_err(|e| engine_error("inspecting the container", e))?;
            let pid = inspect
                .state
                .and_then(|s| s.pid)
                .filter(|pid| *pid > 0)
                .ok_or_else(|| ProviderError::failed("the container has no process to firewall"))?;
            let proxy = std::net::SocketAddr::new(gateway, self.egress_proxy.port());
            egress::apply(pid, &spec.egress, proxy).await?;
            let address = inspect
                .network_settings
                .and_then(|n| n.networks)
                .into_iter()
                .flat_map(|networks| networks.into_values())
                .filter_map(|network| network.ip_address)
                .find_map(|ip| ip.parse().ok());
            if let Some(address) = address {
                self.egress_proxy
                    .register(name, address, spec.egress.clone());
            }
        }
        Ok(pulled)
    }
}

#[async_trait]
impl Provider for DockerProvider {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn capabilities(&self) -> &'static [Capability] {
        CAPABILITIES
    }

    fn min_memory_mb(&self) -> u32 {
        // The engine refuses a memory limit below 6 MB.
        6
    }

    fn default_network(&self) -> String {
        self.config.network_mode.clone()
    }

    fn config_summary(&self) -> serde_json::Map<String, serde_json::Value> {
        let c = &self.config;
        let mut map = serde_json::Map::new();
        map.insert("endpoint".into(), self.endpoint.clone().into());
        map.insert("runtime".into(), c.runtime.clone().into());
        map.insert("network_mode".into(), c.network_mode.clone().into());
        map.insert("read_only_rootfs".into(), c.read_only_rootfs.into());
        map.insert("seccomp_profile".into(), c.seccomp_profile.clone().into());
        map.insert("dropped_caps".into(), c.dropped_caps.clone().into());
        map.insert("added_caps".into(), c.added_caps.clone().into());
        map.insert("pids_limit".into(), c.pids_limit.into());
        map.insert("user".into(), c.user.clone().into());
        map.insert("no_new_privileges".into(), true.into());
        map.insert("agent".into(), c.agent.as_str().into());
        map.insert("exec_path".into(), self.exec_path.name().into());
        match &self.exec_path {
            agent::ExecPath::Agent(binary) => {
                map.insert(
                    "agent_path".into(),
                    binary.path.display().to_string().into(),
                );
                map.insert(
                    "agent_socket_dir".into(),
                    binary.socket_root.display().to_string().into(),
                );
            }
            agent::ExecPath::Engine { reason } => {
                map.insert("exec_path_reason".into(), reason.clone().into());
            }
        }
        map
    }

    fn take_failures(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<crate::RuntimeFailure>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    async fn health(&self) -> Result<(), ProviderError> {
        self.client()
            .await?
            .ping()
            .await
            .map(drop)
            .map_err(|e| match engine_error("ping", e) {
                failed @ (ProviderError::Engine { .. } | ProviderError::Failed { .. }) => {
                    ProviderError::Unavailable {
                        message: failed.to_string(),
                        source: Some(std::sync::Arc::new(failed)),
                    }
                }
                other => other,
            })
    }

    async fn spawn(&self, spec: &SpawnSpec) -> Result<RuntimeInfo, ProviderError> {
        let name = container_name(&spec.id);
        match self.spawn_inner(spec, &name).await {
            Ok(pulled) => Ok(RuntimeInfo::started(spec, pulled)),
            Err(err) => {
                // Leaves nothing behind: no half-created container, no socket directory.
                self.routes.forget(&name);
                if let Err(cleanup) = self.remove(&name).await {
                    tracing::error!(sandbox_id = %spec.id, error = %cleanup, "removing a failed container failed");
                }
                if let agent::ExecPath::Agent(binary) = &self.exec_path {
                    agent::remove_dir(binary.socket_root.join(spec.id.as_str())).await;
                }
                Err(err)
            }
        }
    }

    async fn connect(&self, id: &SandboxId, port: u16) -> Result<crate::PortStream, ProviderError> {
        let address = self.address(id).await?;
        crate::connect_tcp(std::net::SocketAddr::new(address, port), port).await
    }

    async fn claim(&self, warm: &SandboxId, id: &SandboxId) -> Result<(), ProviderError> {
        let options = RenameContainerOptions {
            name: container_name(id),
        };
        let docker = self.client().await?;
        let route = self.route(warm).await?;
        docker
            .rename_container(&container_name(warm), options)
            .await
            .map_err(|e| container_error(warm.as_str(), "renaming the warm container", e))?;
        self.gates.forget(&container_name(warm));
        self.routes.forget(&container_name(warm));
        self.routes.insert(&docker, &container_name(id), id, route);
        Ok(())
    }

    async fn destroy(&self, id: &SandboxId) -> Result<(), ProviderError> {
        let name = container_name(id);
        // Forgotten first: its agent's going is no failure.
        let route = match self.routes.forget(&name) {
            Some(route) => Some(route),
            None => self.route_from_engine(id).await.ok().flatten(),
        };
        self.remove(&name).await?;
        if let Some(agent::Route::Agent { dir, .. }) = route {
            agent::remove_dir(dir).await;
        }
        self.gates.forget(&name);
        self.egress_proxy.forget(&name);
        self.addresses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&name);
        Ok(())
    }

    async fn status(&self, id: &SandboxId) -> Result<RuntimeStatus, ProviderError> {
        match self
            .client()
            .await?
            .inspect_container(&container_name(id), None)
            .await
        {
            Ok(inspect) => Ok(if inspect.state.and_then(|s| s.running) == Some(true) {
                RuntimeStatus::Running
            } else {
                RuntimeStatus::Stopped
            }),
            Err(err) if status_of(&err) == Some(404) => Ok(RuntimeStatus::Missing),
            Err(err) => Err(engine_error("inspecting the container", err)),
        }
    }

    async fn pause(&self, id: &SandboxId) -> Result<(), ProviderError> {
        let name = container_name(id);
        let docker = self.client().await?;
        let gate = self.gates.of(&name);
        let mut paused = gate.change().await;
        // Only the engine's execs can be caught half-started.
        if !matches!(self.route(id).await?, agent::Route::Agent { .. }) {
            gate.settle_execs(&docker).await?;
        }
        // runc's freezer gives up on a busy container now and then (cgroup v1); asked again,
        // it gets there.
        let mut result = docker.pause_container(&name).await;
        for attempt in 1..=PAUSE_ATTEMPTS {
            match &result {
                Err(err) if errors::freezer_gave_up(err) && attempt < PAUSE_ATTEMPTS => {
                    tracing::debug!(container = %name, attempt, "the freezer gave up; pausing again");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                    result = docker.pause_container(&name).await;
                }
                _ => break,
            }
        }
        match result {
            Ok(()) => {
                *paused = true;
                Ok(())
            }
            // Idempotent: the engine answers 409 for a container that is already paused.
            Err(err) if status_of(&err) == Some(409) && self.is_paused(&name).await? => {
                *paused = true;
                Ok(())
            }
            Err(err) => Err(container_error(id.as_str(), "pausing the container", err)),
        }
    }

    async fn resume(&self, id: &SandboxId) -> Result<(), ProviderError> {
        let name = container_name(id);
        let gate = self.gates.of(&name);
        let mut paused = gate.change().await;
        let docker = self.client().await?;
        // Just after a pause the runtime may not yet count the container as paused while the
        // engine does; asked again, they agree.
        let mut result = docker.unpause_container(&name).await;
        for attempt in 1..=RESUME_ATTEMPTS {
            match &result {
                Err(err) if errors::runtime_not_yet_paused(err) && attempt < RESUME_ATTEMPTS => {
                    // The engine's own state decides: a container it does not hold paused
                    // runs already (a resume of a running sandbox is no error).
                    if !self.is_paused(&name).await? {
                        break;
                    }
                    tracing::debug!(container = %name, attempt, "the runtime is not yet paused; resuming again");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                    result = docker.unpause_container(&name).await;
                }
                _ => break,
            }
        }
        match result {
            Ok(()) => {
                *paused = false;
                Ok(())
            }
            // Idempotent: engines answer 409 (newer) or 500 "is not paused" (20.10) for a
            // container that runs.
            Err(err)
                if (status_of(&err) == Some(409) || errors::runtime_not_yet_paused(&err))
                    && !self.is_paused(&name).await? =>
            {
                *paused = false;
                Ok(())
            }
            Err(err) => Err(container_error(id.as_str(), "resuming the container", err)),
        }
    }

    async fn stats(&self, id: &SandboxId) -> Result<SandboxStats, ProviderError> {
        stats::sample(&self.client().await?, &container_name(id), id.as_str()).await
    }

    async fn inventory(&self) -> Result<Vec<RuntimeInfo>, ProviderError> {
        let filters = HashMap::from([("label".to_owned(), vec![format!("{LABEL_MANAGED}=true")])]);
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let docker = self.client().await?;
        let containers = docker
            .list_containers(Some(options))
            .await
            .map_err(|e| engine_error("listing containers", e))?;
        self.resume_egress_proxy(&docker, &containers).await;
        self.resume_agents(&docker, &containers).await;
        let mut runtimes: Vec<RuntimeInfo> = containers
            .into_iter()
            .filter_map(|c| {
                let labels: BTreeMap<String, String> =
                    c.labels.unwrap_or_default().into_iter().collect();
                let id = container_sandbox(c.names.as_deref(), &labels)?;
                Some(RuntimeInfo {
                    sandbox_id: id,
                    image: c.image.unwrap_or_default(),
                    // A paused container still holds its sandbox (decisions §7).
                    running: c
                        .state
                        .is_some_and(|s| matches!(s.to_string().as_str(), "running" | "paused")),
                    labels,
                    image_pulled: false,
                })
            })
            .collect();
        runtimes.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        Ok(runtimes)
    }

    async fn logs(&self, id: &SandboxId, lines: usize) -> Result<Vec<String>, ProviderError> {
        if lines == 0 {
            self.status(id).await.and_then(|s| match s {
                RuntimeStatus::Missing => {
                    Err(ProviderError::RuntimeNotFound { id: id.to_string() })
                }
                _ => Ok(()),
            })?;
            return Ok(Vec::new());
        }
        if let agent::Route::Agent { client, .. } = self.route(id).await? {
            self.gates.of(&container_name(id)).unpaused().await?;
            return client.logs(lines).await;
        }
        let docker = self.client().await?;
        logs_tail(&docker, &container_name(id), lines)
            .await
            .map_err(|e| container_error(id.as_str(), "reading logs", e))
    }

    fn runs_exec_as_user(&self) -> bool {
        true
    }

    async fn exec_path(&self, id: &SandboxId) -> Option<String> {
        self.route(id)
            .await
            .ok()
            .map(|route| route.exec_path().to_owned())
    }

    async fn exec(&self, id: &SandboxId, spec: ExecSpec) -> Result<ExecSession, ProviderError> {
        let container = container_name(id);
        if let agent::Route::Agent { client, .. } = self.route(id).await? {
            let gate = self.gates.of(&container);
            let _starting = gate.exec_start().await?;
            return client.exec(spec).await;
        }
        if let Some(path) = &spec.workdir {
            // The engine would start the command and fail inside; refuse clearly instead.
            match files::stat(&self.client().await?, &container, path).await {
                Ok(info) if info.is_dir => {}
                Ok(_) => {
                    return Err(ProviderError::InvalidRequest {
                        message: format!("workdir {path} is not a directory"),
                    })
                }
                Err(ProviderError::FileNotFound { .. }) => {
                    self.require_container(id).await?;
                    return Err(ProviderError::InvalidRequest {
                        message: format!("workdir {path} does not exist"),
                    });
                }
                Err(err) => return Err(err),
            }
        }
        let gate = self.gates.of(&container);
        let _starting = gate.exec_start().await?;
        exec::start(
            &self.client().await?,
            &container,
            id.as_str(),
            self.user(),
            &spec,
            &gate,
        )
        .await
    }

    async fn exec_state(
        &self,
        id: &SandboxId,
        handle: &str,
    ) -> Result<(ExecState, Option<std::sync::Arc<dyn ExecControl>>), ProviderError> {
        match self.route(id).await {
            Ok(agent::Route::Agent { client, .. }) => {
                self.gates.of(&container_name(id)).unpaused().await?;
                client.exec_state(handle).await
            }
            Ok(agent::Route::Engine) => exec::reattach(&self.client().await?, handle).await,
            Err(ProviderError::RuntimeNotFound { .. }) => Ok((ExecState::Gone, None)),
            Err(err) => Err(err),
        }
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        mode: u32,
        content: Upload,
    ) -> Result<(), ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.write_file(path, mode, content.stream).await;
        }
        self.require_container(id).await?;
        files::write(
            &self.client().await?,
            &container_name(id),
            path,
            mode,
            content,
            &self.shell(id),
        )
        .await
    }

    async fn read_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.read_archive(dir).await;
        }
        self.require_container(id).await?;
        files::read_archive(&self.client().await?, &container_name(id), dir).await
    }

    async fn write_archive(
        &self,
        id: &SandboxId,
        dir: &SandboxPath,
        archive: ByteStream,
    ) -> Result<(), ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.write_archive(dir, archive).await;
        }
        self.require_container(id).await?;
        files::write_archive(&self.client().await?, &container_name(id), dir, archive).await
    }

    async fn read_file(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.read_file(path).await;
        }
        self.require_container(id).await?;
        files::read(&self.client().await?, &container_name(id), path).await
    }

    async fn delete_file(
        &self,
        id: &SandboxId,
        path: &NonRootPath,
        recursive: bool,
    ) -> Result<(), ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.delete_file(path, recursive).await;
        }
        self.shell(id).delete(path, recursive).await
    }

    async fn list_dir(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
    ) -> Result<Vec<FileInfo>, ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.list_dir(path).await;
        }
        self.shell(id).list(path).await
    }

    async fn move_path(
        &self,
        id: &SandboxId,
        from: &NonRootPath,
        to: &NonRootPath,
    ) -> Result<(), ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.move_path(from, to).await;
        }
        self.shell(id).rename(from, to).await
    }

    async fn chmod(
        &self,
        id: &SandboxId,
        path: &SandboxPath,
        mode: u32,
    ) -> Result<(), ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.chmod(path, mode).await;
        }
        self.shell(id).chmod(path, mode).await
    }

    async fn stat(&self, id: &SandboxId, path: &SandboxPath) -> Result<FileInfo, ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.stat(path).await;
        }
        self.require_container(id).await?;
        files::stat(&self.client().await?, &container_name(id), path).await
    }

    async fn glob(
        &self,
        id: &SandboxId,
        pattern: &SandboxGlob,
    ) -> Result<Vec<String>, ProviderError> {
        if let Some(client) = self.agent_client(id).await? {
            return client.glob(pattern).await;
        }
        self.shell(id).glob(pattern).await
    }
}

impl DockerProvider {
    /// How svc reaches the sandbox's container: as recorded at its spawn, read from the
    /// container's labels once after a restart.
    async fn route(&self, id: &SandboxId) -> Result<agent::Route, ProviderError> {
        let name = container_name(id);
        if let Some(route) = self.routes.get(&name) {
            return Ok(route);
        }
        let route = self
            .route_from_engine(id)
            .await?
            .ok_or_else(|| ProviderError::RuntimeNotFound { id: id.to_string() })?;
        self.routes
            .insert(&self.client().await?, &name, id, route.clone());
        Ok(route)
    }

    /// The route the container's labels describe; `None` when there is no container.
    async fn route_from_engine(
        &self,
        id: &SandboxId,
    ) -> Result<Option<agent::Route>, ProviderError> {
        match self
            .client()
            .await?
            .inspect_container(&container_name(id), None)
            .await
        {
            Ok(inspect) => Ok(Some(agent::Route::from_labels(
                &inspect.config.and_then(|c| c.labels).unwrap_or_default(),
                inspect.state.and_then(|s| s.pid),
            ))),
            Err(err) if status_of(&err) == Some(404) => Ok(None),
            Err(err) => Err(engine_error("inspecting the container", err)),
        }
    }

    /// The agent of an agent-run sandbox, for a file operation: refused while the sandbox is
    /// paused (its frozen agent would never answer). `None` on the engine path.
    async fn agent_client(
        &self,
        id: &SandboxId,
    ) -> Result<Option<crate::agent::AgentClient>, ProviderError> {
        match self.route(id).await? {
            agent::Route::Agent { client, .. } => {
                self.gates.of(&container_name(id)).unpaused().await?;
                Ok(Some(client))
            }
            agent::Route::Engine => Ok(None),
        }
    }

    /// After a restart: watches the agents of running containers again, and removes the
    /// socket directories no container has.
    async fn resume_agents(
        &self,
        docker: &Docker,
        containers: &[bollard::models::ContainerSummary],
    ) {
        let mut in_use = Vec::new();
        for container in containers {
            let Some(labels) = &container.labels else {
                continue;
            };
            let route = agent::Route::from_labels(labels, None);
            let agent::Route::Agent { dir, .. } = &route else {
                continue;
            };
            in_use.push(dir.clone());
            let running = container
                .state
                .is_some_and(|s| matches!(s.to_string().as_str(), "running" | "paused"));
            let labels: BTreeMap<String, String> =
                labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let Some(id) = container_sandbox(container.names.as_deref(), &labels) else {
                continue;
            };
            let name = container_name(&id);
            if running && !self.routes.knows(&name) {
                // Its agent is checked against its init's PID, which the listing lacks.
                if let Ok(Some(route)) = self.route_from_engine(&id).await {
                    self.routes.insert(docker, &name, &id, route);
                }
            }
        }
        let mut roots = vec![self.config.agent_socket_root()];
        if let agent::ExecPath::Agent(binary) = &self.exec_path {
            roots.push(binary.socket_root.clone());
        }
        roots.dedup();
        for root in roots {
            agent::remove_orphans(root, in_use.clone()).await;
        }
    }

    /// File operations by shell script, as root.
    fn shell<'a>(&'a self, id: &'a SandboxId) -> crate::shell_files::ShellFiles<'a> {
        crate::shell_files::ShellFiles::new(
            self,
            id,
            Some(crate::ExecUser {
                uid: 0,
                gid: 0,
                home: SandboxPath::root(),
            }),
        )
    }

    /// The archive API answers 404 for a missing container and a missing path alike; this
    /// tells them apart.
    async fn require_container(&self, id: &SandboxId) -> Result<(), ProviderError> {
        match self.status(id).await? {
            RuntimeStatus::Missing => Err(ProviderError::RuntimeNotFound { id: id.to_string() }),
            _ => Ok(()),
        }
    }
}

/// The last `lines` lines of a container's log (the engine's logs API).
async fn logs_tail(
    docker: &Docker,
    container: &str,
    lines: usize,
) -> Result<Vec<String>, bollard::errors::Error> {
    let options = LogsOptions {
        stdout: true,
        stderr: true,
        tail: lines.to_string(),
        ..Default::default()
    };
    let mut stream = docker.logs(container, Some(options));
    let mut text = Vec::new();
    while let Some(item) = stream.next().await {
        text.extend_from_slice(&item?.into_bytes());
    }
    Ok(crate::process::last_lines(
        &String::from_utf8_lossy(&text),
        lines,
    ))
}

/// How the egress proxy learns a connection's allowlist when it has not registered its address:
/// from the container's label (after a restart).
fn egress_lookup(docker: &Docker) -> egress_proxy::Lookup {
    let docker = docker.clone();
    std::sync::Arc::new(move |address| {
        let docker = docker.clone();
        Box::pin(async move { egress_of_address(&docker, address).await })
    })
}

/// The egress of the svc container at `address`, from its label (after a restart).
async fn egress_of_address(
    docker: &Docker,
    address: std::net::IpAddr,
) -> Option<svc_core::egress::Egress> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![egress_proxy::LABEL_EGRESS.to_owned()],
    )]);
    let options = ListContainersOptions {
        filters: Some(filters),
        ..Default::default()
    };
    let containers = docker.list_containers(Some(options)).await.ok()?;
    containers.into_iter().find_map(|container| {
        let at_address = container
            .network_settings
            .and_then(|n| n.networks)
            .into_iter()
            .flat_map(|networks| networks.into_values())
            .filter_map(|network| network.ip_address)
            .any(|ip| ip.parse::<std::net::IpAddr>().ok() == Some(address));
        if !at_address {
            return None;
        }
        serde_json::from_str(container.labels?.get(egress_proxy::LABEL_EGRESS)?).ok()
    })
}

/// A named network the engine does not have is the caller's mistake (400 naming `network`),
/// found before anything is created; the engine's own modes need no look.
async fn check_network_exists(docker: &Docker, network: Option<&str>) -> Result<(), ProviderError> {
    let Some(network) = network else {
        return Ok(());
    };
    if matches!(network, "bridge" | "host" | "none" | "default")
        || network.starts_with("container:")
    {
        return Ok(());
    }
    match docker
        .inspect_network(
            network,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if status_of(&err) == Some(404) => Err(ProviderError::InvalidField {
            field: "network",
            message: format!("network {network:?} does not exist on the Docker engine"),
        }),
        Err(err) => Err(engine_error(&format!("inspecting network {network}"), err)),
    }
}
