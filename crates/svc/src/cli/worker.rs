//! `svc worker --control-plane URL --id ID (--token T | --bootstrap-admin-key K)`: a worker
//! process that reports to a control plane (decisions §11). It heartbeats every
//! `worker.heartbeat_interval` with the providers its configuration enables, advertising an
//! `https://` URL when `worker.rpc_tls.enabled`. With a bootstrap admin key it mints its own
//! signed token at `/admin/worker-tokens` and mints a new one when a third of the old one's
//! lifetime is left, so it never holds the signing key. On SIGINT or SIGTERM it reports itself
//! `offline` and exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use svc_core::config::Config;
use svc_core::worker::{WorkerCapacity, WorkerHeartbeat, WorkerStatus};

use crate::config_load::{load_config, process_env};

/// The command's arguments: a worker process, or with a subcommand an action on a worker of a
/// running server.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct WorkerArgs {
    /// Drain or undrain a worker of a running server instead.
    #[command(subcommand)]
    pub(crate) action: Option<crate::cli::client::WorkerCommand>,
    /// The control plane's base URL (`http://host:7423`).
    #[arg(long, value_name = "URL", required = true)]
    control_plane: Option<String>,
    /// This worker's ID.
    #[arg(long, required = true)]
    id: Option<String>,
    /// A worker token (signed, static or the shared staging token).
    #[arg(long, env = "SVC_WORKER_TOKEN", conflicts_with = "bootstrap_admin_key")]
    token: Option<String>,
    /// An admin API key to mint (and refresh) signed worker tokens with.
    #[arg(long, env = "SVC_BOOTSTRAP_ADMIN_KEY")]
    bootstrap_admin_key: Option<String>,
    /// Configuration file (default: ./svc.yaml when present).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Send one heartbeat and exit (for scripts and checks).
    #[arg(long)]
    once: bool,
}

pub(crate) fn run(args: WorkerArgs) -> ExitCode {
    let loaded = match load_config(args.config.as_deref(), &process_env()) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("svc: {err}");
            return ExitCode::FAILURE;
        }
    };
    crate::logging::init(&loaded.config.logging);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("svc: starting the async runtime failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work(args, loaded.config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("svc: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where the token comes from.
enum Credential {
    Fixed(String),
    Minted {
        admin_key: String,
        token: String,
        refresh_at: tokio::time::Instant,
    },
}

struct Worker {
    client: reqwest::Client,
    base: String,
    id: String,
    config: Config,
    credential: Credential,
}

async fn work(args: WorkerArgs, config: Config) -> anyhow::Result<()> {
    // Both are required by the parser whenever no subcommand is given.
    let (Some(control_plane), Some(id)) = (args.control_plane, args.id) else {
        bail!("--control-plane and --id are required");
    };
    svc_control::workers::check_worker_id(&id).map_err(|e| anyhow::anyhow!("--id: {e}"))?;
    let credential = match (args.token, args.bootstrap_admin_key) {
        (Some(token), None) => Credential::Fixed(token),
        (None, Some(admin_key)) => Credential::Minted {
            admin_key,
            token: String::new(),
            refresh_at: tokio::time::Instant::now(),
        },
        _ => bail!("one of --token or --bootstrap-admin-key is required"),
    };
    let mut worker = Worker {
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?,
        base: control_plane.trim_end_matches('/').to_owned(),
        id,
        config,
        credential,
    };
    worker.heartbeat(WorkerStatus::Online).await?;
    tracing::info!(worker_id = %worker.id, control_plane = %worker.base, "worker reported in");
    if args.once {
        return Ok(());
    }
    let every = worker.config.worker.heartbeat_interval.as_std();
    let stop = crate::cli::serve::shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(every) => {
                if let Err(err) = worker.heartbeat(WorkerStatus::Online).await {
                    tracing::warn!("heartbeat failed: {err:#}");
                }
            }
        }
    }
    worker
        .heartbeat(WorkerStatus::Offline)
        .await
        .context("reporting offline")?;
    tracing::info!("worker stopped");
    Ok(())
}

impl Worker {
    fn describe(&self, status: WorkerStatus) -> WorkerHeartbeat {
        let config = &self.config;
        let providers = [
            ("mock", config.providers.mock.enabled),
            ("docker", config.providers.docker.enabled),
            ("firecracker", config.providers.firecracker.enabled),
        ]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| name.to_owned())
        .collect();
        let scheme = if config.worker.rpc_tls.enabled {
            "https"
        } else {
            "http"
        };
        let host = svc_control::workers::host_name();
        WorkerHeartbeat {
            url: Some(format!("{scheme}://{host}:{}", config.server.port)),
            hostname: host,
            status,
            providers,
            capabilities: ["spawn", "exec", "files"].map(str::to_owned).to_vec(),
            capacity: WorkerCapacity {
                max_sandboxes: config.defaults.max_sandboxes,
                max_sandboxes_per_owner: config.defaults.max_sandboxes_per_owner,
            },
        }
    }

    /// The token to send, minting a new one when the old is two thirds through its life.
    async fn token(&mut self) -> anyhow::Result<String> {
        match &mut self.credential {
            Credential::Fixed(token) => Ok(token.clone()),
            Credential::Minted {
                admin_key,
                token,
                refresh_at,
            } => {
                if tokio::time::Instant::now() >= *refresh_at {
                    let answer = self
                        .client
                        .post(format!("{}/api/v1/admin/worker-tokens", self.base))
                        .header("X-Admin-API-Key", admin_key.as_str())
                        .json(&json!({"worker_id": self.id}))
                        .send()
                        .await
                        .context("asking the control plane for a worker token")?;
                    let status = answer.status();
                    let body: Value = answer.json().await.unwrap_or(Value::Null);
                    if !status.is_success() {
                        bail!(
                            "minting a worker token failed: {status} {}",
                            body["message"].as_str().unwrap_or("")
                        );
                    }
                    *token = body["token"]
                        .as_str()
                        .context("the token answer has no token")?
                        .to_owned();
                    let expires = body["expires_at"]
                        .as_str()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .context("the token answer has no expires_at")?;
                    // The remote worker's own clock against the token's expiry: it has no
                    // svc clock to read.
                    #[allow(clippy::disallowed_methods)]
                    let left = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now())
                        .to_std()
                        .unwrap_or_default();
                    *refresh_at = tokio::time::Instant::now() + left * 2 / 3;
                    tracing::info!("minted a worker token");
                }
                Ok(token.clone())
            }
        }
    }

    async fn heartbeat(&mut self, status: WorkerStatus) -> anyhow::Result<()> {
        let token = self.token().await?;
        let answer = self
            .client
            .post(format!("{}/api/v1/worker/{}/heartbeat", self.base, self.id))
            .header("X-Worker-ID", self.id.as_str())
            .header("X-Worker-Token", token)
            .json(&self.describe(status))
            .send()
            .await
            .with_context(|| format!("sending a heartbeat to {}", self.base))?;
        let code = answer.status();
        if !code.is_success() {
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            bail!(
                "the control plane refused the heartbeat: {code} {}",
                body["message"].as_str().unwrap_or("")
            );
        }
        Ok(())
    }
}
