//! File operations as small POSIX shell scripts run through a provider's exec, as a given user.
//! Docker uses them (as root) for what its archive API cannot do (list, delete, move, chmod,
//! glob); pool mode uses all of them as a workspace's own user, so the kernel, not a check
//! beforehand, keeps every operation inside what that user may touch: a symlink into another
//! user's workspace fails like any access the user lacks. They need `sh` and the usual
//! utilities in the image (busybox is enough).

use bytes::Bytes;
use chrono::DateTime;
use futures::StreamExt;
use svc_core::glob::SandboxGlob;
use svc_core::path::SandboxPath;
use svc_core::SandboxId;

use crate::{
    ByteStream, ExecChunk, ExecSession, ExecSpec, ExecUser, FileInfo, Provider, ProviderError,
    StdStream,
};

/// Exit codes of the scripts.
const NOT_FOUND: i32 = 2;
const INVALID: i32 = 3;
const DENIED: i32 = 6;

/// Error text kept from a script's stderr.
const STDERR_LIMIT: usize = 4096;

const LIST: &str = r#"d="$1"
[ -e "$d" ] || { [ -L "$d" ] && exit 6; exit 2; }
[ -d "$d" ] || { echo "not a directory" >&2; exit 3; }
cd "$d" 2>/dev/null || exit 6
for f in * .[!.]* ..?*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  stat -c '%s %f %Y %n' -- "$f" && printf '\0'
done"#;

const STAT: &str = r#"[ -e "$1" ] || { [ -L "$1" ] && exit 6; exit 2; }
stat -L -c '%s %f %Y %n' -- "$1" || exit 6"#;

const DELETE: &str = r#"p="$1"
[ -e "$p" ] || [ -L "$p" ] || exit 2
if [ -d "$p" ] && [ ! -L "$p" ]; then
  if [ "$2" = 1 ]; then rm -rf -- "$p" || exit 6
  else rmdir -- "$p" 2>/dev/null || { [ -n "$(ls -A -- "$p" 2>/dev/null)" ] || exit 6; echo "directory not empty (use recursive=true)" >&2; exit 3; }
  fi
else rm -f -- "$p" || exit 6
fi"#;

const MOVE: &str = r#"[ -e "$1" ] || [ -L "$1" ] || exit 2
mkdir -p -- "$(dirname -- "$2")" || exit 6
if [ -d "$2" ] && [ ! -d "$1" ]; then echo "destination is a directory" >&2; exit 3; fi
mv -f -- "$1" "$2" || exit 6"#;

const CHMOD: &str = r#"[ -e "$1" ] || exit 2
chmod "$2" -- "$1" || exit 6"#;

const FIND: &str = r#"if [ "$2" = 0 ]; then
  { [ -e "$1" ] || [ -L "$1" ]; } && printf '%s\0' "$1"
  exit 0
fi
[ -d "$1" ] || exit 0
if [ -n "$2" ]; then find "$1" -mindepth 1 -maxdepth "$2" -print0 2>/dev/null
else find "$1" -mindepth 1 -print0 2>/dev/null
fi
exit 0"#;

const READ: &str = r#"[ -e "$1" ] || { [ -L "$1" ] && exit 6; exit 2; }
[ -d "$1" ] && { echo "is a directory" >&2; exit 3; }
[ -r "$1" ] || exit 6
exec cat -- "$1""#;

/// `$1` the file, `$2` its mode (octal), `$3` a temporary name beside it: stdin lands in the
/// temporary file, which replaces the file only once complete.
const WRITE: &str = r#"[ -d "$1" ] && { echo "is a directory" >&2; exit 3; }
d=$(dirname -- "$1")
mkdir -p -- "$d" 2>/dev/null || { [ -e "$d" ] && [ ! -d "$d" ] && { echo "a parent is not a directory" >&2; exit 3; }; exit 6; }
t="$d/$3"
cat > "$t" 2>/dev/null || { rm -f -- "$t"; exit 6; }
chmod "$2" -- "$t" && mv -f -- "$t" "$1" || { rm -f -- "$t"; exit 6; }"#;

/// `$1` a directory: streams it as a tar archive, names relative to it.
const ARCHIVE: &str = r#"[ -e "$1" ] || { [ -L "$1" ] && exit 6; exit 2; }
[ -d "$1" ] || { echo "not a directory" >&2; exit 3; }
cd "$1" 2>/dev/null || exit 6
exec tar -cf - ."#;

/// `$1` a directory, created when missing: extracts the tar archive on stdin into it (owners
/// are not restored: the files belong to whoever runs the script).
const EXTRACT: &str = r#"mkdir -p -- "$1" 2>/dev/null || { [ -e "$1" ] && [ ! -d "$1" ] && { echo "not a directory" >&2; exit 3; }; exit 6; }
cd "$1" 2>/dev/null || exit 6
exec tar -xof -"#;

