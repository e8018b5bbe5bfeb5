//! The guest's initramfs: the agent as `/init` and the kernel modules it loads before it can
//! reach the root disk, in the kernel's `newc` cpio format (uncompressed: the kernel reads it
//! as is, and it is built once per agent and kernel, not per VM).

use std::path::Path;

/// One entry of the archive.
enum Entry {
    Dir(&'static str),
    File(String, u32, Vec<u8>),
    CharDevice(&'static str, u32, u32),
}

fn header(out: &mut Vec<u8>, ino: u32, mode: u32, size: usize, rdev: (u32, u32), name: &str) {
    let fields = [
        ino,
        mode,
        0,
        0,
        1,
        0,
        u32::try_from(size).unwrap_or(u32::MAX),
        0,
        0,
        rdev.0,
        rdev.1,
        u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
        0,
    ];
    out.extend_from_slice(b"070701");
    for field in fields {
        out.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad(out);
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

fn archive(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, entry) in entries.iter().enumerate() {
        let ino = u32::try_from(n + 1).unwrap_or(u32::MAX);
        match entry {
            Entry::Dir(name) => header(&mut out, ino, 0o040_755, 0, (0, 0), name),
            Entry::File(name, mode, data) => {
                header(&mut out, ino, 0o100_000 | mode, data.len(), (0, 0), name);
                out.extend_from_slice(data);
                pad(&mut out);
            }
            Entry::CharDevice(name, major, minor) => {
                header(&mut out, ino, 0o020_600, 0, (*major, *minor), name);
            }
        }
    }
    header(&mut out, 0, 0, 0, (0, 0), "TRAILER!!!");
    out
}

/// The initramfs for `agent` and the modules in `modules_dir` (listed, in load order, in its
/// `order` file; a kernel with everything built in has none).
pub fn build(agent: &Path, modules_dir: &Path) -> std::io::Result<Vec<u8>> {
    let agent = std::fs::read(agent)?;
    let order = match std::fs::read_to_string(modules_dir.join("order")) {
        Ok(order) => order,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(err),
    };
    let names: Vec<String> = order
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let mut modules = Vec::new();
    for name in &names {
        modules.push((
            format!("svc/modules/{name}"),
            std::fs::read(modules_dir.join(name))?,
        ));
    }
    let mut entries = vec![
        Entry::Dir("dev"),
        Entry::CharDevice("dev/console", 5, 1),
        Entry::Dir("proc"),
        Entry::Dir("sys"),
        Entry::Dir("newroot"),
        Entry::Dir("svc"),
        Entry::Dir("svc/modules"),
        Entry::File("init".into(), 0o755, agent),
    ];
    for name in &names {
        let data = std::fs::read(modules_dir.join(name))?;
        entries.push(Entry::File(format!("svc/modules/{name}"), 0o644, data));
    }
    entries.push(Entry::File(
        "svc/modules/order".into(),
        0o644,
        order.into_bytes(),
    ));
    Ok(archive(&entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_the_archive_ends_with_its_trailer() {
        let out = archive(&[
            Entry::Dir("d"),
            Entry::File("d/f".into(), 0o644, b"abc".to_vec()),
        ]);
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        // The file's header names it with a 4-byte name length (3 + NUL), mode 0100644.
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("000081a4"), "{text}");
        assert!(text.contains("d/f\0"));
        assert!(text.contains("abc"));
        assert!(text.contains("TRAILER!!!"));
    }

    #[test]
    fn builds_from_an_agent_and_its_modules() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("agent"), b"#!agent").unwrap();
        std::fs::write(dir.path().join("order"), "a.ko\n").unwrap();
        std::fs::write(dir.path().join("a.ko"), b"module").unwrap();
        let image = build(&dir.path().join("agent"), dir.path()).unwrap();
        let text = String::from_utf8_lossy(&image);
        assert!(text.contains("init\0") && text.contains("#!agent"));
        assert!(text.contains("svc/modules/a.ko\0") && text.contains("module"));
        // No modules directory at all: a kernel with everything built in.
        let none = build(&dir.path().join("agent"), &dir.path().join("missing")).unwrap();
        assert!(String::from_utf8_lossy(&none).contains("svc/modules/order"));
    }
}
