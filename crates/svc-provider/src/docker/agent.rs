//! The Docker fast path (decisions §14): `svc-agent` as every container's init. The static
//! binary is bind-mounted read-only, and a per-sandbox socket directory (mode 0700, under
//! `providers.docker.agent_socket_dir`) is bind-mounted from the host; exec, files and logs then
//! take a Unix-socket round trip instead of the engine's exec and archive APIs.
//!
//! Which path a sandbox takes is decided at its spawn and written on its container (labels), so a
//! restarted svc routes it the same way: [`Routes`] caches that per container.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bollard::models::{Mount, MountType};
use bollard::Docker;
use svc_core::config::{DockerAgentMode, DockerProviderConfig};
use svc_core::SandboxId;
use tokio::sync::mpsc;

use crate::agent::AgentClient;
use crate::{ProviderError, RuntimeFailure};

/// Label: `agent` or `engine`, how the container's commands and files are reached.
pub(super) const LABEL_EXEC_PATH: &str = "dev.svc.exec_path";
/// Label: the host directory holding the container's agent socket.
pub(super) const LABEL_AGENT_DIR: &str = "dev.svc.agent_dir";
/// Where the container sees the agent binary.
const AGENT_IN_CONTAINER: &str = "/.svc/svc-agent";
/// Where the container sees its socket directory.
const RUN_IN_CONTAINER: &str = "/.svc/run";
/// The socket's name in that directory.
const SOCKET_NAME: &str = "agent.sock";
/// How long a started container's agent has to answer unless told (the spawn deadline): far
/// beyond the few milliseconds it takes.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The directory under the socket root that holds the agent this svc carries; not a sandbox ID,
/// so orphan collection passes it by.
const CARRIED_DIR: &str = "bin";
/// A socket directory with no container is left this long: its container may be being made.
const ORPHAN_AGE: Duration = Duration::from_secs(300);

/// The agent this provider puts in its containers.
#[derive(Debug, Clone)]
pub(super) struct AgentBinary {
    /// Its path on this host.
    pub path: PathBuf,
    /// The directory of every sandbox's socket directory.
    pub socket_root: PathBuf,
}

/// What new sandboxes get: the agent, or the engine and why.
#[derive(Debug, Clone)]
pub(super) enum ExecPath {
    Agent(AgentBinary),
    Engine { reason: String },
}

impl ExecPath {
    pub(super) fn name(&self) -> &'static str {
        match self {
            ExecPath::Agent(_) => "agent",
            ExecPath::Engine { .. } => "engine",
        }
    }
}

/// Decides the exec path from the configuration: the agent when it is wanted, found, fit for
/// this engine and of this protocol. `always` turns any reason against it into an error naming
/// `providers.docker.agent_path`.
pub(super) async fn choose(
    config: &DockerProviderConfig,
    endpoint: &str,
) -> Result<ExecPath, ProviderError> {
    if config.agent == DockerAgentMode::Never {
        return Ok(ExecPath::Engine {
            reason: "providers.docker.agent is never".to_owned(),
        });
    }
    match usable_agent(config, endpoint).await {
        Ok(binary) => Ok(ExecPath::Agent(binary)),
        Err(reason) if config.agent == DockerAgentMode::Always => {
            Err(ProviderError::failed(format!(
                "providers.docker.agent is always, but no agent can be used \
                 (providers.docker.agent_path): {reason}"
            )))
        }
        Err(reason) => Ok(ExecPath::Engine { reason }),
    }
}

