//! Root disks per image, built once and cached in `rootfs_dir` (`GET /snapshots` lists them).
//! An image that is an absolute path names the content directly: a directory, or a `.tar`
//! unpacked first. The cache key is the source's path, size and modification time, so a
//! changed tarball or directory (at its top level) is built again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

use crate::{ProviderError, SnapshotInfo};

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
    /// One build at a time: two spawns of a new image build it once.
    building: Mutex<()>,
}

fn invalid(message: String) -> ProviderError {
    ProviderError::InvalidRequest { message }
}

impl RootfsCache {
    /// A cache in `dir`, for guests of `kernel` (its file name, shown in snapshots).
    pub fn new(dir: PathBuf, kernel: String) -> Self {
        RootfsCache {
            dir,
            kernel,
            building: Mutex::new(()),
        }
    }

    /// Where the disks live.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The root disk of `image`, built when not cached yet.
    pub async fn root_disk(&self, image: &str) -> Result<PathBuf, ProviderError> {
        let source = Path::new(image);
        if !source.is_absolute() {
            return Err(invalid(format!(
                "image {image:?}: the qemu provider builds root filesystems from an absolute \
                 path to a directory or a .tar file; Docker images are not supported yet"
            )));
        }
        let metadata = tokio::fs::metadata(source)
            .await
            .map_err(|e| invalid(format!("image {image:?}: {e}")))?;
        let is_tar = metadata.is_file() && image.ends_with(".tar");
        if !metadata.is_dir() && !is_tar {
            return Err(invalid(format!(
                "image {image:?} is neither a directory nor a .tar file"
            )));
        }
        let modified = metadata
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let key = hex::encode(Sha256::digest(
            format!("{image}\0{}\0{modified}", metadata.len()).as_bytes(),
        ));
        let disk = self.dir.join(format!("{}.ext4", &key[..32]));
        let _building = self.building.lock().await;
        if tokio::fs::metadata(&disk).await.is_ok() {
            return Ok(disk);
        }
        tokio::fs::create_dir_all(&self.dir).await?;
        let size = if is_tar {
            let unpacked = tempfile::tempdir_in(&self.dir)?;
            let (tarball, target) = (source.to_path_buf(), unpacked.path().to_path_buf());
            tokio::task::spawn_blocking(move || {
                let file = std::fs::File::open(&tarball)?;
                let mut archive = tar::Archive::new(file);
                archive.set_preserve_permissions(true);
                archive.unpack(&target)
            })
            .await
            .map_err(|e| ProviderError::failed(format!("unpacking {image}: {e}")))?
            .map_err(|e| invalid(format!("image {image:?} does not unpack: {e}")))?;
            super::rootfs::build_ext4(unpacked.path(), &disk).await?
        } else {
            super::rootfs::build_ext4(source, &disk).await?
        };
        let record = SnapshotRecord {
            image: image.to_owned(),
            kernel: self.kernel.clone(),
            size,
            created_at: chrono::Utc::now(),
        };
        let json = serde_json::to_vec(&record).map_err(|e| ProviderError::failed(e.to_string()))?;
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