/// File operations in sandbox `id` through `provider`'s exec, as `user` (the provider's
/// default user when `None`).
pub struct ShellFiles<'a> {
    provider: &'a dyn Provider,
    id: &'a SandboxId,
    user: Option<ExecUser>,
    workdir: Option<SandboxPath>,
}

/// What a script printed, and how it ended.
#[derive(Debug)]
pub struct ScriptOutput {
    /// Its exit code.
    pub code: i32,
    /// Everything on stdout.
    pub stdout: Vec<u8>,
    /// The start of stderr (at most 4 KiB).
    pub stderr: Vec<u8>,
}

impl<'a> ShellFiles<'a> {
    /// Operations in `id` as `user`.
    pub fn new(provider: &'a dyn Provider, id: &'a SandboxId, user: Option<ExecUser>) -> Self {
        ShellFiles {
            provider,
            id,
            user,
            workdir: None,
        }
    }

    /// Scripts run in `workdir` instead of the user's default directory.
    pub fn in_dir(self, workdir: SandboxPath) -> Self {
        ShellFiles {
            workdir: Some(workdir),
            ..self
        }
    }

    /// Runs `body` with `args` as `$1`... to its end.
    pub async fn script(&self, body: &str, args: &[&str]) -> Result<ScriptOutput, ProviderError> {
        let ExecSession {
            mut output, exit, ..
        } = self.start(body, args, false).await?;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(chunk) = output.next().await {
            let chunk = chunk?;
            match chunk.stream {
                StdStream::Stdout => stdout.extend_from_slice(&chunk.data),
                StdStream::Stderr => keep_stderr(&mut stderr, &chunk),
            }
        }
        Ok(ScriptOutput {
            code: exit.await?.code,
            stdout,
            stderr,
        })
    }

