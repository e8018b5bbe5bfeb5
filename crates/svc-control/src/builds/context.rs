//! A build's context, checked before the build is recorded (decisions §17): a JSON body becomes
//! a small tar in memory; a tar body is checked entry by entry on its way to a temporary file
//! (absolute names, `..` leaving the context and links pointing outside it are refused), which
//! the build then streams to the engine.

use std::io::{Read, Seek};

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use svc_core::build::BuildRequest;
use svc_core::path::SandboxPath;
use svc_core::Error;
use svc_provider::{ByteStream, ProviderError};
use tokio::io::AsyncWriteExt;

use crate::files::UploadMeter;

/// What `POST /templates/{name}/build` received.
pub enum BuildInput {
    /// `{dockerfile, files, encoding}`.
    Json(BuildRequest),
    /// A tar holding `Dockerfile` and the context (`Content-Type: application/x-tar`), with the
    /// announced length when there is one.
    Tar(ByteStream, Option<u64>),
}

/// A checked context, ready to stream to the engine.
pub(crate) enum Context {
    Memory(Bytes),
    /// Spooled to an unnamed temporary file (gone when closed).
    File(std::fs::File),
}

impl Context {
    /// The tar as a stream.
    pub(crate) fn into_stream(self) -> ByteStream {
        match self {
            Context::Memory(bytes) => Box::pin(futures::stream::once(async { Ok(bytes) })),
            Context::File(file) => {
                let reader = tokio_util::io::ReaderStream::with_capacity(
                    tokio::fs::File::from_std(file),
                    256 << 10,
                );
                Box::pin(reader.map(|chunk| chunk.map_err(ProviderError::from)))
            }
        }
    }
}

/// The directory entries are checked against: absolute link targets fall outside it.
fn context_root() -> SandboxPath {
    #[allow(clippy::unwrap_used)] // A constant absolute path.
    SandboxPath::parse("/context").unwrap()
}

/// Checks `input` and makes the context of it. `max_upload` bounds a tar body (`0`: none).
pub(crate) async fn prepare(input: BuildInput, max_upload: u64) -> Result<Context, Error> {
    match input {
        // Up to `server.max_body_bytes` of base64 to decode and copy: off the async runtime.
        BuildInput::Json(request) => tokio::task::spawn_blocking(move || from_json(&request))
            .await
            .map_err(|e| Error::internal("making the build context", e))?
            .map(Context::Memory),
        BuildInput::Tar(body, length) => spool(body, length, max_upload).await,
    }
}

fn from_json(request: &BuildRequest) -> Result<Bytes, Error> {
    if request.dockerfile.trim().is_empty() {
        return Err(Error::invalid(
            "dockerfile",
            "is required and must not be empty",
        ));
    }
    let base64 = match request.encoding.as_deref() {
        None | Some("utf8") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(Error::invalid(
                "encoding",
                format!(
                    "must be utf8 or base64, not {}",
                    svc_core::error::echo(other)
                ),
            ))
        }
    };
    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |name: &str, content: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, name, content)
            .map_err(|e| Error::invalid(format!("files.{name}"), e.to_string()))
    };
    add("Dockerfile", request.dockerfile.as_bytes())?;
    for (name, content) in &request.files {
        let field = format!("files.{name}");
        let relative = svc_provider::archive::relative_name(name)
            .map_err(|message| Error::invalid(&field, message))?;
        if relative.is_empty() {
            return Err(Error::invalid(
                field,
                "names the context itself, not a file",
            ));
        }
        if relative == "Dockerfile" {
            return Err(Error::invalid(
                field,
                "the Dockerfile comes from the field dockerfile",
            ));
        }
        let content = if base64 {
            base64::engine::general_purpose::STANDARD
                .decode(content)
                .map_err(|e| Error::invalid(&field, format!("is not base64: {e}")))?
        } else {
            content.as_bytes().to_vec()
        };
        add(&relative, &content)?;
    }
    let tar = tar
        .into_inner()
        .map_err(|e| Error::internal("making the build context", e))?;
    Ok(Bytes::from(tar))
}