async fn usable_agent(
    config: &DockerProviderConfig,
    endpoint: &str,
) -> Result<AgentBinary, String> {
    if !endpoint.starts_with("unix://") {
        return Err(format!(
            "the engine at {endpoint} is not on this host, so it cannot share a socket with svc"
        ));
    }
    if !matches!(config.runtime.as_str(), "" | "runc" | "crun") {
        return Err(format!(
            "runtime {} cannot share a host Unix socket with its containers",
            config.runtime
        ));
    }
    let socket_root = config.agent_socket_root();
    let path = if config.agent_path.as_os_str().is_empty() {
        // A static agent beside the binary (an operator's own build) comes first; then the
        // one this binary carries (release builds), written once under the socket root.
        let beside = std::env::current_exe()
            .map_err(|e| format!("cannot locate the svc binary: {e}"))?
            .with_file_name("svc-agent");
        let beside_reason = if tokio::fs::try_exists(&beside).await.unwrap_or(false) {
            match checked(&beside).await {
                Ok(()) => {
                    return Ok(AgentBinary {
                        path: beside,
                        socket_root,
                    })
                }
                Err(reason) => reason,
            }
        } else {
            format!("there is no {}", beside.display())
        };
        let dir = socket_root.join(CARRIED_DIR);
        let (root, written) = (socket_root.clone(), dir.clone());
        let install = move || {
            use std::os::unix::fs::DirBuilderExt;
            // The root as make_dir makes it, before install makes its own directory 0700.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(&root)?;
            svc_agent_embedded::install(&written)
        };
        match tokio::task::spawn_blocking(install)
            .await
            .map_err(|e| e.to_string())?
        {
            Ok(Some(path)) => path,
            Ok(None) => {
                return Err(format!(
                    "{beside_reason}, and this svc carries no agent (a debug build, or its build \
                     could not make one)"
                ))
            }
            Err(e) => {
                return Err(format!(
                "{beside_reason}, and the agent this svc carries cannot be written into {}: {e}",
                dir.display()
            ))
            }
        }
    } else {
        config.agent_path.clone()
    };
    checked(&path).await?;
    Ok(AgentBinary { path, socket_root })
}

