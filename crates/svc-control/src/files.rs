//! The file API above the provider: the one place where sandbox paths and glob patterns are
//! parsed and checked (providers receive them validated), capability checks, `file.*` events.

use bytes::Bytes;
use svc_core::access::Action;
use svc_core::event::{EventPayload, FileEventData};
use svc_core::exec::parse_mode;
use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_core::range::RangeAnswer;
use svc_core::{Capability, Error, SandboxId};
use svc_provider::{ByteStream, FileInfo, ProviderError, Upload};

use crate::door::{Operation, Target};
use crate::{ControlPlane, Principal};

/// Default mode of written files.
pub const DEFAULT_FILE_MODE: u32 = 0o644;

/// How `content` of a write is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentEncoding {
    /// Text as is.
    Utf8,
    /// Standard base64, for binary content.
    Base64,
}

impl ContentEncoding {
    /// Parses `utf8` (default) or `base64`.
    pub fn parse(value: Option<&str>) -> Result<Self, Error> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            None | Some("utf8" | "utf-8" | "") => Ok(ContentEncoding::Utf8),
            Some("base64") => Ok(ContentEncoding::Base64),
            Some(other) => Err(Error::invalid(
                "encoding",
                format!(
                    "unknown encoding {} (allowed: utf8, base64)",
                    svc_core::error::echo(other)
                ),
            )),
        }
    }
}

/// Parses a caller's path.
pub fn sandbox_path(field: &str, value: &str) -> Result<SandboxPath, Error> {
    SandboxPath::parse(value).map_err(|e| Error::invalid(field, e.to_string()))
}

/// Parses a path that names something other than the sandbox's root, which cannot be written,
/// deleted or moved.
fn non_root_path(field: &str, value: &str, refusal: &str) -> Result<NonRootPath, Error> {
    NonRootPath::new(sandbox_path(field, value)?).ok_or_else(|| Error::invalid(field, refusal))
}

fn file_data(path: &SandboxPath, size: Option<u64>) -> FileEventData {
    FileEventData {
        path: path.as_str().to_owned(),
        size,
    }
}

/// The path and mode of a file to write (`POST` and `PUT /files`): not `/`, mode octal text
/// defaulting to [`DEFAULT_FILE_MODE`].
fn written_file(path: &str, mode: Option<&str>) -> Result<(NonRootPath, u32), Error> {
    let path = non_root_path("path", path, "/ is a directory and cannot be written")?;
    let mode = match mode {
        Some(mode) => parse_mode(mode).map_err(|m| Error::invalid("mode", m))?,
        None => DEFAULT_FILE_MODE,
    };
    Ok((path, mode))
}

/// A file download: its bytes, and what its `Range` asked for.
pub struct Download {
    /// The bytes to send (none when the range is unsatisfiable).
    pub stream: ByteStream,
    /// The file's size, when a range made it known.
    pub size: Option<u64>,
    /// Whole, partial or unsatisfiable.
    pub answer: RangeAnswer,
}

/// `len` bytes of `stream` from byte `skip` on. The provider streams from the start; the bytes
/// before are read and dropped, never held.
fn slice(stream: ByteStream, skip: u64, len: u64) -> ByteStream {
    let chunks = futures::stream::unfold(
        (stream, skip, len),
        |(mut stream, mut skip, mut left)| async move {
            use futures::StreamExt;
            while left > 0 {
                let mut chunk = match stream.next().await? {
                    Ok(chunk) => chunk,
                    Err(err) => return Some((Err(err), (stream, 0, 0))),
                };
                let chunk_len = chunk.len() as u64;
                if skip >= chunk_len {
                    skip -= chunk_len;
                    continue;
                }
                let from = usize::try_from(skip).unwrap_or(usize::MAX);
                skip = 0;
                let _ = chunk.split_to(from);
                let keep = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
                chunk.truncate(keep);
                left -= keep as u64;
                return Some((Ok(chunk), (stream, skip, left)));
            }
            None
        },
    );
    Box::pin(chunks)
}

/// Watches a streamed upload's body: counts its bytes, cuts it at `server.max_upload_bytes`, and
/// tells a provider's failure apart from the client's (a body over the limit is 413; a body the
/// client broke off is 400, whatever the provider made of it).
pub(crate) struct UploadMeter {
    limit: u64,
    state: std::sync::Arc<std::sync::Mutex<UploadState>>,
}