async fn spool(body: ByteStream, length: Option<u64>, max_upload: u64) -> Result<Context, Error> {
    let meter = UploadMeter::new(max_upload, length)?;
    let (mut checked, watch) = svc_provider::archive::checked(meter.watch(body), &context_root());
    let spool_error = |e: std::io::Error| Error::internal("spooling the build context", e);
    let file = tokio::task::spawn_blocking(tempfile::tempfile)
        .await
        .map_err(|e| Error::internal("spooling the build context", e))?
        .map_err(spool_error)?;
    let mut out = tokio::fs::File::from_std(file);
    let mut copied = Ok(());
    while let Some(chunk) = checked.next().await {
        match chunk {
            Ok(chunk) => out.write_all(&chunk).await.map_err(spool_error)?,
            Err(err) => {
                copied = Err(Error::invalid("context", err.to_string()));
                break;
            }
        }
    }
    if let Some(refusal) = watch.report().refused {
        return Err(Error::invalid("context", refusal));
    }
    meter.finish(copied)?;
    out.flush().await.map_err(spool_error)?;
    let mut file = out.into_std().await;
    let file = tokio::task::spawn_blocking(move || {
        file.rewind()?;
        let found = has_dockerfile(&mut file)?;
        file.rewind()?;
        Ok::<_, std::io::Error>((found, file))
    })
    .await
    .map_err(|e| Error::internal("reading the build context", e))?;
    match file {
        Ok((true, file)) => Ok(Context::File(file)),
        Ok((false, _)) => Err(Error::invalid("context", "has no Dockerfile at its root")),
        Err(err) => Err(Error::invalid(
            "context",
            format!("is not a readable tar archive: {err}"),
        )),
    }
}

/// Whether the archive holds a regular file `Dockerfile` at its root.
fn has_dockerfile(archive: &mut impl Read) -> std::io::Result<bool> {
    let mut archive = tar::Archive::new(archive);
    for entry in archive.entries()? {
        let entry = entry?;
        let path = entry.path()?;
        let name = path.to_string_lossy();
        if entry.header().entry_type().is_file()
            && svc_provider::archive::relative_name(&name).as_deref() == Ok("Dockerfile")
        {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(files: &[(&str, &str)], encoding: Option<&str>) -> BuildRequest {
        BuildRequest {
            dockerfile: "FROM scratch\n".into(),
            files: files
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            encoding: encoding.map(str::to_owned),
        }
    }

    fn names(tar: &[u8]) -> Vec<String> {
        let mut archive = tar::Archive::new(tar);
        archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn json_contexts_become_a_tar_with_the_dockerfile_first() {
        let tar = from_json(&request(
            &[("src/a.txt", "aGk="), ("b", "eA==")],
            Some("base64"),
        ))
        .unwrap();
        assert_eq!(names(&tar), ["Dockerfile", "b", "src/a.txt"]);
        assert!(has_dockerfile(&mut &tar[..]).unwrap());
    }

    #[test]
    fn json_contexts_refuse_names_leaving_it_and_bad_encodings() {
        for (name, field) in [
            ("/etc/passwd", "files./etc/passwd"),
            ("../x", "files.../x"),
            ("a/../../x", "files.a/../../x"),
            ("Dockerfile", "files.Dockerfile"),
        ] {
            match from_json(&request(&[(name, "x")], None)) {
                Err(Error::InvalidInput { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(matches!(
            from_json(&request(&[("a", "not base64!")], Some("base64"))),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(
            from_json(&request(&[], Some("latin1"))),
            Err(Error::InvalidInput { field, .. }) if field == "encoding"
        ));
        let mut empty = request(&[], None);
        empty.dockerfile = " ".into();
        assert!(matches!(
            from_json(&empty),
            Err(Error::InvalidInput { field, .. }) if field == "dockerfile"
        ));
    }
}
