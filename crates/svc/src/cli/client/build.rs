//! `svc template build NAME [-f Dockerfile] [CONTEXT_DIR]` (decisions §17, §19): sends the
//! Dockerfile and the context directory as a tar (streamed, symlinks kept as links), then
//! follows the build's log: steps and output as they come, pull progress on one updating line
//! on a terminal. Exits 0 when the build succeeded, 1 when it failed or was cancelled; Ctrl-C
//! cancels the build.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;
use tokio_util::io::{ReaderStream, SyncIoBridge};

use super::{Api, ClientError};

#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// The template to build.
    name: String,
    /// The Dockerfile (default: `Dockerfile` in the context directory).
    #[arg(short = 'f', long = "file", value_name = "DOCKERFILE")]
    file: Option<PathBuf>,
    /// The build context (default: none, only the Dockerfile).
    context: Option<PathBuf>,
}

fn usage(message: String) -> ClientError {
    ClientError::Transport(message)
}

pub(crate) async fn run(api: Api, args: BuildArgs) -> Result<ExitCode, ClientError> {
    let dockerfile_path = match (&args.file, &args.context) {
        (Some(file), _) => file.clone(),
        (None, Some(dir)) => dir.join("Dockerfile"),
        (None, None) => PathBuf::from("Dockerfile"),
    };
    let dockerfile = tokio::fs::read(&dockerfile_path)
        .await
        .map_err(|e| usage(format!("{}: {e}", dockerfile_path.display())))?;
    if let Some(dir) = &args.context {
        if !tokio::fs::metadata(dir).await.is_ok_and(|m| m.is_dir()) {
            return Err(usage(format!("{}: not a directory", dir.display())));
        }
    }
    let (reader, writer) = tokio::io::duplex(256 << 10);
    let context = args.context.clone();
    let packing = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut builder = tar::Builder::new(SyncIoBridge::new(writer));
        builder.follow_symlinks(false);
        let mut header = tar::Header::new_gnu();
        header.set_size(dockerfile.len() as u64);
        header.set_mode(0o644);
        builder.append_data(&mut header, "Dockerfile", dockerfile.as_slice())?;
        if let Some(dir) = context {
            pack_context(&mut builder, &dir)?;
        }
        builder.into_inner()?.shutdown()
    });
    let request = api
        .request(Method::POST, &format!("/templates/{}/build", args.name))
        .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
        .body(reqwest::Body::wrap_stream(ReaderStream::with_capacity(
            reader,
            256 << 10,
        )));
    let accepted = api.call(request).await;
    match packing.await {
        Ok(Err(err)) => return Err(usage(format!("packing the context: {err}"))),
        Err(err) => return Err(usage(err.to_string())),
        Ok(Ok(())) => {}
    }
    let accepted = accepted?;
    let build_id = accepted["build_id"].as_str().unwrap_or_default().to_owned();
    if !api.json() {
        eprintln!("build {build_id} of template {} started", args.name);
    }
    let path = format!("/templates/{}/builds/{build_id}", args.name);
    tokio::select! {
        ended = follow(&api, &path) => ended,
        _ = tokio::signal::ctrl_c() => {
            let _ = api.call(api.request(Method::DELETE, &path)).await;
            eprintln!("build {build_id} cancelled");
            Ok(ExitCode::from(130))
        }
    }
}

/// Appends the context directory, leaving out its own root `Dockerfile` (the one sent is
/// already in the archive).
fn pack_context<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    dir: &Path,
) -> std::io::Result<()> {
    let mut entries = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        if entry.file_name() == "Dockerfile" {
            continue;
        }
        let name = PathBuf::from(entry.file_name());
        builder.append_path_with_name(entry.path(), &name)?;
        if entry.file_type()?.is_dir() {
            super::cp::pack(builder, &entry.path(), &name)?;
        }
    }
    Ok(())
}

/// Prints the build's log as it comes; the exit code follows its result.
async fn follow(api: &Api, path: &str) -> Result<ExitCode, ClientError> {
    let response = api
        .send(api.request(Method::GET, &format!("{path}/logs")))
        .await?;
    let terminal = std::io::stderr().is_terminal();
    let mut stream = response.bytes_stream();
    let mut pending = Vec::new();
    let mut result = None;
    while let Some(chunk) = stream.next().await {
        pending.extend_from_slice(&chunk?);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let Ok(value) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if api.json() {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&line).and_then(|()| out.flush());
            } else {
                show(&value, terminal);
            }
            if value["type"] == "result" {
                result = Some(value);
            }
        }
    }
    let Some(result) = result else {
        // The stream ended without a result: ask for the record.
        let record = api.call(api.request(Method::GET, path)).await?;
        return Ok(ended(api, &record));
    };
    Ok(ended(api, &result))
}

/// How a log line looks on a terminal (or in a pipe).
fn show(line: &Value, terminal: bool) {
    let mut err = std::io::stderr().lock();
    let text = |key: &str| line[key].as_str().unwrap_or_default().to_owned();
    let _ = match line["type"].as_str() {
        Some("step") => writeln!(
            err,
            "{}Step {}: {}",
            if terminal { "\r\x1b[K" } else { "" },
            line["step"],
            text("instruction")
        ),
        Some("output") => write!(err, "{}", text("data")),
        Some("progress") if terminal => {
            let mb = |key: &str| line[key].as_u64().unwrap_or(0) as f64 / 1e6;
            write!(
                err,
                "\r\x1b[Kpulling {:.1} MB of {:.1} MB",
                mb("current_bytes"),
                mb("total_bytes")
            )
        }
        _ => Ok(()),
    };
    let _ = err.flush();
}

/// Says how the build ended; the exit code.
fn ended(api: &Api, result: &Value) -> ExitCode {
    let status = result["status"].as_str().unwrap_or_default();
    if status == "succeeded" {
        if !api.json() {
            eprintln!("built {}", result["image"].as_str().unwrap_or_default());
        }
        ExitCode::SUCCESS
    } else {
        if !api.json() {
            eprintln!(
                "build {status}: {}",
                result["error"].as_str().unwrap_or_default()
            );
        }
        ExitCode::FAILURE
    }
}