/// Checks that the agent at `path` speaks this svc's protocol and is a static executable for
/// this machine.
async fn checked(path: &Path) -> Result<(), String> {
    let version = tokio::process::Command::new(path)
        .arg("--version")
        .kill_on_drop(true)
        .output();
    let version = tokio::time::timeout(Duration::from_secs(10), version)
        .await
        .map_err(|_| format!("{} --version did not answer within 10s", path.display()))?
        .map_err(|e| format!("running {} --version: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&version.stdout);
    let protocol = text
        .split("(protocol ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.trim().parse::<u32>().ok())
        .ok_or_else(|| {
            format!(
                "{} --version does not name its protocol: {}",
                path.display(),
                text.trim()
            )
        })?;
    if protocol != svc_agent_proto::VERSION {
        return Err(format!(
            "the agent at {} speaks protocol {protocol}, svc speaks {}",
            path.display(),
            svc_agent_proto::VERSION
        ));
    }
    let checked = path.to_owned();
    tokio::task::spawn_blocking(move || static_executable(&checked))
        .await
        .map_err(|e| e.to_string())?
}

/// Checks that `path` is an ELF executable for this machine that needs no loader: an image
/// may have no C library at all, or another one.
fn static_executable(path: &Path) -> Result<(), String> {
    use std::io::{Read, Seek, SeekFrom};
    let shown = path.display();
    let mut file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let not_elf = || format!("{shown} is not a 64-bit little-endian ELF executable");
    let mut header = [0u8; 64];
    file.read_exact(&mut header).map_err(|_| not_elf())?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Err(not_elf());
    }
    let machine = u16::from_le_bytes([header[18], header[19]]);
    let wanted = match std::env::consts::ARCH {
        "x86_64" => 62,
        "aarch64" => 183,
        other => return Err(format!("no agent for this machine's architecture {other}")),
    };
    if machine != wanted {
        return Err(format!(
            "{shown} is built for another architecture (ELF machine {machine})"
        ));
    }
    let offset = u64::from_le_bytes(header[32..40].try_into().unwrap_or_default());
    let entry_size = u64::from(u16::from_le_bytes([header[54], header[55]]));
    let entries = u64::from(u16::from_le_bytes([header[56], header[57]]));
    const PT_INTERP: u32 = 3;
    for index in 0..entries {
        let mut kind = [0u8; 4];
        file.seek(SeekFrom::Start(offset + index * entry_size))
            .and_then(|_| file.read_exact(&mut kind))
            .map_err(|e| format!("{shown}: reading its program headers: {e}"))?;
        if u32::from_le_bytes(kind) == PT_INTERP {
            return Err(format!(
                "{shown} is dynamically linked; containers need the static agent \
                 (scripts/microvm-assets.sh builds one)"
            ));
        }
    }
    Ok(())
}

/// Connects to a container's agent socket and checks that the peer is that container's agent:
/// a child of the container's init, by its host PID. The socket's directory belongs to the
/// container, which could put a symlink there to any socket on the host (another sandbox's
/// agent, the engine's); the host follows it when it connects, so where it arrived is checked.
pub(super) struct ContainerConnector {
    path: PathBuf,
    /// The host PID of the container's init, once it runs.
    init: std::sync::OnceLock<i32>,
    /// The peer last found to be the agent (0: none yet), so each connection after the first
    /// costs one comparison.
    verified: std::sync::atomic::AtomicI32,
}

#[async_trait::async_trait]
impl crate::agent::Connector for ContainerConnector {
    async fn connect(&self) -> Result<crate::agent::AgentStream, ProviderError> {
        use std::sync::atomic::Ordering;
        let stream = tokio::net::UnixStream::connect(&self.path)
            .await
            .map_err(|e| {
                ProviderError::unavailable(format!("the sandbox's agent is unreachable: {e}"))
            })?;
        let peer = stream.peer_cred().ok().and_then(|cred| cred.pid());
        let Some(peer) = peer.filter(|pid| *pid > 0) else {
            return Err(ProviderError::failed(
                "the sandbox's agent socket has no peer process",
            ));
        };
        if self.verified.load(Ordering::Relaxed) != peer {
            let init =
                self.init.get().copied().ok_or_else(|| {
                    ProviderError::failed("the sandbox's container has not started")
                })?;
            if parent_of(peer) != Some(init) {
                tracing::warn!(socket = %self.path.display(), peer, init, "a sandbox's agent socket leads to a process outside its container; refused");
                return Err(ProviderError::failed(
                    "the sandbox's agent socket does not lead to its agent",
                ));
            }
            self.verified.store(peer, Ordering::Relaxed);
        }
        Ok(Box::new(stream))
    }
}

/// The parent PID of host process `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// How svc reaches one container's commands and files.
#[derive(Clone)]
pub(super) enum Route {
    /// Its agent, and the host directory of its socket.
    Agent {
        client: AgentClient,
        dir: PathBuf,
        connector: Arc<ContainerConnector>,
    },
    /// The engine's exec and archive APIs.
    Engine,
}

impl Route {
    /// The route a container's labels describe; `init` is the host PID of its main process
    /// (0 or absent when it is not running).
    pub(super) fn from_labels(labels: &HashMap<String, String>, init: Option<i64>) -> Route {
        match (
            labels.get(LABEL_EXEC_PATH).map(String::as_str),
            labels.get(LABEL_AGENT_DIR),
        ) {
            (Some("agent"), Some(dir)) => {
                let route = Route::from_dir(PathBuf::from(dir));
                if let Some(init) = init {
                    route.started(init);
                }
                route
            }
            _ => Route::Engine,
        }
    }

    /// The agent whose socket is in `dir`, in a container not started yet.
    pub(super) fn from_dir(dir: PathBuf) -> Route {
        let path = dir.join(SOCKET_NAME);
        let connector = Arc::new(ContainerConnector {
            path,
            init: std::sync::OnceLock::new(),
            verified: std::sync::atomic::AtomicI32::new(0),
        });
        Route::Agent {
            client: AgentClient::new(connector.clone()).detached(),
            dir,
            connector,
        }
    }

    /// The container runs, its init (the agent's supervisor) at host PID `init`.
    pub(super) fn started(&self, init: i64) {
        if let (Route::Agent { connector, .. }, Ok(init)) = (self, i32::try_from(init)) {
            if init > 0 {
                let _ = connector.init.set(init);
            }
        }
    }

    pub(super) fn exec_path(&self) -> &'static str {
        match self {
            Route::Agent { .. } => "agent",
            Route::Engine => "engine",
        }
    }
}

/// One container's route and the task watching its agent.
struct Entry {
    route: Route,
    watcher: Option<tokio::task::AbortHandle>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(watcher) = &self.watcher {
            watcher.abort();
        }
    }
}

