//! `svc cp SRC DST` (decisions §19): copies files and directory trees between this machine and a
//! sandbox, either side written `ID:/path`. It follows `docker cp`: a DST that is an existing
//! directory receives SRC inside it, otherwise DST becomes the copy. Files go through the
//! streamed `PUT`/`GET /files`, directories as tar through `/files/archive`; nothing is held
//! whole in memory, and a large transfer shows a progress bar on a terminal.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use futures::{StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio_util::io::{ReaderStream, StreamReader, SyncIoBridge};

use super::{Api, ClientError};

#[derive(Debug, Args)]
pub(crate) struct CpArgs {
    /// What to copy: a local path or `ID:/path` in a sandbox.
    src: String,
    /// Where to: a local path or `ID:/path` in a sandbox.
    dst: String,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
}

/// Transfers from this size on show a progress bar (when stderr is a terminal).
const PROGRESS_FROM_BYTES: u64 = 1 << 20;

/// One side of a copy.
#[derive(Debug, PartialEq)]
enum Place {
    Local(PathBuf),
    Sandbox { id: String, path: String },
}

impl Place {
    /// `ID:/path` is a sandbox path (an ID never holds `/`); anything else is local, as with
    /// `docker cp`, where a local name with a colon is written `./a:b`.
    fn parse(text: &str) -> Place {
        match text.split_once(':') {
            Some((id, path)) if !id.is_empty() && !id.contains('/') => Place::Sandbox {
                id: id.to_owned(),
                path: path.to_owned(),
            },
            _ => Place::Local(PathBuf::from(text)),
        }
    }
}

