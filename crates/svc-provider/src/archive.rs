//! Directory archives coming in (`PUT /files/archive`, decisions §9): a tar stream is checked
//! on its way to the provider, entry by entry, and never reaches it past the first entry that
//! would touch anything outside the target directory: an absolute name, a name whose `..`
//! components leave the directory, a symbolic or hard link whose target leaves it, or a device
//! or FIFO. Every provider extracts the same checked stream, so the rules live here once.
//!
//! The check passes bytes through as they come, holding back only an entry's header (and the
//! PAX or GNU long-name records before it) until the entry is accepted; file contents stream.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use svc_core::path::SandboxPath;

use crate::{ByteStream, ProviderError};

const BLOCK: usize = 512;
/// The largest PAX or GNU long-name record accepted (they hold names, not data).
const MAX_EXTENSION: u64 = 1 << 20;

/// What the check saw: entries accepted so far, and the refusal that stopped it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Entries passed to the provider (files, directories, links).
    pub entries: u64,
    /// Why the archive was refused, naming the entry.
    pub refused: Option<String>,
}

/// The report of a [`checked`] stream, readable once the provider is done with it.
#[derive(Debug, Clone, Default)]
pub struct ArchiveWatch(Arc<Mutex<ArchiveReport>>);

impl ArchiveWatch {
    /// The report now.
    pub fn report(&self) -> ArchiveReport {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// `archive` as extracted into `dir`, checked: the stream fails with
/// [`ProviderError::InvalidRequest`] (naming the entry) just before the first refused entry.
pub fn checked(archive: ByteStream, dir: &SandboxPath) -> (ByteStream, ArchiveWatch) {
    let watch = ArchiveWatch::default();
    let report = watch.clone();
    let check = Check::new(dir.clone());
    let stream = futures::stream::unfold(
        (archive, check, std::collections::VecDeque::new(), false),
        move |(mut archive, mut check, mut ready, mut done)| {
            let report = report.clone();
            async move {
                loop {
                    if let Some(item) = ready.pop_front() {
                        return Some((item, (archive, check, ready, done)));
                    }
                    if done {
                        return None;
                    }
                    let mut out = Vec::new();
                    let outcome = match archive.next().await {
                        Some(Ok(chunk)) => check.feed(chunk, &mut out),
                        Some(Err(err)) => {
                            done = true;
                            ready.push_back(Err(err));
                            continue;
                        }
                        None => {
                            done = true;
                            check.finish()
                        }
                    };
                    let mut shared = report.0.lock().unwrap_or_else(PoisonError::into_inner);
                    shared.entries = check.entries;
                    ready.extend(out.into_iter().map(Ok));
                    if let Err(refusal) = outcome {
                        shared.refused = Some(refusal.clone());
                        done = true;
                        ready.push_back(Err(ProviderError::InvalidRequest { message: refusal }));
                    }
                }
            }
        },
    );
    (Box::pin(stream), watch)
}

/// `name` as a path relative to the archive's directory, `..` resolved lexically; an empty
/// string for the directory itself. Absolute names and names that leave it are refused.
pub fn relative_name(name: &str) -> Result<String, String> {
    if name.starts_with('/') {
        return Err(format!("{}: absolute names are not allowed", quoted(name)));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("{}: the name leaves the directory", quoted(name)));
                }
            }
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// A symbolic link's target as a path relative to the link's own directory, checked to stay in
/// the archive's directory `dir` (an absolute target is a sandbox path and must lie in `dir`).
pub fn relative_link_target(dir: &SandboxPath, name: &str, target: &str) -> Result<String, String> {
    let refused = || {
        format!(
            "{}: the link target {} leaves the directory",
            quoted(name),
            quoted(target)
        )
    };
    let link = relative_name(name)?;
    let mut from: Vec<&str> = link.split('/').filter(|p| !p.is_empty()).collect();
    from.pop();
    let resolved = if target.starts_with('/') {
        let target = SandboxPath::parse(target).map_err(|_| refused())?;
        let inside = if dir.is_root() {
            Some(target.relative().to_owned())
        } else if target == *dir {
            Some(String::new())
        } else {
            target
                .as_str()
                .strip_prefix(&format!("{dir}/"))
                .map(str::to_owned)
        };
        inside.ok_or_else(refused)?
    } else {
        let mut parts = from.clone();
        for part in target.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop().ok_or_else(refused)?;
                }
                part => parts.push(part),
            }
        }
        parts.join("/")
    };
    // Relative to the link's directory: up out of it, then down to the target.
    let to: Vec<&str> = resolved.split('/').filter(|p| !p.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path: Vec<&str> = vec![".."; from.len() - common];
    path.extend(&to[common..]);
    Ok(if path.is_empty() {
        ".".to_owned()
    } else {
        path.join("/")
    })
}

