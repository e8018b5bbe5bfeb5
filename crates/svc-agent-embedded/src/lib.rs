//! The static guest agent this `svc` binary carries (empty when its build could not make one;
//! see `build.rs`), and how it is put on disk for the Docker provider to bind-mount.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

static AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/svc-agent"));

/// The carried agent, if this binary carries one.
pub fn bytes() -> Option<&'static [u8]> {
    (!AGENT.is_empty()).then_some(AGENT)
}

/// Writes the carried agent into `dir` (made 0700 when missing) under a name that holds a hash
/// of its content, once: a running svc never rewrites a file that containers have mounted, and an
/// upgraded svc writes its own beside the old. Returns its path, or `None` when this binary
/// carries no agent.
///
/// `dir` must belong to this process's user and be writable by nobody else: containers run the
/// file as their init, so whoever could replace it would run code in every sandbox.
pub fn install(dir: &Path) -> std::io::Result<Option<PathBuf>> {
    let Some(agent) = bytes() else {
        return Ok(None);
    };
    install_bytes(dir, agent).map(Some)
}

fn install_bytes(dir: &Path, agent: &[u8]) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    let me = std::fs::metadata("/proc/self")?.uid();
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} must belong to uid {me} and be writable by it alone (it is uid {}, mode {:o})",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    let digest = hex::encode(Sha256::digest(agent));
    let path = dir.join(format!("svc-agent-{}", &digest[..16]));
    if std::fs::read(&path).is_ok_and(|on_disk| on_disk == agent) {
        return Ok(path);
    }
    // Written aside and renamed, so a reader never sees half an agent.
    let partial = dir.join(format!(
        ".svc-agent-{}.{}",
        &digest[..16],
        std::process::id()
    ));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&partial)?;
        file.write_all(agent)?;
        file.sync_all()?;
        std::fs::rename(&partial, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written.map(|()| path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn the_agent_is_written_once_under_its_hash_executable() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin = dir.path().join("bin");
        let first = install_bytes(&bin, b"agent one").expect("installed");
        let name = first
            .file_name()
            .expect("named")
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with("svc-agent-") && name.len() == "svc-agent-".len() + 16,
            "{name}"
        );
        assert_eq!(std::fs::read(&first).expect("read"), b"agent one");
        let mode = std::fs::metadata(&first)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        let dir_mode = std::fs::metadata(&bin).expect("meta").permissions().mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert_eq!(install_bytes(&bin, b"agent one").expect("again"), first);
        let second = install_bytes(&bin, b"agent two").expect("another agent");
        assert_ne!(second, first, "another agent gets another name");
        assert_eq!(
            std::fs::read(&first).expect("read"),
            b"agent one",
            "the old one stays"
        );
        let leftovers: Vec<_> = std::fs::read_dir(&bin)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n.to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let open = dir.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = install_bytes(&open, b"agent").expect_err("refused");
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("writable by it alone"), "{err}");
        assert_eq!(std::fs::read_dir(&open).expect("list").count(), 0);
    }
}