/// Every container's route, by container name.
pub(super) struct Routes {
    by_container: Mutex<HashMap<String, Entry>>,
    failures: mpsc::UnboundedSender<RuntimeFailure>,
}

impl Routes {
    pub(super) fn new(failures: mpsc::UnboundedSender<RuntimeFailure>) -> Routes {
        Routes {
            by_container: Mutex::default(),
            failures,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.by_container
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn get(&self, container: &str) -> Option<Route> {
        self.map().get(container).map(|entry| entry.route.clone())
    }

    /// Records `container`'s route; an agent route is watched for the agent dying, which is
    /// reported as sandbox `id`'s runtime failing (the container is killed first, so it reads
    /// as stopped).
    pub(super) fn insert(&self, docker: &Docker, container: &str, id: &SandboxId, route: Route) {
        let watcher = match &route {
            Route::Agent { client, .. } => Some(
                tokio::spawn(watch(
                    client.clone(),
                    docker.clone(),
                    container.to_owned(),
                    id.clone(),
                    self.failures.clone(),
                ))
                .abort_handle(),
            ),
            Route::Engine => None,
        };
        self.map()
            .insert(container.to_owned(), Entry { route, watcher });
    }

    /// Forgets a container (removed, or renamed): its watcher stops.
    pub(super) fn forget(&self, container: &str) -> Option<Route> {
        self.map()
            .remove(container)
            .map(|entry| entry.route.clone())
    }

    pub(super) fn knows(&self, container: &str) -> bool {
        self.map().contains_key(container)
    }
}

/// Waits for the agent's connection to end without a request on it (the agent waits for the
/// first frame for as long as it lives, and a paused agent keeps it open), then reports it once
/// the agent answers nothing at all: a connection that failed for another reason (a full
/// backlog under a burst of connections) is only opened again.
async fn watch(
    client: AgentClient,
    docker: Docker,
    container: String,
    id: SandboxId,
    failures: mpsc::UnboundedSender<RuntimeFailure>,
) {
    loop {
        if let Ok(mut idle) = client.idle().await {
            let mut byte = [0u8; 1];
            let _ = tokio::io::AsyncReadExt::read(&mut idle, &mut byte).await;
        }
        if !answers(&client).await {
            return report(&docker, &container, id, failures).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether the agent answers `hello` in one of three tries. A dead agent's socket refuses at
/// once, so this takes well under a second then.
async fn answers(client: &AgentClient) -> bool {
    for _ in 0..3 {
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), client.hello()).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn report(
    docker: &Docker,
    container: &str,
    id: SandboxId,
    failures: mpsc::UnboundedSender<RuntimeFailure>,
) {
    tracing::warn!(sandbox_id = %id, container, "the sandbox's agent stopped answering; stopping its container");
    // An agent that died ends its container; one that is stuck is ended here.
    let _ = docker
        .kill_container(
            container,
            None::<bollard::query_parameters::KillContainerOptions>,
        )
        .await;
    let _ = failures.send(RuntimeFailure {
        sandbox_id: id,
        message: "the sandbox's agent stopped".to_owned(),
        provider_wide: false,
    });
}

/// The socket directory of a sandbox spawned as `id`, made empty and private (0700) and owned
/// by the container's user `owner` (uid, gid), which must make its socket there.
pub(super) async fn make_dir(
    root: &Path,
    id: &SandboxId,
    owner: Option<(u32, u32)>,
) -> Result<PathBuf, ProviderError> {
    let root = root.to_owned();
    let dir = root.join(id.as_str());
    let made = dir.clone();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&root)?;
        match std::fs::remove_dir_all(&made) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
        std::fs::DirBuilder::new().mode(0o700).create(&made)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&made, Some(uid), Some(gid))?;
        }
        Ok(())
    })
    .await
    .map_err(|e| ProviderError::caused("making the agent socket directory", e))?
    .map_err(|e| {
        ProviderError::io(
            format!(
                "making the agent socket directory {} (providers.docker.agent_socket_dir)",
                dir.display()
            ),
            e,
        )
    })?;
    Ok(dir)
}