fn quoted(name: &str) -> String {
    format!("entry {}", svc_core::error::echo(name))
}

fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

enum State {
    /// Reading a 512-byte header.
    Header,
    /// Reading a PAX or GNU long-name record's data, then its padding.
    Extension {
        kind: tar::EntryType,
        data: Vec<u8>,
        left: u64,
        pad: u64,
    },
    /// Passing an entry's data and padding through.
    Body { left: u64 },
    /// Past the end-of-archive block: the rest passes through.
    End,
}

struct Check {
    dir: SandboxPath,
    state: State,
    /// Header bytes held back until their entry is accepted.
    held: BytesMut,
    /// The header block being read.
    block: BytesMut,
    long_name: Option<String>,
    long_link: Option<String>,
    pax_size: Option<u64>,
    entries: u64,
}

impl Check {
    fn new(dir: SandboxPath) -> Self {
        Check {
            dir,
            state: State::Header,
            held: BytesMut::new(),
            block: BytesMut::new(),
            long_name: None,
            long_link: None,
            pax_size: None,
            entries: 0,
        }
    }

    fn feed(&mut self, mut chunk: Bytes, out: &mut Vec<Bytes>) -> Result<(), String> {
        while !chunk.is_empty() {
            match &mut self.state {
                State::End => {
                    out.push(chunk.split_to(chunk.len()));
                }
                State::Body { left } => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(chunk.len());
                    out.push(chunk.split_to(take));
                    *left -= take as u64;
                    if *left == 0 {
                        self.state = State::Header;
                    }
                }
                State::Extension {
                    kind,
                    data,
                    left,
                    pad,
                } => {
                    let want = usize::try_from(*left + *pad).unwrap_or(usize::MAX);
                    let piece = chunk.split_to(want.min(chunk.len()));
                    self.held.extend_from_slice(&piece);
                    let into_data = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(piece.len());
                    data.extend_from_slice(&piece[..into_data]);
                    *left -= into_data as u64;
                    *pad -= (piece.len() - into_data) as u64;
                    if *left == 0 && *pad == 0 {
                        let (kind, data) = (*kind, std::mem::take(data));
                        self.extension(kind, &data);
                        self.state = State::Header;
                    }
                }
                State::Header => {
                    let piece = chunk.split_to((BLOCK - self.block.len()).min(chunk.len()));
                    self.block.extend_from_slice(&piece);
                    self.held.extend_from_slice(&piece);
                    if self.block.len() == BLOCK {
                        let block = self.block.split();
                        self.header(&block)?;
                        if !matches!(self.state, State::Extension { .. }) {
                            out.push(self.held.split().freeze());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The stream ended: fine at an entry boundary, refused inside an entry.
    fn finish(&mut self) -> Result<(), String> {
        match self.state {
            State::Header if self.block.is_empty() => Ok(()),
            State::End => Ok(()),
            _ => Err("the archive ends in the middle of an entry".to_owned()),
        }
    }

    fn extension(&mut self, kind: tar::EntryType, data: &[u8]) {
        let text = |data: &[u8]| {
            String::from_utf8_lossy(data)
                .trim_end_matches('\0')
                .to_owned()
        };
        if kind.is_gnu_longname() {
            self.long_name = Some(text(data));
        } else if kind.is_gnu_longlink() {
            self.long_link = Some(text(data));
        } else if kind.is_pax_local_extensions() {
            for record in tar::PaxExtensions::new(data).flatten() {
                match record.key() {
                    Ok("path") => self.long_name = record.value().ok().map(str::to_owned),
                    Ok("linkpath") => self.long_link = record.value().ok().map(str::to_owned),
                    Ok("size") => self.pax_size = record.value().ok().and_then(|v| v.parse().ok()),
                    _ => {}
                }
            }
        }
    }

    fn header(&mut self, block: &[u8]) -> Result<(), String> {
        if block.iter().all(|b| *b == 0) {
            self.state = State::End;
            return Ok(());
        }
        let header = tar::Header::from_byte_slice(block);
        let kind = header.entry_type();
        let size = header
            .entry_size()
            .map_err(|e| format!("an entry header is not valid tar: {e}"))?;
        if kind.is_pax_local_extensions()
            || kind.is_pax_global_extensions()
            || kind.is_gnu_longname()
            || kind.is_gnu_longlink()
        {
            if size > MAX_EXTENSION {
                return Err(format!("an extended header of {size} bytes is too large"));
            }
            self.state = State::Extension {
                kind,
                data: Vec::new(),
                left: size,
                pad: padding(size),
            };
            return Ok(());
        }
        let name = self
            .long_name
            .take()
            .unwrap_or_else(|| String::from_utf8_lossy(&header.path_bytes()).into_owned());
        let link = self.long_link.take().or_else(|| {
            header
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
        });
        let size = self.pax_size.take().unwrap_or(size);
        relative_name(&name)?;
        if kind.is_symlink() {
            relative_link_target(&self.dir, &name, link.as_deref().unwrap_or_default())?;
        } else if kind.is_hard_link() {
            let target = link.unwrap_or_default();
            relative_name(&target).map_err(|_| {
                format!(
                    "{}: the link target {} leaves the directory",
                    quoted(&name),
                    quoted(&target)
                )
            })?;
        } else if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
            return Err(format!(
                "{}: devices and FIFOs are not allowed",
                quoted(&name)
            ));
        }
        self.entries += 1;
        let left = size + padding(size);
        self.state = if left == 0 {
            State::Header
        } else {
            State::Body { left }
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(path: &str) -> SandboxPath {
        SandboxPath::parse(path).unwrap()
    }

    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        build(&mut builder);
        builder.into_inner().unwrap()
    }

    fn file(builder: &mut tar::Builder<Vec<u8>>, name: &str, content: &[u8]) {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, name, content).unwrap();
    }

    /// A raw header naming `name` exactly (the builder refuses `..` and absolute names).
    fn raw_entry(name: &str, kind: tar::EntryType, link: &str) -> Vec<u8> {
        let mut header = tar::Header::new_old();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        header.set_entry_type(kind);
        header.set_size(0);
        header.set_mode(0o644);
        header.set_cksum();
        header.as_bytes().to_vec()
    }

    async fn run(bytes: Vec<u8>, chunk: usize, into: &str) -> (Vec<u8>, ArchiveReport, bool) {
        let pieces: Vec<Result<Bytes, ProviderError>> = bytes
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let (stream, watch) = checked(Box::pin(futures::stream::iter(pieces)), &dir(into));
        let items: Vec<_> = stream.collect().await;
        let failed = items.iter().any(Result::is_err);
        let passed = items
            .into_iter()
            .filter_map(Result::ok)
            .flat_map(|b| b.to_vec())
            .collect();
        (passed, watch.report(), failed)
    }

    #[tokio::test]
    async fn good_archives_pass_through_unchanged_in_any_chunking() {
        let long = format!("{}/file", "d".repeat(150));
        let bytes = archive(|b| {
            file(b, "a.txt", b"hello");
            file(b, "sub/b.txt", &[7u8; 3000]);
            file(b, &long, b"deep");
            let mut link = tar::Header::new_gnu();
            link.set_entry_type(tar::EntryType::Symlink);
            link.set_size(0);
            b.append_link(&mut link, "sub/l", "../a.txt").unwrap();
            let mut abs = tar::Header::new_gnu();
            abs.set_entry_type(tar::EntryType::Symlink);
            abs.set_size(0);
            b.append_link(&mut abs, "abs", "/work/x/a.txt").unwrap();
        });
        // `..` that stays inside is fine.
        let mut bytes = bytes[..bytes.len() - 2 * BLOCK].to_vec();
        bytes.extend_from_slice(&raw_entry("sub/../c", tar::EntryType::Regular, ""));
        bytes.extend_from_slice(&[0u8; 2 * BLOCK]);
        for chunk in [1, 100, 512, 513, 4096, 1 << 20] {
            let (passed, report, failed) = run(bytes.clone(), chunk, "/work/x").await;
            assert!(!failed, "chunk {chunk}: {report:?}");
            assert!(passed == bytes, "chunk {chunk}");
            assert_eq!(report.entries, 6);
        }
    }

    #[tokio::test]
    async fn escaping_entries_are_refused_before_they_pass() {
        let cases = [
            (
                raw_entry("../x", tar::EntryType::Regular, ""),
                "leaves the directory",
            ),
            (
                raw_entry("a/../../x", tar::EntryType::Regular, ""),
                "leaves the directory",
            ),
            (raw_entry("/etc/x", tar::EntryType::Regular, ""), "absolute"),
            (
                raw_entry("l", tar::EntryType::Symlink, "../outside"),
                "link target",
            ),
            (
                raw_entry("l", tar::EntryType::Symlink, "/etc"),
                "link target",
            ),
            (raw_entry("h", tar::EntryType::Link, "../x"), "link target"),
            (raw_entry("dev", tar::EntryType::Char, ""), "devices"),
        ];
        for (bad, why) in cases {
            let good = archive(|b| file(b, "ok.txt", b"fine"));
            let mut bytes = good[..good.len() - 2 * BLOCK].to_vec();
            let before = bytes.len();
            bytes.extend_from_slice(&bad);
            bytes.extend_from_slice(&[0u8; 2 * BLOCK]);
            for chunk in [1, 512, 1 << 20] {
                let (passed, report, failed) = run(bytes.clone(), chunk, "/work").await;
                assert!(failed, "{why}");
                assert!(
                    report.refused.as_deref().unwrap().contains(why),
                    "{report:?}"
                );
                assert_eq!(
                    passed.len(),
                    before,
                    "nothing of the bad entry passed ({why})"
                );
                assert_eq!(report.entries, 1);
            }
        }
    }

    #[tokio::test]
    async fn a_pax_name_is_the_name_checked() {
        let mut pax = Vec::new();
        let record = "path=../../evil\n";
        let line = format!("{} {record}", record.len() + 3);
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::XHeader);
        header.set_size(line.len() as u64);
        header.set_path("PaxHeader").unwrap();
        header.set_cksum();
        pax.extend_from_slice(header.as_bytes());
        pax.extend_from_slice(line.as_bytes());
        pax.resize(pax.len() + padding(line.len() as u64) as usize, 0);
        pax.extend_from_slice(&raw_entry("innocent", tar::EntryType::Regular, ""));
        let (passed, report, failed) = run(pax, 512, "/").await;
        assert!(failed && passed.is_empty(), "{report:?}");
        assert!(report.refused.unwrap().contains("evil"));
    }

    #[test]
    fn link_targets_become_relative_to_the_link() {
        let d = dir("/w");
        assert_eq!(relative_link_target(&d, "a/l", "../b").unwrap(), "../b");
        assert_eq!(relative_link_target(&d, "a/l", "/w/b/c").unwrap(), "../b/c");
        assert_eq!(relative_link_target(&d, "l", "/w").unwrap(), ".");
        assert!(relative_link_target(&d, "l", "/wx").is_err());
        assert!(relative_link_target(&d, "a/l", "../../x").is_err());
        assert_eq!(
            relative_link_target(&dir("/"), "l", "/etc/x").unwrap(),
            "etc/x"
        );
        assert_eq!(relative_name("./a/./b/").unwrap(), "a/b");
        assert_eq!(relative_name("./").unwrap(), "");
    }
}
