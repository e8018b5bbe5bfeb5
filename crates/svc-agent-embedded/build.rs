//! Builds `svc-agent` for this machine's musl target with a nested `cargo build --release`,
//! into a target directory outside the clone (the one `scripts/microvm-assets.sh` uses, so each
//! reuses the other's build), and leaves it in OUT_DIR for `include_bytes!`.
//!
//! Release builds only, unless `SVC_EMBED_AGENT=1` (and `SVC_EMBED_AGENT=0` turns it off): a
//! debug edit-build loop should not rebuild the agent whenever `svc-core` changes. Where the agent
//! cannot be built (no musl target and no way to add one), the build goes on with one warning
//! and the binary carries nothing; Docker sandboxes then take the engine's exec path.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("../..");
    let root = root.canonicalize().unwrap_or(root);
    for input in [
        "crates/svc-agent/src",
        "crates/svc-agent/Cargo.toml",
        "crates/svc-agent-proto/src",
        "crates/svc-core/src",
        "crates/svc-process/src",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(input).display());
    }
    println!("cargo:rerun-if-env-changed=SVC_EMBED_AGENT");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("svc-agent");
    let wanted = match std::env::var("SVC_EMBED_AGENT").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => std::env::var("PROFILE").as_deref() == Ok("release"),
    };
    let carried = if wanted {
        match build(&root) {
            Ok(agent) => {
                std::fs::read(&agent).map_err(|e| format!("reading {}: {e}", agent.display()))
            }
            Err(e) => Err(e),
        }
    } else {
        Ok(Vec::new())
    };
    let carried = carried.unwrap_or_else(|reason| {
        let reason = reason.replace('\n', " ");
        println!(
            "cargo:warning=svc carries no guest agent ({reason}); docker sandboxes take the \
             engine's exec path unless providers.docker.agent_path names a static svc-agent"
        );
        Vec::new()
    });
    std::fs::write(&out, carried).expect("writing the carried agent into OUT_DIR");
}

/// The target the agent is built for: this machine's architecture, statically linked.
fn target() -> Result<String, String> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    match arch.as_str() {
        "x86_64" | "aarch64" => Ok(format!("{arch}-unknown-linux-musl")),
        other => Err(format!(
            "no musl target is known for the architecture {other:?}"
        )),
    }
}

/// Where the nested build keeps its target directory: beside the microVM assets, so
/// `scripts/microvm-assets.sh` and this build share one agent build (and CI its cache).
fn target_dir() -> PathBuf {
    if let Some(assets) = std::env::var_os("SVC_MICROVM_ASSETS").filter(|v| !v.is_empty()) {
        return PathBuf::from(assets).join("target");
    }
    let shared = Path::new("/var/cache/svc-microvm");
    if std::fs::create_dir_all(shared).is_ok() && writable(shared) {
        return shared.join("target");
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".cache/svc/agent-target")
}

fn writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".svc-write-probe-{}", std::process::id()));
    let ok = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(probe);
    ok
}

fn build(root: &Path) -> Result<PathBuf, String> {
    let target = target()?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == target)
        });
    if !installed {
        let added = Command::new("rustup")
            .args(["target", "add", &target])
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("rustup target add {target}: {e}"))?;
        if !added.status.success() {
            return Err(format!(
                "rustup target add {target} failed: {}",
                first_error(&added.stderr)
            ));
        }
    }
    let target_dir = target_dir();
    let mut command = Command::new(cargo);
    // The nested build must see what a developer's `cargo build` sees, not this build's
    // settings for svc (its profile, flags and target), so that it shares its fingerprints
    // with scripts/microvm-assets.sh's build of the same agent.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let keep = name == "CARGO_HOME" || name.starts_with("CARGO_TERM_");
        if (name.starts_with("CARGO_") && !keep)
            || matches!(
                name.as_ref(),
                "RUSTFLAGS"
                    | "RUSTC_WRAPPER"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "TARGET"
                    | "HOST"
                    | "OUT_DIR"
                    | "PROFILE"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "NUM_JOBS"
            )
        {
            command.env_remove(name.as_ref());
        }
    }
    let output = command
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "svc-agent",
            "--target",
            &target,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(root)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building svc-agent for {target} failed: {}",
            first_error(&output.stderr)
        ));
    }
    Ok(target_dir.join(&target).join("release/svc-agent"))
}

/// The first line that says what went wrong, for a one-line warning.
fn first_error(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.clone().find(|l| l.starts_with("error"));
    first
        .or_else(|| lines.next_back())
        .unwrap_or("no message")
        .to_owned()
}