#[derive(Default)]
struct UploadState {
    bytes: u64,
    over_limit: bool,
    broken: Option<String>,
}

impl UploadMeter {
    /// Refuses at once a body whose announced `length` is over `limit` (`0`: none).
    pub(crate) fn new(limit: u64, length: Option<u64>) -> Result<Self, Error> {
        if limit > 0 && length.is_some_and(|length| length > limit) {
            return Err(Error::UploadTooLarge { limit_bytes: limit });
        }
        Ok(UploadMeter {
            limit,
            state: std::sync::Arc::default(),
        })
    }

    pub(crate) fn watch(&self, body: ByteStream) -> ByteStream {
        use futures::StreamExt;
        let state = std::sync::Arc::clone(&self.state);
        let limit = self.limit;
        Box::pin(body.map(move |chunk| {
            let mut state = state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match chunk {
                Ok(chunk) => {
                    state.bytes += chunk.len() as u64;
                    if limit > 0 && state.bytes > limit {
                        state.over_limit = true;
                        return Err(ProviderError::failed("the upload is over its limit"));
                    }
                    Ok(chunk)
                }
                Err(err) => {
                    state.broken = Some(err.to_string());
                    Err(err)
                }
            }
        }))
    }

    /// The size written, or why not.
    pub(crate) fn finish(&self, written: Result<(), Error>) -> Result<u64, Error> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.over_limit {
            return Err(Error::UploadTooLarge {
                limit_bytes: self.limit,
            });
        }
        if let Some(broken) = &state.broken {
            return Err(Error::invalid(
                "body",
                format!("the upload broke off after {} bytes: {broken}", state.bytes),
            ));
        }
        written.map(|()| state.bytes)
    }
}

const WRITE_FILE: Operation = Operation::new(Action::WriteFiles, Capability::Files, "write file");
const READ_ARCHIVE: Operation =
    Operation::new(Action::ReadFiles, Capability::Files, "read archive");
const WRITE_ARCHIVE: Operation =
    Operation::new(Action::WriteFiles, Capability::Files, "extract archive");
const READ_FILE: Operation = Operation::new(Action::ReadFiles, Capability::Files, "read file");
const DELETE_FILE: Operation = Operation::new(Action::WriteFiles, Capability::Files, "delete file");
const LIST_FILES: Operation = Operation::new(Action::ReadFiles, Capability::Files, "list files");
const MOVE_FILE: Operation = Operation::new(Action::WriteFiles, Capability::Files, "move file");
const CHMOD: Operation = Operation::new(Action::WriteFiles, Capability::Files, "chmod");
const STAT: Operation = Operation::new(Action::ReadFiles, Capability::Files, "stat");
const GLOB: Operation = Operation::new(Action::ReadFiles, Capability::Files, "glob");
const READ_LOGS: Operation = Operation::new(Action::ReadLogs, Capability::Console, "read logs");

/// The content of a `POST /files` write, decoded.
fn decoded(content: &str, encoding: Option<&str>) -> Result<Bytes, Error> {
    Ok(match ContentEncoding::parse(encoding)? {
        ContentEncoding::Utf8 => Bytes::copy_from_slice(content.as_bytes()),
        ContentEncoding::Base64 => {
            use base64::Engine;
            Bytes::from(
                base64::engine::general_purpose::STANDARD
                    .decode(content.trim())
                    .map_err(|e| Error::invalid("content", format!("invalid base64: {e}")))?,
            )
        }
    })
}

impl ControlPlane {
    fn publish_file(&self, on: &Target, payload: EventPayload) {
        self.events()
            .publish_in(&on.sandbox.tenant_id, Some(on.id()), payload);
    }

    /// `POST /files`: writes `content` (decoded) with `mode` (octal text, default 0644).
    pub async fn write_file(
        &self,
        principal: &Principal,
        id: &SandboxId,
        path: &str,
        content: &str,
        mode: Option<&str>,
        encoding: Option<&str>,
    ) -> Result<(), Error> {
        let input = written_file(path, mode)
            .and_then(|(path, mode)| Ok((path, mode, decoded(content, encoding)?)));
        self.on_running(
            principal,
            id,
            WRITE_FILE,
            input,
            async |on, (path, mode, bytes)| {
                let size = bytes.len() as u64;
                on.provider
                    .write_file(on.id(), &path, mode, Upload::bytes(bytes))
                    .await?;
                self.publish_file(on, EventPayload::FileWritten(file_data(&path, Some(size))));
                Ok(())
            },
        )
        .await
    }

