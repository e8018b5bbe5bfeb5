//! Just enough tar for the archive API: an upload archive (a file and the directories missing
//! above it), built in memory for small content or streamed around the content for large
//! content, and a streaming reader of the first entry of a download, so reading a 500 MiB file
//! never holds it whole.

use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::{ByteStream, ProviderError};

const BLOCK: usize = 512;

fn padding(size: u64) -> usize {
    let rest = (size % BLOCK as u64) as usize;
    if rest == 0 {
        0
    } else {
        BLOCK - rest
    }
}

fn tar_error(message: impl std::fmt::Display) -> ProviderError {
    ProviderError::failed(format!("reading the engine's archive: {message}"))
}

fn build_error(e: std::io::Error) -> ProviderError {
    ProviderError::io("building the upload", e)
}

fn header(kind: tar::EntryType, mode: u32, size: u64, mtime: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(mtime);
    header.set_uid(0);
    header.set_gid(0);
    header
}

/// A builder holding `dirs` (relative, parents first, mode 0755).
fn with_dirs(dirs: &[String], mtime: u64) -> Result<tar::Builder<Vec<u8>>, ProviderError> {
    let mut builder = tar::Builder::new(Vec::with_capacity(2048));
    for dir in dirs {
        let mut header = header(tar::EntryType::Directory, 0o755, 0, mtime);
        builder
            .append_data(&mut header, format!("{dir}/"), std::io::empty())
            .map_err(build_error)?;
    }
    Ok(builder)
}

/// An archive of just `dirs`.
pub(super) fn dirs_archive(dirs: &[String], mtime: u64) -> Result<Bytes, ProviderError> {
    with_dirs(dirs, mtime)?
        .into_inner()
        .map(Bytes::from)
        .map_err(build_error)
}

/// The start of an upload archive: `dirs`, then the header of the file at `file` with `mode`
/// and `size`, whose bytes come next.
fn archive_head(
    dirs: &[String],
    file: &str,
    mode: u32,
    size: u64,
    mtime: u64,
) -> Result<Vec<u8>, ProviderError> {
    let mut builder = with_dirs(dirs, mtime)?;
    // With no data behind it the builder writes the header (and any long-name record) alone.
    let mut header = header(tar::EntryType::Regular, mode, size, mtime);
    builder
        .append_data(&mut header, file, std::io::empty())
        .map_err(build_error)?;
    let mut head = builder.into_inner().map_err(build_error)?;
    // `into_inner` ends the archive; the file's bytes and the end come later.
    head.truncate(head.len() - 2 * BLOCK);
    Ok(head)
}

/// The end of an archive whose last entry held `size` bytes.
fn archive_tail(size: u64) -> Bytes {
    Bytes::from(vec![0u8; padding(size) + 2 * BLOCK])
}

/// Builds an archive holding `dirs` and then the file at `file` with `mode` and `content`.
pub(super) fn upload_archive(
    dirs: &[String],
    file: &str,
    mode: u32,
    content: &[u8],
    mtime: u64,
) -> Result<Bytes, ProviderError> {
    let size = content.len() as u64;
    let mut archive = archive_head(dirs, file, mode, size, mtime)?;
    archive.extend_from_slice(content);
    archive.extend_from_slice(&archive_tail(size));
    Ok(Bytes::from(archive))
}

/// The same archive streamed around `content` of `size` bytes (an [`crate::Upload`] with its
/// size, which fails rather than end short or run long). A failing stream fails the request
/// body, so the engine never sees a complete archive with the wrong bytes.
pub(super) fn streamed_archive(
    dirs: &[String],
    file: &str,
    mode: u32,
    size: u64,
    content: ByteStream,
    mtime: u64,
) -> Result<impl futures::Stream<Item = std::io::Result<Bytes>> + Send + 'static, ProviderError> {
    let head = Bytes::from(archive_head(dirs, file, mode, size, mtime)?);
    let body = content.map(|chunk| chunk.map_err(std::io::Error::other));
    let tail = futures::stream::once(async move { Ok(archive_tail(size)) });
    Ok(futures::stream::once(async move { Ok(head) })
        .chain(body)
        .chain(tail))
}

/// What kind of entry a download starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum EntryKind {
    File,
    Directory,
    Symlink(String),
    Other,
}

/// The first real entry's header.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) kind: EntryKind,
    pub(super) size: u64,
}

/// Reads a tar stream incrementally.
pub(super) struct TarReader {
    stream: BoxStream<'static, Result<Bytes, ProviderError>>,
    buffer: BytesMut,
}

impl TarReader {
    pub(super) fn new(stream: BoxStream<'static, Result<Bytes, ProviderError>>) -> Self {
        TarReader {
            stream,
            buffer: BytesMut::new(),
        }
    }

    async fn fill(&mut self, wanted: usize) -> Result<(), ProviderError> {
        while self.buffer.len() < wanted {
            match self.stream.next().await {
                Some(chunk) => self.buffer.extend_from_slice(&chunk?),
                None => return Err(tar_error("archive ended early")),
            }
        }
        Ok(())
    }

    async fn take(&mut self, size: usize) -> Result<Bytes, ProviderError> {
        self.fill(size).await?;
        Ok(self.buffer.split_to(size).freeze())
    }

