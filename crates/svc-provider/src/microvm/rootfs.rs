//! Root disks: a directory tree made into an ext4 image by `mkfs.ext4 -d`, which needs no
//! mounts and no root privileges. The image is written beside its final name and renamed when
//! complete, so a cache never holds half an image.

use std::path::Path;

use crate::ProviderError;

/// Free room a guest gets on top of its content.
const HEADROOM: u64 = 256 * 1024 * 1024;

fn content_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            total += content_size(&entry.path())?;
        } else {
            // Every file costs at least a block and an inode.
            total += entry.metadata()?.len().max(4096);
        }
    }
    Ok(total)
}

/// Builds `image` (ext4) holding the tree at `content`; returns its size in bytes.
pub async fn build_ext4(content: &Path, image: &Path) -> Result<u64, ProviderError> {
    let (content, image) = (content.to_path_buf(), image.to_path_buf());
    let partial = image.with_extension("partial");
    let size = {
        let walked = content.clone();
        tokio::task::spawn_blocking(move || content_size(&walked))
            .await
            .map_err(|e| ProviderError::caused("sizing the root filesystem", e))?
            .map_err(|e| ProviderError::io(format!("reading {}", content.display()), e))?
    };
    let size = (size * 3 / 2 + HEADROOM).div_ceil(1024 * 1024) * 1024 * 1024;
    let file = std::fs::File::create(&partial)
        .map_err(|e| ProviderError::io(format!("creating {}", partial.display()), e))?;
    file.set_len(size)
        .map_err(|e| ProviderError::io(format!("sizing {}", partial.display()), e))?;
    drop(file);
    let output = tokio::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "svc-root", "-d"])
        .arg(&content)
        .arg(&partial)
        .output()
        .await;
    let failure = match output {
        Ok(output) if output.status.success() => None,
        Ok(output) => Some(format!(
            "mkfs.ext4 failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            Some("mkfs.ext4 is not installed (Debian package e2fsprogs)".to_owned())
        }
        Err(err) => Some(format!("running mkfs.ext4: {err}")),
    };
    if let Some(message) = failure {
        let _ = std::fs::remove_file(&partial);
        return Err(ProviderError::failed(message));
    }
    std::fs::rename(&partial, &image)
        .map_err(|e| ProviderError::io(format!("placing {}", image.display()), e))?;
    Ok(size)
}