    async fn start(
        &self,
        body: &str,
        args: &[&str],
        stdin: bool,
    ) -> Result<ExecSession, ProviderError> {
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            body.to_owned(),
            "svc".to_owned(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        self.provider
            .exec(
                self.id,
                ExecSpec {
                    argv,
                    env: std::collections::BTreeMap::new(),
                    workdir: self.workdir.clone(),
                    tty: None,
                    stdin,
                    user: self.user.clone(),
                },
            )
            .await
    }

    /// Runs a script to its end; its stdout, or the error its exit code means.
    async fn run(
        &self,
        path: &SandboxPath,
        body: &str,
        args: &[&str],
    ) -> Result<Vec<u8>, ProviderError> {
        let out = self.script(body, args).await?;
        match out.code {
            0 => Ok(out.stdout),
            code => Err(script_error(path, code, &out.stderr)),
        }
    }

    /// Lists a directory, sorted by name.
    pub async fn list(&self, path: &SandboxPath) -> Result<Vec<FileInfo>, ProviderError> {
        let out = self.run(path, LIST, &[path.as_str()]).await?;
        let mut entries: Vec<FileInfo> = out
            .split(|b| *b == 0)
            .filter_map(|record| {
                let record = record.strip_suffix(b"\n").unwrap_or(record);
                let text = String::from_utf8_lossy(record);
                let (size, mode, mtime, name) = stat_fields(&text)?;
                Some(file_info(name, &path.join(name), size, mode, mtime))
            })
            .collect();
        entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(entries)
    }

    /// Describes one path, following a final symlink.
    pub async fn stat(&self, path: &SandboxPath) -> Result<FileInfo, ProviderError> {
        let out = self.run(path, STAT, &[path.as_str()]).await?;
        let text = String::from_utf8_lossy(&out);
        let (size, mode, mtime, _) = stat_fields(text.trim_end_matches('\n'))
            .ok_or_else(|| ProviderError::failed(format!("{path}: unreadable stat output")))?;
        Ok(file_info(path.file_name(), path, size, mode, mtime))
    }

    /// Deletes a file or directory (non-empty ones only when `recursive`).
    pub async fn delete(&self, path: &SandboxPath, recursive: bool) -> Result<(), ProviderError> {
        let flag = if recursive { "1" } else { "0" };
        self.run(path, DELETE, &[path.as_str(), flag])
            .await
            .map(drop)
    }

    /// Moves a file or directory, creating the destination's parents.
    pub async fn rename(&self, from: &SandboxPath, to: &SandboxPath) -> Result<(), ProviderError> {
        self.run(from, MOVE, &[from.as_str(), to.as_str()])
            .await
            .map(drop)
    }

    /// Changes permission bits.
    pub async fn chmod(&self, path: &SandboxPath, mode: u32) -> Result<(), ProviderError> {
        let mode = format!("{mode:o}");
        self.run(path, CHMOD, &[path.as_str(), &mode])
            .await
            .map(drop)
    }

    /// Paths matching `glob`, sorted.
    pub async fn glob(&self, glob: &SandboxGlob) -> Result<Vec<String>, ProviderError> {
        let depth = glob.max_depth.map(|d| d.to_string()).unwrap_or_default();
        let out = self
            .run(&glob.base, FIND, &[glob.base.as_str(), &depth])
            .await?;
        let mut matches: Vec<String> = out
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .filter(|p| glob.is_match(p))
            .collect();
        matches.sort();
        Ok(matches)
    }

    /// Streams a file. The command's first output (or its end) is awaited, so a missing or
    /// forbidden file is an error before any byte is handed on.
    pub async fn read(&self, path: &SandboxPath) -> Result<ByteStream, ProviderError> {
        self.stream_out(READ, path).await
    }

    /// Streams directory `dir` as a tar archive (names `./`, `./a`, ...); needs `tar`.
    pub async fn archive(&self, dir: &SandboxPath) -> Result<ByteStream, ProviderError> {
        self.stream_out(ARCHIVE, dir).await
    }

    /// Extracts a tar archive into `dir`, created when missing; needs `tar`.
    pub async fn extract(
        &self,
        dir: &SandboxPath,
        archive: ByteStream,
    ) -> Result<(), ProviderError> {
        self.feed_in(EXTRACT, &[dir.as_str()], dir, archive, None)
            .await
    }

    /// Runs `body` with `path` as `$1` and streams its stdout, once it has started to print.
    async fn stream_out(
        &self,
        body: &str,
        path: &SandboxPath,
    ) -> Result<ByteStream, ProviderError> {
        let ExecSession {
            mut output,
            exit,
            control,
        } = self.start(body, &[path.as_str()], false).await?;
        let mut stderr = Vec::new();
        let first = loop {
            match output.next().await {
                Some(Ok(chunk)) if chunk.stream == StdStream::Stdout => break Some(chunk.data),
                Some(Ok(chunk)) => keep_stderr(&mut stderr, &chunk),
                Some(Err(err)) => return Err(err),
                None => break None,
            }
        };
        let Some(first) = first else {
            return match exit.await?.code {
                0 => Ok(futures::stream::empty().boxed()),
                code => Err(script_error(path, code, &stderr)),
            };
        };
        let path = path.clone();
        // The session's control lives as long as the stream: dropping it would not end `cat`,
        // but a reader that stops early should.
        let rest = futures::stream::unfold(
            (output, Some(exit), control),
            move |(mut output, exit, control)| {
                let path = path.clone();
                async move {
                    loop {
                        match output.next().await {
                            Some(Ok(chunk)) if chunk.stream == StdStream::Stdout => {
                                return Some((Ok(chunk.data), (output, exit, control)))
                            }
                            Some(Ok(_)) => continue,
                            Some(Err(err)) => return Some((Err(err), (output, None, control))),
                            None => {
                                let exit = exit?;
                                return match exit.await {
                                    Ok(status) if status.code == 0 => None,
                                    Ok(status) => Some((
                                        Err(script_error(&path, status.code, b"")),
                                        (output, None, control),
                                    )),
                                    Err(err) => Some((Err(err), (output, None, control))),
                                };
                            }
                        }
                    }
                }
            },
        );
        Ok(
            futures::stream::once(async move { Ok::<Bytes, ProviderError>(first) })
                .chain(rest)
                .boxed(),
        )
    }

    /// Writes a file from `content` with `mode`, creating parents; the file is replaced only
    /// when the content is complete (a broken upload leaves the old file and no remains).
    pub async fn write(
        &self,
        path: &SandboxPath,
        mode: u32,
        content: ByteStream,
    ) -> Result<(), ProviderError> {
        let temporary = format!(".svc-upload-{}", SandboxId::generate());
        let mode = format!("{mode:o}");
        let leftover = path.parent().join(&temporary);
        self.feed_in(
            WRITE,
            &[path.as_str(), &mode, &temporary],
            path,
            content,
            Some(&leftover),
        )
        .await
    }

    /// Runs `body` with `args`, feeding `content` to its stdin. When the content fails, the
    /// command is killed and `leftover` (what it was writing) removed.
    async fn feed_in(
        &self,
        body: &str,
        args: &[&str],
        path: &SandboxPath,
        mut content: ByteStream,
        leftover: Option<&SandboxPath>,
    ) -> Result<(), ProviderError> {
        let ExecSession {
            mut output,
            exit,
            control,
        } = self.start(body, args, true).await?;
        // Output is drained alongside, so the command never blocks on a full pipe.
        let drained = tokio::spawn(async move {
            let mut stderr = Vec::new();
            while let Some(Ok(chunk)) = output.next().await {
                if chunk.stream == StdStream::Stderr {
                    keep_stderr(&mut stderr, &chunk);
                }
            }
            stderr
        });
        let mut exit = exit;
        let mut fed = Ok(());
        let mut refused = None;
        // The command may end before its input does (a refusal): that ends the feeding at
        // once, whether the path to it (the agent, the engine's attach stream) reports the
        // closed stdin or keeps taking bytes nobody reads.
        let mut ended_early = None;
        loop {
            let chunk = tokio::select! {
                biased;
                ended = &mut exit => {
                    ended_early = Some(ended);
                    break;
                }
                chunk = content.next() => chunk,
            };
            let Some(chunk) = chunk else { break };
            match chunk {
                Ok(data) => {
                    let wrote = tokio::select! {
                        biased;
                        ended = &mut exit => {
                            ended_early = Some(ended);
                            break;
                        }
                        wrote = control.write_stdin(data) => wrote,
                    };
                    if let Err(err) = wrote {
                        refused = Some(err);
                        break;
                    }
                }
                Err(err) => {
                    fed = Err(err);
                    break;
                }
            }
        }
        if let Some(ended) = ended_early {
            let code = ended?.code;
            let stderr = drained.await.unwrap_or_default();
            if code != 0 {
                return Err(script_error(path, code, &stderr));
            }
            // Done without all of its input: nothing it wrote can be whole.
            if let Some(leftover) = leftover {
                let _ = self
                    .run(path, "rm -f -- \"$1\"", &[leftover.as_str()])
                    .await;
            }
            return Err(ProviderError::failed(format!(
                "{path}: the command ended before reading all of its input"
            )));
        }
        let refused = match refused {
            Some(err) => Some(err),
            None if fed.is_ok() => control.close_stdin().await.err(),
            None => None,
        };
        if let Some(err) = refused {
            // The command stopped reading: it most likely ended on a refusal (a missing
            // parent, a directory in the way), and its exit code says which; the broken pipe
            // its stdin met is only the consequence.
            let code = exit.await?.code;
            let stderr = drained.await.unwrap_or_default();
            return match code {
                0 => Err(err),
                code => Err(script_error(path, code, &stderr)),
            };
        }
        if let Err(err) = fed {
            // The command never sees the end of stdin: kill it and remove what it wrote.
            let _ = control.kill().await;
            let _ = exit.await;
            if let Some(leftover) = leftover {
                let _ = self
                    .run(path, "rm -f -- \"$1\"", &[leftover.as_str()])
                    .await;
            }
            return Err(err);
        }
        let code = exit.await?.code;
        let stderr = drained.await.unwrap_or_default();
        match code {
            0 => Ok(()),
            code => Err(script_error(path, code, &stderr)),
        }
    }
}

fn keep_stderr(stderr: &mut Vec<u8>, chunk: &ExecChunk) {
    if stderr.len() < STDERR_LIMIT {
        stderr.extend_from_slice(&chunk.data);
    }
}

/// The error a script's exit code means.
fn script_error(path: &SandboxPath, code: i32, stderr: &[u8]) -> ProviderError {
    let message = String::from_utf8_lossy(stderr).trim().to_owned();
    match code {
        NOT_FOUND => ProviderError::FileNotFound {
            path: path.to_string(),
        },
        INVALID => ProviderError::InvalidRequest {
            message: format!("{path}: {message}"),
        },
        DENIED => ProviderError::InvalidRequest {
            message: format!(
                "{path}: permission denied (outside what this sandbox's user may reach)"
            ),
        },
        126 | 127 => ProviderError::failed(format!(
            "{path}: this operation needs /bin/sh and basic utilities in the image ({message})"
        )),
        code => ProviderError::failed(format!("{path}: exit {code}: {message}")),
    }
}

/// `size raw-mode(hex) mtime name` as `stat -c '%s %f %Y %n'` prints it.
fn stat_fields(text: &str) -> Option<(u64, u32, i64, &str)> {
    let mut fields = text.splitn(4, ' ');
    let size = fields.next()?.parse().ok()?;
    let mode = u32::from_str_radix(fields.next()?, 16).ok()?;
    let mtime = fields.next()?.parse().ok()?;
    Some((size, mode, mtime, fields.next()?))
}

fn file_info(name: &str, path: &SandboxPath, size: u64, raw_mode: u32, mtime: i64) -> FileInfo {
    FileInfo {
        name: name.to_owned(),
        path: path.to_string(),
        size,
        is_dir: raw_mode & 0o170_000 == 0o040_000,
        mod_time: DateTime::from_timestamp(mtime, 0).unwrap_or_default(),
        mode: raw_mode & 0o7777,
    }
}