/// Removes a socket directory; a missing one is fine.
pub(super) async fn remove_dir(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
}

/// Removes socket directories under `root` that no container in `in_use` has, once they are
/// older than a spawn could take.
pub(super) async fn remove_orphans(root: PathBuf, in_use: Vec<PathBuf>) {
    let _ = tokio::task::spawn_blocking(move || {
        let Ok(entries) = std::fs::read_dir(&root) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if SandboxId::parse(name).is_err() || in_use.contains(&path) {
                continue;
            }
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| modified.elapsed().ok())
                .is_some_and(|age| age > ORPHAN_AGE);
            if old {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    })
    .await;
}

/// The entrypoint and mounts of a container whose init is the agent, its socket in `dir`.
pub(super) fn container_parts(binary: &AgentBinary, dir: &Path) -> (Vec<String>, Vec<Mount>) {
    let entrypoint = vec![
        AGENT_IN_CONTAINER.to_owned(),
        "--container".to_owned(),
        format!("{RUN_IN_CONTAINER}/{SOCKET_NAME}"),
    ];
    let mounts = vec![
        Mount {
            target: Some(AGENT_IN_CONTAINER.to_owned()),
            source: Some(binary.path.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        },
        Mount {
            target: Some(RUN_IN_CONTAINER.to_owned()),
            source: Some(dir.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(false),
            ..Default::default()
        },
    ];
    (entrypoint, mounts)
}

/// Waits for a started container's agent to answer `hello`. An agent of another protocol
/// fails at once; a container that stopped fails quoting its log's end.
pub(super) async fn wait_ready(
    docker: &Docker,
    container: &str,
    client: &AgentClient,
    timeout: Duration,
) -> Result<(), ProviderError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    let mut attempts = 0u32;
    loop {
        match client.hello().await {
            Ok(hello) if hello.version == svc_agent_proto::VERSION => return Ok(()),
            Ok(hello) => {
                return Err(ProviderError::failed(format!(
                    "the sandbox's agent speaks protocol {}, svc speaks {}",
                    hello.version,
                    svc_agent_proto::VERSION
                )))
            }
            Err(ProviderError::Unavailable { .. }) => {}
            Err(err) => return Err(err),
        }
        attempts += 1;
        if attempts.is_multiple_of(16) && !running(docker, container).await {
            return Err(ProviderError::failed(format!(
                "the container stopped before its agent answered: {}",
                super::logs_tail(docker, container, 5)
                    .await
                    .unwrap_or_default()
                    .join(" | ")
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ProviderError::failed(format!(
                "the sandbox's agent did not answer within {}",
                svc_core::GoDuration::from(timeout)
            )));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

async fn running(docker: &Docker, container: &str) -> bool {
    docker
        .inspect_container(container, None)
        .await
        .ok()
        .and_then(|inspect| inspect.state?.running)
        .unwrap_or(false)
}

/// The numeric owner of a container user given as `uid[:gid]` (`root` and empty are root);
/// `Err` for a user name, which only the image's `/etc/passwd` could resolve.
pub(super) fn numeric_owner(user: &str) -> Result<Option<(u32, u32)>, String> {
    let (uid, gid) = match user.split_once(':') {
        Some((uid, gid)) => (uid, Some(gid)),
        None => (user, None),
    };
    let uid = match uid {
        "" | "root" | "0" => 0,
        other => other
            .parse::<u32>()
            .map_err(|_| format!("container user {user} is a name, not a number"))?,
    };
    let gid = match gid {
        None => uid,
        Some("root" | "0") => 0,
        Some(other) => other
            .parse::<u32>()
            .map_err(|_| format!("container group in {user} is a name, not a number"))?,
    };
    Ok((uid != 0 || gid != 0).then_some((uid, gid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_exec_path_follows_the_mode_and_the_engine() {
        let mut config = DockerProviderConfig {
            agent: DockerAgentMode::Never,
            ..DockerProviderConfig::default()
        };
        let chosen = choose(&config, "unix:///var/run/docker.sock")
            .await
            .unwrap();
        assert!(
            matches!(&chosen, ExecPath::Engine { reason } if reason.contains("never")),
            "{chosen:?}"
        );
        config.agent = DockerAgentMode::Auto;
        let chosen = choose(&config, "tcp://10.0.0.2:2375").await.unwrap();
        assert!(
            matches!(&chosen, ExecPath::Engine { reason } if reason.contains("not on this host")),
            "{chosen:?}"
        );
        config.runtime = "runsc".to_owned();
        let chosen = choose(&config, "unix:///var/run/docker.sock")
            .await
            .unwrap();
        assert!(
            matches!(&chosen, ExecPath::Engine { reason } if reason.contains("runsc")),
            "{chosen:?}"
        );
        config.runtime = "runc".to_owned();
        if svc_agent_embedded::bytes().is_none() {
            // A test build carries no agent (release builds do), and none sits beside it.
            let chosen = choose(&config, "unix:///var/run/docker.sock")
                .await
                .unwrap();
            assert!(
                matches!(&chosen, ExecPath::Engine { reason } if reason.contains("carries no agent")),
                "{chosen:?}"
            );
        }
        config.agent_path = "/nonexistent/svc-agent".into();
        let chosen = choose(&config, "unix:///var/run/docker.sock")
            .await
            .unwrap();
        assert!(
            matches!(&chosen, ExecPath::Engine { reason } if reason.contains("/nonexistent/svc-agent")),
            "{chosen:?}"
        );
        config.agent = DockerAgentMode::Always;
        let err = choose(&config, "unix:///var/run/docker.sock")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("providers.docker.agent_path"), "{err}");
        assert!(err.contains("/nonexistent/svc-agent"), "{err}");
    }

    #[test]
    fn users_are_numeric_or_refused() {
        assert_eq!(numeric_owner(""), Ok(None));
        assert_eq!(numeric_owner("root"), Ok(None));
        assert_eq!(numeric_owner("0:0"), Ok(None));
        assert_eq!(numeric_owner("1000"), Ok(Some((1000, 1000))));
        assert_eq!(numeric_owner("1000:50"), Ok(Some((1000, 50))));
        assert!(numeric_owner("nobody").is_err());
        assert!(numeric_owner("1000:staff").is_err());
    }

    #[test]
    fn only_a_static_executable_of_this_machine_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert!(static_executable(&script)
            .unwrap_err()
            .contains("not a 64-bit"));
        // This test binary is dynamically linked.
        let me = std::env::current_exe().unwrap();
        assert!(static_executable(&me)
            .unwrap_err()
            .contains("dynamically linked"));
        assert!(static_executable(&dir.path().join("missing")).is_err());
    }
}
