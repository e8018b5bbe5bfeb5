//! A logical sandbox's workspace inside a pool VM: its path, the confinement of every path the
//! file API is given, and the small POSIX shell scripts (run as root through the pool
//! provider's exec) that prepare a VM, make and remove a workspace, and find the workspaces
//! again after a restart.
//!
//! Scripts address the VM's filesystem by paths relative to the working directory `/`, so they
//! mean the same on every provider, the mock included (whose `/` is a host directory). Owner
//! IDs reach them only as positional arguments, never spliced into the script text.

use svc_core::glob::SandboxGlob;
use svc_core::path::{NonRootPath, SandboxPath};
use svc_provider::ProviderError;

/// Where workspaces live in a pool VM.
pub(crate) const WORKSPACES: &str = "/workspace";

/// Prepares a fresh VM: the workspace parent (others may pass, not list) and the root-only
/// directory recording which sandbox owns which workspace.
pub(crate) const PREPARE_VM: &str = r#"set -e
mkdir -p workspace var/lib/svc-pool
chmod 0711 workspace
chmod 0700 var/lib/svc-pool
"#;

/// `$1` owner, `$2` user ID or `-` (no user switching), `$3` sandbox ID: makes the workspace
/// (owned by the user, private to it) and records it.
pub(crate) const MAKE_WORKSPACE: &str = r#"set -e
ws="workspace/$1"
rm -rf -- "$ws"
mkdir -p -- "$ws"
if [ "$2" != - ]; then
  chown -- "$2:$2" "$ws"
  chmod 0700 "$ws"
fi
printf '%s %s\n' "$1" "$2" > "var/lib/svc-pool/$3"
"#;

/// `$1` owner, `$2` user ID or `-`, `$3` sandbox ID: ends the user's processes, then removes
/// the workspace and its record.
pub(crate) const REMOVE_WORKSPACE: &str = r#"if [ "$2" != - ]; then
  for p in /proc/[0-9]*; do
    [ "$(stat -c %u "$p" 2>/dev/null)" = "$2" ] && kill -9 "${p#/proc/}" 2>/dev/null
  done
fi
rm -rf -- "workspace/$1" "var/lib/svc-pool/$3"
"#;

/// Lists the recorded workspaces: one line `<sandbox ID> <owner> <user ID or ->` each.
pub(crate) const LIST_WORKSPACES: &str = r#"cd var/lib/svc-pool 2>/dev/null || exit 0
for f in sb-*; do
  [ -f "$f" ] && printf '%s %s\n' "$f" "$(cat "$f")"
done
exit 0
"#;