    /// The first entry that is not a PAX or GNU long-name record; `None` for an empty archive.
    pub(super) async fn first_entry(&mut self) -> Result<Option<Entry>, ProviderError> {
        let mut pax_size = None;
        let mut long_link = None;
        loop {
            if self.buffer.len() < BLOCK {
                match self.fill(BLOCK).await {
                    Ok(()) => {}
                    Err(_) if self.buffer.is_empty() => return Ok(None),
                    Err(err) => return Err(err),
                }
            }
            let block = self.buffer.split_to(BLOCK);
            if block.iter().all(|b| *b == 0) {
                return Ok(None);
            }
            let header = tar::Header::from_byte_slice(&block);
            let size = header.entry_size().map_err(tar_error)?;
            let entry_type = header.entry_type();
            if entry_type.is_pax_local_extensions() || entry_type.is_pax_global_extensions() {
                let data = self.take(usize::try_from(size).map_err(tar_error)?).await?;
                self.take(padding(size)).await?;
                for record in tar::PaxExtensions::new(&data).flatten() {
                    match record.key() {
                        Ok("size") => pax_size = record.value().ok().and_then(|v| v.parse().ok()),
                        Ok("linkpath") => long_link = record.value().ok().map(str::to_owned),
                        _ => {}
                    }
                }
                continue;
            }
            if entry_type.is_gnu_longname() || entry_type.is_gnu_longlink() {
                let data = self.take(usize::try_from(size).map_err(tar_error)?).await?;
                self.take(padding(size)).await?;
                if entry_type.is_gnu_longlink() {
                    let text = String::from_utf8_lossy(&data);
                    long_link = Some(text.trim_end_matches('\0').to_owned());
                }
                continue;
            }
            let kind = if entry_type.is_dir() {
                EntryKind::Directory
            } else if entry_type.is_symlink() {
                let target = long_link.take().or_else(|| {
                    header
                        .link_name()
                        .ok()
                        .flatten()
                        .map(|p| p.to_string_lossy().into_owned())
                });
                EntryKind::Symlink(target.unwrap_or_default())
            } else if entry_type.is_file() {
                EntryKind::File
            } else {
                EntryKind::Other
            };
            return Ok(Some(Entry {
                kind,
                size: pax_size.unwrap_or(size),
            }));
        }
    }

    /// The body of the entry just read: exactly `size` bytes, streamed.
    pub(super) fn body(self, size: u64) -> ByteStream {
        let state = (self, size);
        Box::pin(futures::stream::unfold(
            state,
            |(mut reader, remaining)| async move {
                if remaining == 0 {
                    return None;
                }
                if reader.buffer.is_empty() {
                    match reader.stream.next().await {
                        Some(Ok(chunk)) => reader.buffer.extend_from_slice(&chunk),
                        Some(Err(err)) => return Some((Err(err), (reader, 0))),
                        None => return Some((Err(tar_error("archive ended early")), (reader, 0))),
                    }
                }
                let take = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(reader.buffer.len());
                let chunk = reader.buffer.split_to(take).freeze();
                Some((Ok(chunk), (reader, remaining - take as u64)))
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(bytes: &Bytes, size: usize) -> BoxStream<'static, Result<Bytes, ProviderError>> {
        let pieces: Vec<_> = bytes
            .chunks(size)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        Box::pin(futures::stream::iter(pieces))
    }

    #[tokio::test]
    async fn reads_back_what_it_builds_in_any_chunking() {
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 256) as u8).collect();
        let archive =
            upload_archive(&["a".into(), "a/b".into()], "a/b/f.bin", 0o640, &content, 0).unwrap();
        // Skip the two directory entries the way the engine would never send them: read a
        // single-file archive instead.
        let single = upload_archive(&[], "f.bin", 0o640, &content, 0).unwrap();
        for chunk_size in [1, 7, 512, 4096, 100_000] {
            let mut reader = TarReader::new(chunks(&single, chunk_size));
            let entry = reader.first_entry().await.unwrap().unwrap();
            assert_eq!(entry.kind, EntryKind::File);
            assert_eq!(entry.size, 10_000);
            let body: Vec<u8> = reader
                .body(entry.size)
                .map(|c| c.unwrap().to_vec())
                .collect::<Vec<_>>()
                .await
                .concat();
            assert_eq!(body, content, "chunk size {chunk_size}");
        }
        let mut reader = TarReader::new(chunks(&archive, 100));
        let entry = reader.first_entry().await.unwrap().unwrap();
        assert_eq!(entry.kind, EntryKind::Directory);
    }

    #[tokio::test]
    async fn long_names_and_empty_archives() {
        let long = format!("{}/file", "d".repeat(150));
        let archive = upload_archive(&[], &long, 0o644, b"x", 0).unwrap();
        let mut reader = TarReader::new(chunks(&archive, 512));
        let entry = reader.first_entry().await.unwrap().unwrap();
        assert_eq!((entry.kind, entry.size), (EntryKind::File, 1));
        let mut empty = TarReader::new(chunks(&Bytes::from(vec![0u8; 1024]), 512));
        assert!(empty.first_entry().await.unwrap().is_none());
    }
}
