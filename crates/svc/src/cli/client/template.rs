//! `svc template create|ls|get|update|rm|spawn|build`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Map, Value};

use super::sandbox::SANDBOX_COLUMNS;
use super::{pairs, print_answer, Api, ClientError};

const COLUMNS: [(&str, &str); 8] = [
    ("NAME", "name"),
    ("IMAGE", "image"),
    ("PROVIDER", "provider"),
    ("MEMORY_MB", "memory_mb"),
    ("VCPUS", "vcpus"),
    ("TTL", "ttl"),
    ("WARM_POOL", "warm_pool"),
    ("WARM_READY", "warm_ready"),
];

/// A template's settings; the ones left out keep the server's defaults (or, on update, their
/// values).
#[derive(Debug, Args)]
pub(crate) struct TemplateFields {
    /// Image.
    #[arg(long)]
    image: Option<String>,
    /// Provider.
    #[arg(long)]
    provider: Option<String>,
    /// Memory in MiB.
    #[arg(long)]
    memory_mb: Option<u32>,
    /// Virtual CPUs.
    #[arg(long)]
    vcpus: Option<u32>,
    /// Time to live of its sandboxes.
    #[arg(long)]
    ttl: Option<String>,
    /// Metadata `KEY=VALUE` (repeatable).
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    metadata: Vec<String>,
    /// Started runtimes to keep ready for its spawns.
    #[arg(long)]
    warm_pool: Option<u32>,
}

impl TemplateFields {
    fn body(&self, name: Option<&str>) -> Result<Value, ClientError> {
        let mut body = Map::new();
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                body.insert(key.to_owned(), value);
            }
        };
        set("name", name.map(Value::from));
        set("image", self.image.clone().map(Value::from));
        set("provider", self.provider.clone().map(Value::from));
        set("memory_mb", self.memory_mb.map(Value::from));
        set("vcpus", self.vcpus.map(Value::from));
        set("ttl", self.ttl.clone().map(Value::from));
        set("warm_pool", self.warm_pool.map(Value::from));
        let metadata = pairs("metadata", &self.metadata)?;
        set(
            "metadata",
            (!metadata.is_empty()).then_some(Value::Object(metadata)),
        );
        Ok(Value::Object(body))
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum TemplateCommand {
    /// Saves a new template.
    Create {
        /// Its name.
        name: String,
        #[command(flatten)]
        fields: TemplateFields,
    },
    /// Lists templates.
    #[command(alias = "list")]
    Ls,
    /// Prints one template.
    Get {
        /// Its name.
        name: String,
    },
    /// Changes a template.
    Update {
        /// Its name.
        name: String,
        #[command(flatten)]
        fields: TemplateFields,
    },
    /// Deletes a template.
    #[command(alias = "delete")]
    Rm {
        /// Its name.
        name: String,
    },
    /// Builds the template's image from a Dockerfile and a context directory, showing the
    /// build as it goes; the template then uses the image.
    Build(super::build::BuildArgs),
    /// Creates a sandbox from a template and prints it.
    Spawn {
        /// Its name.
        name: String,
        /// Environment of every command in the sandbox, `KEY=VALUE` (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
    },
}

fn spawn_body(env: &[String]) -> Result<Value, ClientError> {
    let env = pairs("env", env)?;
    let mut body = Map::new();
    if !env.is_empty() {
        body.insert("env".to_owned(), Value::Object(env));
    }
    Ok(Value::Object(body))
}

pub(crate) async fn run(api: Api, command: TemplateCommand) -> Result<ExitCode, ClientError> {
    let command = match command {
        TemplateCommand::Build(args) => return super::build::run(api, args).await,
        other => other,
    };
    let (request, columns): (_, &[(&str, &str)]) = match &command {
        TemplateCommand::Create { name, fields } => (
            api.request(Method::POST, "/templates")
                .json(&fields.body(Some(name))?),
            &COLUMNS,
        ),
        TemplateCommand::Ls => {
            let listed = api.list_all("/templates", &[]).await?;
            print_answer(&api, &listed, &COLUMNS);
            return Ok(ExitCode::SUCCESS);
        }
        TemplateCommand::Get { name } => (
            api.request(Method::GET, &format!("/templates/{name}")),
            &COLUMNS,
        ),
        TemplateCommand::Update { name, fields } => (
            api.request(Method::PUT, &format!("/templates/{name}"))
                .json(&fields.body(None)?),
            &COLUMNS,
        ),
        TemplateCommand::Rm { name } => (
            api.request(Method::DELETE, &format!("/templates/{name}")),
            &[],
        ),
        TemplateCommand::Build(_) => unreachable!("handled above"),
        TemplateCommand::Spawn { name, env } => (
            api.request(Method::POST, &format!("/templates/{name}/spawn"))
                .json(&spawn_body(env)?),
            &SANDBOX_COLUMNS,
        ),
    };
    let answer = api.call(request).await?;
    match command {
        TemplateCommand::Rm { name } if !api.json() => println!("{name}"),
        _ => print_answer(&api, &answer, columns),
    }
    Ok(ExitCode::SUCCESS)
}