    /// `PUT /files`: streams `body` (`length` bytes when the client announced it) into the file
    /// at `path`, which changes only once every byte has arrived; answers the size written.
    pub async fn upload_file(
        &self,
        principal: &Principal,
        id: &SandboxId,
        path: &str,
        mode: Option<&str>,
        body: ByteStream,
        length: Option<u64>,
    ) -> Result<u64, Error> {
        let limit = self.config().server.max_upload_bytes;
        let input = written_file(path, mode)
            .and_then(|(path, mode)| Ok((path, mode, UploadMeter::new(limit, length)?)));
        self.on_running(
            principal,
            id,
            WRITE_FILE,
            input,
            async |on, (path, mode, meter)| {
                let upload = Upload::stream(meter.watch(body), length);
                let written = on.provider.write_file(on.id(), &path, mode, upload).await;
                let size = meter.finish(written.map_err(|e| on.failure(e)))?;
                self.publish_file(on, EventPayload::FileWritten(file_data(&path, Some(size))));
                Ok(size)
            },
        )
        .await
    }

    /// `GET /files/archive`: directory `dir` as a tar stream, names relative to it.
    pub async fn read_archive(
        &self,
        principal: &Principal,
        id: &SandboxId,
        dir: &str,
    ) -> Result<ByteStream, Error> {
        let input = sandbox_path("path", dir);
        self.on_running(principal, id, READ_ARCHIVE, input, async |on, dir| {
            let stream = on.provider.read_archive(on.id(), &dir).await?;
            self.publish_file(on, EventPayload::FileRead(file_data(&dir, None)));
            // The answer has begun: a failure now can only break the stream off, which the API
            // passes on by closing the connection (never a clean, short tar); say why here.
            let (logged_id, logged_dir) = (on.id().clone(), dir.to_string());
            let stream: ByteStream = Box::pin(futures::TryStreamExt::inspect_err(
                stream,
                move |err| {
                    tracing::warn!(sandbox_id = %logged_id, path = %logged_dir, error = %err, "the archive broke off mid-stream; the client sees an incomplete transfer");
                },
            ));
            Ok(stream)
        })
        .await
    }

    /// `PUT /files/archive`: extracts the tar stream `body` into `dir` (created when missing),
    /// refusing (400, naming the entry) any entry that would leave it; answers the entries
    /// written.
    pub async fn write_archive(
        &self,
        principal: &Principal,
        id: &SandboxId,
        dir: &str,
        body: ByteStream,
        length: Option<u64>,
    ) -> Result<u64, Error> {
        let limit = self.config().server.max_upload_bytes;
        let input =
            sandbox_path("path", dir).and_then(|dir| Ok((dir, UploadMeter::new(limit, length)?)));
        self.on_running(
            principal,
            id,
            WRITE_ARCHIVE,
            input,
            async |on, (dir, meter)| {
                let (archive, watch) = svc_provider::archive::checked(meter.watch(body), &dir);
                let written = on.provider.write_archive(on.id(), &dir, archive).await;
                let report = watch.report();
                let written = match report.refused {
                    Some(refusal) => Err(Error::invalid("archive", refusal)),
                    None => written.map_err(|e| on.failure(e)),
                };
                let size = meter.finish(written)?;
                self.publish_file(on, EventPayload::FileWritten(file_data(&dir, Some(size))));
                Ok(report.entries)
            },
        )
        .await
    }