/// `$1` the workspace, `$2` a path in it (both relative to `/`): prints where the path really
/// is, relative to the workspace (empty for the workspace itself), following every symlink
/// of the part that exists; exit 4 when that leads outside the workspace.
pub(crate) const RESOLVE: &str = r#"root=$(readlink -f -- "$1") || exit 3
p=$2
rest=
while [ ! -e "$p" ] && [ ! -L "$p" ]; do
  case "$p" in */*) ;; *) exit 3 ;; esac
  rest="/${p##*/}$rest"
  p=${p%/*}
done
real=$(readlink -f -- "$p") || exit 4
case "$real" in
  "$root") printf '%s' "$rest" ;;
  "$root"/*) printf '%s' "${real#"$root"}$rest" ;;
  *) exit 4 ;;
esac
"#;

/// `$1` user ID, `$2` the workspace, `$3` a path in it: hands the path and the directories
/// above it up to the workspace, where root made them, to the user.
pub(crate) const GIVE_TO_USER: &str = r#"p=$3
while [ "$p" != "$2" ] && [ -n "$p" ]; do
  [ "$(stat -c %u -- "$p" 2>/dev/null)" = 0 ] && chown -h -- "$1:$1" "$p"
  case "$p" in */*) p=${p%/*} ;; *) break ;; esac
done
exit 0
"#;

/// Exit code of [`RESOLVE`] for a path that leads outside.
pub(crate) const OUTSIDE: i32 = 4;

/// `/workspace/<owner>`; `None` for owners that are not one path component (`.`, `..`).
pub(crate) fn workspace_of(owner: &str) -> Option<SandboxPath> {
    let path = SandboxPath::parse(&format!("{WORKSPACES}/{owner}")).ok()?;
    (path.parent().as_str() == WORKSPACES && path.file_name() == owner).then_some(path)
}

/// `path` when it is the workspace or inside it; a clear refusal otherwise.
pub(crate) fn confine(workspace: &SandboxPath, path: &SandboxPath) -> Result<(), ProviderError> {
    if inside(workspace, path.as_str()) {
        Ok(())
    } else {
        Err(outside(workspace, path.as_str()))
    }
}

/// True when `path` is `workspace` or below it.
pub(crate) fn inside(workspace: &SandboxPath, path: &str) -> bool {
    path == workspace.as_str()
        || path
            .strip_prefix(workspace.as_str())
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The refusal of a path outside the workspace.
pub(crate) fn outside(workspace: &SandboxPath, path: &str) -> ProviderError {
    ProviderError::InvalidRequest {
        message: format!(
            "path {path} is outside this sandbox's workspace {workspace} (pool mode confines files to it)"
        ),
    }
}

/// A glob confined like a path: its fixed part must lie in the workspace.
pub(crate) fn confine_glob(
    workspace: &SandboxPath,
    pattern: &SandboxGlob,
) -> Result<(), ProviderError> {
    let fixed = pattern
        .pattern()
        .split(['*', '?', '['])
        .next()
        .unwrap_or_default();
    // The fixed part up to its last `/` must be the workspace or below; `/workspace/al*`
    // could match another owner's workspace.
    let directory = fixed.rsplit_once('/').map_or("", |(dir, _)| dir);
    if inside(workspace, directory) {
        Ok(())
    } else {
        Err(outside(workspace, pattern.pattern()))
    }
}

/// `path` without its leading `/`, for the scripts.
pub(crate) fn relative(path: &SandboxPath) -> String {
    path.relative().to_owned()
}

/// The real location [`RESOLVE`] printed, as a path.
pub(crate) fn resolved(
    workspace: &SandboxPath,
    printed: &str,
) -> Result<SandboxPath, ProviderError> {
    SandboxPath::parse(&format!("{workspace}{printed}"))
        .map_err(|e| ProviderError::caused("resolving a workspace path", e))
}

/// A resolved path that may not be the workspace itself (writes, deletes, moves).
pub(crate) fn non_root_in(
    workspace: &SandboxPath,
    path: SandboxPath,
) -> Result<NonRootPath, ProviderError> {
    if path == *workspace {
        return Err(ProviderError::InvalidRequest {
            message: format!(
                "{path} is the workspace itself; it cannot be written, moved or deleted"
            ),
        });
    }
    NonRootPath::new(path).ok_or_else(|| outside(workspace, "/"))
}

/// One line of [`LIST_WORKSPACES`]: sandbox ID, owner, user ID (`None` for `-`).
pub(crate) fn parse_listing(line: &str) -> Option<(String, String, Option<u32>)> {
    let mut parts = line.split(' ');
    let id = parts.next()?.to_owned();
    let owner = parts.next()?.to_owned();
    let uid = parts.next()?;
    if parts.next().is_some() || owner.is_empty() {
        return None;
    }
    Some((id, owner, uid.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> SandboxPath {
        SandboxPath::parse(p).unwrap()
    }

    #[test]
    fn a_workspace_is_one_component_under_workspace() {
        assert_eq!(workspace_of("alice").unwrap().as_str(), "/workspace/alice");
        assert!(workspace_of("..").is_none());
        assert!(workspace_of(".").is_none());
        assert!(workspace_of("").is_none());
    }

    #[test]
    fn paths_stay_in_the_workspace() {
        let ws = workspace_of("alice").unwrap();
        assert!(confine(&ws, &path("/workspace/alice")).is_ok());
        assert!(confine(&ws, &path("/workspace/alice/a/b.txt")).is_ok());
        for escape in [
            "/workspace/bob/secret",
            "/workspace/alice2/x",
            "/workspace/alice/../bob/x",
            "/etc/passwd",
            "/",
            "/workspace",
        ] {
            let err = confine(&ws, &path(escape)).unwrap_err();
            assert!(
                err.to_string().contains("/workspace/alice"),
                "{escape}: {err}"
            );
        }
    }

    #[test]
    fn globs_stay_in_the_workspace() {
        let ws = workspace_of("al").unwrap();
        let glob = |p: &str| SandboxGlob::new(p).unwrap();
        assert!(confine_glob(&ws, &glob("/workspace/al/**/*.txt")).is_ok());
        assert!(confine_glob(&ws, &glob("/workspace/al/*")).is_ok());
        assert!(
            confine_glob(&ws, &glob("/workspace/al*/x")).is_err(),
            "would match alice"
        );
        assert!(confine_glob(&ws, &glob("/workspace/*/x")).is_err());
        assert!(confine_glob(&ws, &glob("/**")).is_err());
    }

    #[test]
    fn listings_parse() {
        assert_eq!(
            parse_listing("sb-0123456789abcdef alice 20001"),
            Some(("sb-0123456789abcdef".into(), "alice".into(), Some(20001)))
        );
        assert_eq!(
            parse_listing("sb-0123456789abcdef bob -"),
            Some(("sb-0123456789abcdef".into(), "bob".into(), None))
        );
        assert_eq!(parse_listing("garbage"), None);
    }

    #[test]
    fn the_workspace_itself_is_not_a_file() {
        let ws = workspace_of("alice").unwrap();
        assert!(non_root_in(&ws, ws.clone()).is_err());
        assert!(non_root_in(&ws, path("/workspace/alice/a")).is_ok());
        assert_eq!(
            resolved(&ws, "/a/b").unwrap().as_str(),
            "/workspace/alice/a/b"
        );
        assert_eq!(resolved(&ws, "").unwrap(), ws);
    }
}