pub(crate) async fn run(api: Api, args: CpArgs) -> Result<ExitCode, ClientError> {
    let progress = !args.quiet;
    match (Place::parse(&args.src), Place::parse(&args.dst)) {
        (Place::Local(src), Place::Sandbox { id, path }) => {
            upload(&api, &src, &Remote::new(&api, &id).await?, &path, progress).await?;
        }
        (Place::Sandbox { id, path }, Place::Local(dst)) => {
            download(&api, &Remote::new(&api, &id).await?, &path, &dst, progress).await?;
        }
        (Place::Local(_), Place::Local(_)) => {
            return Err(usage("one of SRC and DST must be a sandbox path, ID:/path"))
        }
        (Place::Sandbox { .. }, Place::Sandbox { .. }) => {
            return Err(usage(
                "copying between two sandboxes is not supported; copy through a local path",
            ))
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn usage(message: &str) -> ClientError {
    ClientError::Transport(message.to_owned())
}

/// The routes of one sandbox's files.
struct Remote {
    files: String,
}

impl Remote {
    /// The sandbox's files, once the sandbox is known to exist: a missing path and a missing
    /// sandbox both answer `not_found`, and only the first means "copy to a new name".
    async fn new(api: &Api, id: &str) -> Result<Remote, ClientError> {
        api.call(api.request(Method::GET, &format!("/sandboxes/{id}")))
            .await?;
        Ok(Remote {
            files: format!("/sandboxes/{id}/files"),
        })
    }

    /// The path's `FileInfo`, or `None` when nothing is there.
    async fn stat(&self, api: &Api, path: &str) -> Result<Option<Value>, ClientError> {
        let request = api
            .request(Method::GET, &format!("{}/stat", self.files))
            .query(&[("path", path)]);
        match api.call(request).await {
            Ok(info) => Ok(Some(info)),
            Err(ClientError::Refused { code, .. }) if code == "not_found" => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// The last component of `path`, which names the copy inside an existing directory.
fn base_name(path: &str) -> Result<&str, ClientError> {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|name| !name.is_empty() && *name != "." && *name != "..")
        .ok_or_else(|| usage(&format!("{path}: cannot tell the name of the copy")))
}

async fn upload(
    api: &Api,
    src: &Path,
    remote: &Remote,
    dst: &str,
    progress: bool,
) -> Result<(), ClientError> {
    let local = tokio::fs::metadata(src)
        .await
        .map_err(|e| usage(&format!("{}: {e}", src.display())))?;
    let name = base_name(src.to_str().unwrap_or_default())?;
    let target = match remote.stat(api, dst).await? {
        Some(info) if info["is_dir"] == true => format!("{}/{name}", dst.trim_end_matches('/')),
        Some(_) if local.is_dir() => {
            return Err(usage(&format!(
                "cannot copy directory {} onto file {dst}",
                src.display()
            )))
        }
        None if dst.ends_with('/') && !local.is_dir() => {
            return Err(usage(&format!(
                "destination directory {dst} does not exist"
            )))
        }
        _ => dst.to_owned(),
    };
    if local.is_dir() {
        upload_tree(api, src, remote, &target, progress).await
    } else {
        upload_file(api, src, &local, remote, &target, progress).await
    }
}

async fn upload_file(
    api: &Api,
    src: &Path,
    local: &std::fs::Metadata,
    remote: &Remote,
    target: &str,
    progress: bool,
) -> Result<(), ClientError> {
    use std::os::unix::fs::PermissionsExt;
    let file = tokio::fs::File::open(src)
        .await
        .map_err(|e| usage(&format!("{}: {e}", src.display())))?;
    let bar = bar(progress, Some(local.len()));
    let body = ReaderStream::with_capacity(file, 256 << 10).inspect_ok(counted(&bar));
    let mode = format!("{:04o}", local.permissions().mode() & 0o7777);
    let request = api
        .request(Method::PUT, &remote.files)
        .query(&[("path", target), ("mode", &mode)])
        // The length lets the server stream the file straight to its place.
        .header(reqwest::header::CONTENT_LENGTH, local.len())
        .body(reqwest::Body::wrap_stream(body));
    api.call(request).await?;
    bar.finish_and_clear();
    Ok(())
}

/// Sends `src` as a tar written on a blocking thread while the request streams it.
async fn upload_tree(
    api: &Api,
    src: &Path,
    remote: &Remote,
    target: &str,
    progress: bool,
) -> Result<(), ClientError> {
    let src = src.to_owned();
    let total = tokio::task::spawn_blocking({
        let src = src.clone();
        move || tree_size(&src)
    })
    .await
    .map_err(|e| usage(&e.to_string()))?
    .map_err(|e| usage(&format!("{}: {e}", src.display())))?;
    let bar = bar(progress, Some(total));
    let (reader, writer) = tokio::io::duplex(256 << 10);
    let packing = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut builder = tar::Builder::new(SyncIoBridge::new(writer));
        builder.follow_symlinks(false);
        pack(&mut builder, &src, Path::new(""))?;
        builder.into_inner()?.shutdown()
    });
    let body = ReaderStream::with_capacity(reader, 256 << 10).inspect_ok(counted(&bar));
    let request = api
        .request(Method::PUT, &format!("{}/archive", remote.files))
        .query(&[("path", target)])
        .body(reqwest::Body::wrap_stream(body));
    let sent = api.call(request).await;
    // A local failure (an unreadable file) cut the tar short: it is the error to report.
    match packing.await {
        Ok(Err(err)) => return Err(usage(&format!("packing {target}: {err}"))),
        Err(err) => return Err(usage(&err.to_string())),
        Ok(Ok(())) => {}
    }
    sent?;
    bar.finish_and_clear();
    Ok(())
}

/// The bytes of the regular files under `dir`.
fn tree_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            total += tree_size(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

/// Appends what is under `dir` as `name/...`, in name order; symlinks stay links.
pub(crate) fn pack<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    dir: &Path,
    name: &Path,
) -> std::io::Result<()> {
    let mut entries = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let inner = name.join(entry.file_name());
        builder.append_path_with_name(&path, &inner)?;
        if entry.file_type()?.is_dir() {
            pack(builder, &path, &inner)?;
        }
    }
    Ok(())
}

async fn download(
    api: &Api,
    remote: &Remote,
    src: &str,
    dst: &Path,
    progress: bool,
) -> Result<(), ClientError> {
    let info = remote
        .stat(api, src)
        .await?
        .ok_or_else(|| usage(&format!("{src}: no such file or directory in the sandbox")))?;
    let is_dir = info["is_dir"] == true;
    let target = match tokio::fs::metadata(dst).await {
        Ok(local) if local.is_dir() => dst.join(base_name(src)?),
        Ok(_) if is_dir => {
            return Err(usage(&format!(
                "cannot copy directory {src} onto file {}",
                dst.display()
            )))
        }
        _ => dst.to_owned(),
    };
    if is_dir {
        download_tree(api, remote, src, &target, progress).await
    } else {
        let size = info["size"].as_u64();
        let mode = info["mode"]
            .as_str()
            .and_then(|m| u32::from_str_radix(m, 8).ok());
        download_file(api, remote, src, &target, size, mode, progress).await
    }
}

/// Writes the file beside `target` and renames it into place when complete, so an interrupted
/// copy never leaves a truncated file where the old one was.
async fn download_file(
    api: &Api,
    remote: &Remote,
    src: &str,
    target: &Path,
    size: Option<u64>,
    mode: Option<u32>,
    progress: bool,
) -> Result<(), ClientError> {
    use std::os::unix::fs::PermissionsExt;
    let response = api
        .send(
            api.request(Method::GET, &remote.files)
                .query(&[("path", src)]),
        )
        .await?;
    let name = target
        .file_name()
        .ok_or_else(|| usage(&format!("{}: not a file name", target.display())))?;
    let partial = target.with_file_name(format!(
        ".{}.svc-cp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let local = |e: std::io::Error| usage(&format!("{}: {e}", target.display()));
    let mut file = tokio::fs::File::create(&partial).await.map_err(local)?;
    let bar = bar(progress, size);
    let written = async {
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            file.write_all(&chunk).await.map_err(local)?;
            bar.inc(chunk.len() as u64);
        }
        file.flush().await.map_err(local)?;
        if let Some(mode) = mode {
            let permissions = std::fs::Permissions::from_mode(mode);
            tokio::fs::set_permissions(&partial, permissions)
                .await
                .map_err(local)?;
        }
        tokio::fs::rename(&partial, target).await.map_err(local)
    }
    .await;
    if written.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    bar.finish_and_clear();
    written
}

/// Unpacks the directory's tar into `target` on a blocking thread as it arrives.
async fn download_tree(
    api: &Api,
    remote: &Remote,
    src: &str,
    target: &Path,
    progress: bool,
) -> Result<(), ClientError> {
    let response = api
        .send(
            api.request(Method::GET, &format!("{}/archive", remote.files))
                .query(&[("path", src)]),
        )
        .await?;
    let bar = bar(progress, None);
    let body = response
        .bytes_stream()
        .inspect_ok(counted(&bar))
        .map_err(std::io::Error::other);
    let reader = SyncIoBridge::new(StreamReader::new(body));
    let target = target.to_owned();
    let unpacked = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        std::fs::create_dir_all(&target)?;
        let mut archive = tar::Archive::new(reader);
        archive.set_preserve_permissions(true);
        archive.set_overwrite(true);
        // `unpack` refuses names and links that would leave `target`.
        archive.unpack(&target)
    })
    .await
    .map_err(|e| usage(&e.to_string()))?;
    bar.finish_and_clear();
    unpacked.map_err(|e| usage(&format!("unpacking {src}: {e}")))
}

/// A progress bar on stderr for a transfer of `total` bytes (unknown: `None`), hidden for
/// small transfers, with `--quiet`, and when stderr is not a terminal.
fn bar(progress: bool, total: Option<u64>) -> ProgressBar {
    let wanted = progress && total.is_none_or(|total| total >= PROGRESS_FROM_BYTES);
    if !wanted {
        return ProgressBar::hidden();
    }
    let bar = match total {
        Some(total) => ProgressBar::new(total).with_style(
            ProgressStyle::with_template(
                "{bar:30} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {binary_bytes} {binary_bytes_per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.with_finish(indicatif::ProgressFinish::AndClear)
}

/// Counts each chunk that passes on `bar`.
fn counted(bar: &ProgressBar) -> impl FnMut(&bytes::Bytes) {
    let bar = bar.clone();
    move |chunk| bar.inc(chunk.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::{base_name, Place};
    use std::path::PathBuf;

    #[test]
    fn places_follow_docker_cp() {
        assert_eq!(
            Place::parse("sb-1:/work/a"),
            Place::Sandbox {
                id: "sb-1".into(),
                path: "/work/a".into()
            }
        );
        assert_eq!(Place::parse("./a:b"), Place::Local(PathBuf::from("./a:b")));
        assert_eq!(Place::parse("dir"), Place::Local(PathBuf::from("dir")));
        assert_eq!(base_name("/work/dir/").ok(), Some("dir"));
        assert!(base_name("/").is_err());
    }
}
