//! What the host offers a VMM, for the provider detail: whether KVM is there, and whether it is
//! real hardware virtualisation or a hypervisor's paravirtual one (nested), where guests may
//! crawl (the timed probe boot decides whether QEMU uses it).

use std::path::Path;

/// KVM as this host offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kvm {
    /// `/dev/kvm` cannot be opened for reading and writing.
    Absent(String),
    /// `/dev/kvm` opens, and this host is itself a virtual machine: nested, paravirtual KVM.
    Paravirtual,
    /// `/dev/kvm` opens on bare metal.
    Real,
}

impl Kvm {
    /// Looks at `/dev/kvm` and the CPU flags.
    pub fn detect() -> Kvm {
        Self::detect_at(Path::new("/dev/kvm"), Path::new("/proc/cpuinfo"))
    }

    fn detect_at(device: &Path, cpuinfo: &Path) -> Kvm {
        if let Err(err) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(device)
        {
            return Kvm::Absent(format!("{}: {err}", device.display()));
        }
        let nested = std::fs::read_to_string(cpuinfo).is_ok_and(|info| {
            info.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
        });
        if nested {
            Kvm::Paravirtual
        } else {
            Kvm::Real
        }
    }

    /// Whether `/dev/kvm` can be used at all.
    pub fn present(&self) -> bool {
        !matches!(self, Kvm::Absent(_))
    }

    /// The provider detail's `kvm` value.
    pub fn describe(&self) -> String {
        match self {
            Kvm::Absent(why) => format!("absent ({why})"),
            Kvm::Paravirtual => "paravirtual (nested under a hypervisor)".to_owned(),
            Kvm::Real => "real".to_owned(),
        }
    }
}

/// The first line `program --version` prints, or why it could not run.
pub async fn version(program: &Path) -> Result<String, String> {
    let output = tokio::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{} cannot be run: {e}", program.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text.lines().next().unwrap_or("").trim().to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kvm_is_absent_real_or_paravirtual() {
        let dir = tempfile::tempdir().unwrap();
        let device = dir.path().join("kvm");
        let cpuinfo = dir.path().join("cpuinfo");
        assert!(matches!(
            Kvm::detect_at(&device, &cpuinfo),
            Kvm::Absent(why) if why.contains("kvm")
        ));
        std::fs::write(&device, "").unwrap();
        std::fs::write(&cpuinfo, "flags\t: fpu vme vmx\n").unwrap();
        assert_eq!(Kvm::detect_at(&device, &cpuinfo), Kvm::Real);
        std::fs::write(&cpuinfo, "flags\t: fpu vme hypervisor vmx\n").unwrap();
        assert_eq!(Kvm::detect_at(&device, &cpuinfo), Kvm::Paravirtual);
    }
}
