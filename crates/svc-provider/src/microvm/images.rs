//! Root disks per image, built once and cached in `rootfs_dir` (`GET /snapshots` lists them).
//! An image name is a Docker image, exported through the engine (pulled first when missing)
//! and cached by its image ID, so a retagged image is built again. An image that is an
//! absolute path names the content directly: a directory, cached by its path and every entry's
//! size, mode and modification time, or a `.tar` unpacked first, cached by its path and stamp.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

use crate::docker::DockerProvider;
use crate::{ProgressSink, ProviderError, SnapshotInfo};

/// What `<key>.json` beside each `<key>.ext4` says.
#[derive(Debug, Serialize, Deserialize)]
struct SnapshotRecord {
    image: String,
    kernel: String,
    size: u64,
    created_at: svc_core::Timestamp,
}

/// The cache of built root disks.
pub struct RootfsCache {
    dir: PathBuf,
    kernel: String,
    /// The engine images are exported through.
    docker: Option<Arc<DockerProvider>>,
    /// One build at a time: two spawns of a new image build it once.
    building: Mutex<()>,
}

/// Where a root filesystem's content comes from.
enum Source {
    Dir(PathBuf),
    Tar(PathBuf),
    Docker(String),
}

fn invalid(message: String) -> ProviderError {
    ProviderError::InvalidRequest { message }
}

impl RootfsCache {
    /// A cache in `dir`, for guests of `kernel` (its file name, shown in snapshots).
    pub fn new(dir: PathBuf, kernel: String, docker: Option<Arc<DockerProvider>>) -> Self {
        RootfsCache {
            dir,
            kernel,
            docker,
            building: Mutex::new(()),
        }
    }

    /// Where the disks live.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where `image`'s content comes from, and its cache key.
    async fn source(
        &self,
        image: &str,
        progress: &ProgressSink,
    ) -> Result<(Source, String), ProviderError> {
        let source = Path::new(image);
        if !source.is_absolute() {
            let docker = self.docker.as_ref().ok_or_else(|| {
                ProviderError::unavailable(format!(
                    "image {image:?} needs the Docker engine, which is not set up"
                ))
            })?;
            let id = docker.image_id(image, progress).await?;
            return Ok((Source::Docker(image.to_owned()), id));
        }
        let metadata = tokio::fs::metadata(source)
            .await
            .map_err(|e| invalid(format!("image {image:?}: {e}")))?;
        if metadata.is_dir() {
            // Every entry counts: a file changed deep inside makes a new disk.
            let dir = source.to_path_buf();
            let listing = tokio::task::spawn_blocking(move || tree_listing(&dir))
                .await
                .map_err(|e| ProviderError::caused(format!("reading image {image:?}"), e))?
                .map_err(|e| invalid(format!("image {image:?}: {e}")))?;
            Ok((
                Source::Dir(source.to_path_buf()),
                format!("{image}\0{listing}"),
            ))
        } else if metadata.is_file() && image.ends_with(".tar") {
            let key = format!("{image}\0{}", stamp(&metadata));
            Ok((Source::Tar(source.to_path_buf()), key))
        } else {
            Err(invalid(format!(
                "image {image:?} is neither a directory nor a .tar file"
            )))
        }
    }

    /// The root disk of `image`, built when not cached yet (a pull reports to `progress`).
    pub async fn root_disk(
        &self,
        image: &str,
        progress: &ProgressSink,
    ) -> Result<PathBuf, ProviderError> {
        let (source, key) = self.source(image, progress).await?;
        let key = hex::encode(Sha256::digest(key.as_bytes()));
        let disk = self.dir.join(format!("{}.ext4", &key[..32]));
        if tokio::fs::metadata(&disk).await.is_ok() {
            return Ok(disk);
        }
        // One build at a time; a spawn of a cached image never waits behind it (above).
        let _building = self.building.lock().await;
        if tokio::fs::metadata(&disk).await.is_ok() {
            return Ok(disk);
        }
        tokio::fs::create_dir_all(&self.dir).await?;
        let work = tempfile::tempdir_in(&self.dir)?;
        let content = match source {
            Source::Dir(dir) => dir,
            Source::Tar(tar) => unpack(image, tar, work.path()).await?,
            Source::Docker(name) => {
                let exported = work.path().join("image.tar");
                if let Some(docker) = &self.docker {
                    docker.export_image(&name, &exported).await?;
                }
                unpack(image, exported, work.path()).await?
            }
        };
        let size = super::rootfs::build_ext4(&content, &disk).await?;
        // When the disk was built, as the host's clock says: listed with the snapshots.
        #[allow(clippy::disallowed_methods)]
        let record = SnapshotRecord {
            image: image.to_owned(),
            kernel: self.kernel.clone(),
            size,
            created_at: chrono::Utc::now(),
        };
        let json = serde_json::to_vec(&record)
            .map_err(|e| ProviderError::caused("encoding the runtime record", e))?;
        tokio::fs::write(disk.with_extension("json"), json).await?;
        Ok(disk)
    }

    /// Every cached disk, oldest first.
    pub async fn list(&self) -> Result<Vec<SnapshotInfo>, ProviderError> {
        let mut entries = match tokio::fs::read_dir(&self.dir).await {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        let mut snapshots = Vec::new();
        while let Some(entry) = entries.next_entry().await? {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Ok(bytes) = tokio::fs::read(&path).await else {
                continue;
            };
            if let Ok(record) = serde_json::from_slice::<SnapshotRecord>(&bytes) {
                snapshots.push(SnapshotInfo {
                    image: record.image,
                    kernel: record.kernel,
                    size: record.size,
                    created_at: record.created_at,
                });
            }
        }
        snapshots.sort_by_key(|s| s.created_at);
        Ok(snapshots)
    }
}

/// Size, mode and modification time: what changes when a file does.
fn stamp(metadata: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "{}:{:o}:{}.{}",
        metadata.len(),
        metadata.mode(),
        metadata.mtime(),
        metadata.mtime_nsec()
    )
}

/// Every entry under `root` (not following symlinks), sorted, with its [`stamp`].
fn tree_listing(root: &Path) -> std::io::Result<String> {
    let mut entries = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let metadata = entry.path().symlink_metadata()?;
            if metadata.is_dir() {
                pending.push(entry.path());
            }
            let name = entry.path();
            let name = name
                .strip_prefix(root)
                .unwrap_or(&name)
                .display()
                .to_string();
            entries.push(format!("{name}\0{}", stamp(&metadata)));
        }
    }
    entries.sort();
    Ok(entries.join("\n"))
}

/// Unpacks `tarball` into `work/root`; the directory.
async fn unpack(image: &str, tarball: PathBuf, work: &Path) -> Result<PathBuf, ProviderError> {
    let target = work.join("root");
    let into = target.clone();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&into)?;
        let mut archive = tar::Archive::new(std::fs::File::open(&tarball)?);
        archive.set_preserve_permissions(true);
        // Files keep their owners (images with non-root users), which only root can give them.
        archive.set_preserve_ownerships(rustix::process::geteuid().is_root());
        archive.unpack(&into)
    })
    .await
    .map_err(|e| ProviderError::caused(format!("unpacking {image}"), e))?
    .map_err(|e| invalid(format!("image {image:?} does not unpack: {e}")))?;
    Ok(target)
}
