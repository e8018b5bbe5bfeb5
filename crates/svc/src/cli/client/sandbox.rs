//! `svc sandbox create|ls|get|rm|extend|pause|resume`.

use std::process::ExitCode;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::{pairs, print_answer, print_json, Api, ClientError};

#[derive(Debug, Subcommand)]
pub(crate) enum SandboxCommand {
    /// Creates a sandbox and prints it.
    Create {
        /// Image (default: the server's).
        #[arg(long)]
        image: Option<String>,
        /// Provider (default: the server's).
        #[arg(long)]
        provider: Option<String>,
        /// Template to start from.
        #[arg(long)]
        template: Option<String>,
        /// Memory in MiB.
        #[arg(long)]
        memory_mb: Option<u32>,
        /// Virtual CPUs.
        #[arg(long)]
        vcpus: Option<u32>,
        /// Time to live (`30m`, `2h`).
        #[arg(long)]
        ttl: Option<String>,
        /// Network mode.
        #[arg(long)]
        network: Option<String>,
        /// Environment variable `KEY=VALUE` (repeatable).
        #[arg(long = "env", short = 'e', value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Metadata `KEY=VALUE` (repeatable).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        /// Egress mode: `all`, `none` or `allowlist` (default: `allowlist` with `--allow`,
        /// else the server's).
        #[arg(long)]
        egress: Option<String>,
        /// An allowed destination (`host`, `*.domain`, IP or CIDR, optional `:port`;
        /// repeatable).
        #[arg(long = "allow", value_name = "DESTINATION")]
        allow: Vec<String>,
    },
    /// Lists sandboxes.
    #[command(alias = "list")]
    Ls {
        /// `running`, `destroyed`, `error`, `creating` or `all` (default: the server's).
        #[arg(long)]
        state: Option<String>,
        /// Only this owner's.
        #[arg(long)]
        owner: Option<String>,
    },
    /// Prints one sandbox.
    Get {
        /// Sandbox ID.
        id: String,
    },
    /// Destroys sandboxes.
    #[command(alias = "destroy")]
    Rm {
        /// Sandbox IDs.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Gives a sandbox a new time to live, counted from now.
    Extend {
        /// Sandbox ID.
        id: String,
        /// The new time to live (`1h`).
        #[arg(long)]
        ttl: String,
    },
    /// Freezes a sandbox's processes; it does not expire while paused.
    Pause {
        /// Sandbox ID.
        id: String,
    },
    /// Thaws a paused sandbox.
    Resume {
        /// Sandbox ID.
        id: String,
    },
    /// Issues a preview token for a port inside the sandbox; prints its URL and token.
    Preview {
        /// Sandbox ID.
        id: String,
        /// The port.
        port: u16,
        /// How long the token works (`15m`).
        #[arg(long, default_value = "15m")]
        ttl: String,
    },
}

/// The table of sandboxes.
pub(crate) const SANDBOX_COLUMNS: [(&str, &str); 6] = [
    ("ID", "id"),
    ("STATE", "state"),
    ("PROVIDER", "provider"),
    ("IMAGE", "image"),
    ("OWNER", "owner_id"),
    ("EXPIRES", "expires_at"),
];

fn print_sandboxes(api: &Api, answer: &Value) {
    print_answer(api, answer, &SANDBOX_COLUMNS);
}

/// `POST /sandboxes/{id}/{verb}` (pause, resume) and the sandbox it answers.
async fn transition(api: &Api, id: &str, verb: &str) -> Result<(), ClientError> {
    let sandbox = api
        .call(api.request(Method::POST, &format!("/sandboxes/{id}/{verb}")))
        .await?;
    print_sandboxes(api, &sandbox);
    Ok(())
}

pub(crate) async fn run(api: Api, command: SandboxCommand) -> Result<ExitCode, ClientError> {
    match command {
        SandboxCommand::Create {
            image,
            provider,
            template,
            memory_mb,
            vcpus,
            ttl,
            network,
            env,
            metadata,
            egress,
            allow,
        } => {
            let mut body = Map::new();
            if egress.is_some() || !allow.is_empty() {
                let mode = egress.unwrap_or_else(|| "allowlist".to_owned());
                body.insert("egress".to_owned(), json!({ "mode": mode, "allow": allow }));
            }
            let mut set = |key: &str, value: Option<Value>| {
                if let Some(value) = value {
                    body.insert(key.to_owned(), value);
                }
            };
            set("image", image.map(Value::from));
            set("provider", provider.map(Value::from));
            set("template", template.map(Value::from));
            set("memory_mb", memory_mb.map(Value::from));
            set("vcpus", vcpus.map(Value::from));
            set("ttl", ttl.map(Value::from));
            set("network", network.map(Value::from));
            let env = pairs("env", &env)?;
            set("env", (!env.is_empty()).then_some(Value::Object(env)));
            let metadata = pairs("metadata", &metadata)?;
            set(
                "metadata",
                (!metadata.is_empty()).then_some(Value::Object(metadata)),
            );
            let created = api
                .call(api.request(Method::POST, "/sandboxes").json(&body))
                .await?;
            print_sandboxes(&api, &created);
        }
        SandboxCommand::Ls { state, owner } => {
            let mut query = Vec::new();
            if let Some(state) = state {
                query.push(("state", state));
            }
            if let Some(owner) = owner {
                query.push(("owner_id", owner));
            }
            let listed = api.list_all("/sandboxes", &query).await?;
            print_sandboxes(&api, &listed);
        }
        SandboxCommand::Get { id } => {
            let sandbox = api
                .call(api.request(Method::GET, &format!("/sandboxes/{id}")))
                .await?;
            print_sandboxes(&api, &sandbox);
        }
        SandboxCommand::Rm { ids } => {
            let mut answers = Vec::new();
            for id in &ids {
                let answer = api
                    .call(api.request(Method::DELETE, &format!("/sandboxes/{id}")))
                    .await?;
                if !api.json() {
                    println!("{id}");
                }
                answers.push(answer);
            }
            if api.json() {
                print_json(&match answers.len() {
                    1 => answers.remove(0),
                    _ => Value::Array(answers),
                });
            }
        }
        SandboxCommand::Extend { id, ttl } => {
            let extended = api
                .call(
                    api.request(Method::POST, &format!("/sandboxes/{id}/extend"))
                        .json(&json!({ "ttl": ttl })),
                )
                .await?;
            print_sandboxes(&api, &extended);
        }
        SandboxCommand::Pause { id } => transition(&api, &id, "pause").await?,
        SandboxCommand::Resume { id } => transition(&api, &id, "resume").await?,
        SandboxCommand::Preview { id, port, ttl } => {
            let grant = api
                .call(
                    api.request(Method::POST, &format!("/sandboxes/{id}/preview-tokens"))
                        .json(&json!({ "port": port, "ttl": ttl })),
                )
                .await?;
            if api.json() {
                print_json(&grant);
            } else {
                let field = |key: &str| grant[key].as_str().unwrap_or_default().to_owned();
                println!("{}?svc_preview_token={}", field("url"), field("token"));
                println!("expires {}", field("expires_at"));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