    /// `GET /files`: the file's bytes as a stream, or the part a `Range` header names.
    pub async fn read_file(
        &self,
        principal: &Principal,
        id: &SandboxId,
        path: &str,
        range: Option<&str>,
    ) -> Result<Download, Error> {
        let input = sandbox_path("path", path);
        self.on_running(principal, id, READ_FILE, input, async |on, path| {
            // A range needs the size; a whole file does not (no extra round trip).
            let (size, answer) = match range {
                Some(header) => {
                    let info = on.provider.stat(on.id(), &path).await?;
                    if info.is_dir {
                        return Err(ProviderError::InvalidRequest {
                            message: format!("{path}: is a directory"),
                        }
                        .into());
                    }
                    (
                        Some(info.size),
                        RangeAnswer::for_header(Some(header), info.size),
                    )
                }
                None => (None, RangeAnswer::Whole),
            };
            let stream = match answer {
                RangeAnswer::Unsatisfiable => Box::pin(futures::stream::empty()),
                RangeAnswer::Whole => on.provider.read_file(on.id(), &path).await?,
                RangeAnswer::Partial { start, end } => slice(
                    on.provider.read_file(on.id(), &path).await?,
                    start,
                    end - start + 1,
                ),
            };
            if answer != RangeAnswer::Unsatisfiable {
                self.publish_file(on, EventPayload::FileRead(file_data(&path, None)));
            }
            Ok(Download {
                stream,
                size,
                answer,
            })
        })
        .await
    }

    /// `DELETE /files`.
    pub async fn delete_file(
        &self,
        principal: &Principal,
        id: &SandboxId,
        path: &str,
        recursive: bool,
    ) -> Result<(), Error> {
        let input = non_root_path("path", path, "refusing to delete /");
        self.on_running(principal, id, DELETE_FILE, input, async |on, path| {
            Ok(on.provider.delete_file(on.id(), &path, recursive).await?)
        })
        .await
    }

    /// `GET /files/list`.
    pub async fn list_files(
        &self,
        principal: &Principal,
        id: &SandboxId,
        path: &str,
    ) -> Result<Vec<FileInfo>, Error> {
        let input = sandbox_path("path", path);
        self.on_running(principal, id, LIST_FILES, input, async |on, path| {
            Ok(on.provider.list_dir(on.id(), &path).await?)
        })
        .await
    }

    /// `POST /files/move`.
    pub async fn move_file(
        &self,
        principal: &Principal,
        id: &SandboxId,
        old_path: &str,
        new_path: &str,
    ) -> Result<(), Error> {
        let input = non_root_path("old_path", old_path, "/ cannot be moved").and_then(|from| {
            Ok((
                from,
                non_root_path("new_path", new_path, "nothing can be moved onto /")?,
            ))
        });
        self.on_running(principal, id, MOVE_FILE, input, async |on, (from, to)| {
            Ok(on.provider.move_path(on.id(), &from, &to).await?)
        })
        .await
    }

    /// `POST /files/chmod`.
    pub async fn chmod_file(
        &self,
        principal: &Principal,
        id: &SandboxId,
        path: &str,
        mode: &str,
    ) -> Result<(), Error> {
        let input = sandbox_path("path", path).and_then(|path| {
            Ok((
                path,
                parse_mode(mode).map_err(|m| Error::invalid("mode", m))?,
            ))
        });
        self.on_running(principal, id, CHMOD, input, async |on, (path, mode)| {
            Ok(on.provider.chmod(on.id(), &path, mode).await?)
        })
        .await
    }

    /// `GET /files/stat`.
    pub async fn stat_file(
        &self,
        principal: &Principal,
        id: &SandboxId,
        path: &str,
    ) -> Result<FileInfo, Error> {
        let input = sandbox_path("path", path);
        self.on_running(principal, id, STAT, input, async |on, path| {
            Ok(on.provider.stat(on.id(), &path).await?)
        })
        .await
    }

    /// `GET /files/glob`.
    pub async fn glob_files(
        &self,
        principal: &Principal,
        id: &SandboxId,
        pattern: &str,
    ) -> Result<Vec<String>, Error> {
        let input = SandboxGlob::new(pattern).map_err(|m| Error::invalid("pattern", m));
        self.on_running(principal, id, GLOB, input, async |on, pattern| {
            Ok(on.provider.glob(on.id(), &pattern).await?)
        })
        .await
    }

    /// `GET /logs`: the most recent `lines` console or log lines.
    pub async fn sandbox_logs(
        &self,
        principal: &Principal,
        id: &SandboxId,
        lines: usize,
    ) -> Result<Vec<String>, Error> {
        self.on_running(principal, id, READ_LOGS, Ok(()), async |on, ()| {
            Ok(on.provider.logs(on.id(), lines).await?)
        })
        .await
    }
}
