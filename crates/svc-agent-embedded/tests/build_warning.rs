//! A build that cannot make the agent goes on, with one clear warning (issue 38): here the
//! nested build's directory cannot be written, as where the musl target cannot be added.

use std::path::Path;
use std::process::Command;

#[test]
fn a_build_that_cannot_make_the_agent_warns_once_and_succeeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = tempfile::tempdir().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if (key.starts_with("CARGO_") && key != "CARGO_HOME") || key.starts_with("SVC_") {
            command.env_remove(key.as_ref());
        }
    }
    let output = command
        .args(["build", "-p", "svc-agent-embedded"])
        .arg("--target-dir")
        .arg(target.path())
        .env("SVC_EMBED_AGENT", "1")
        // Not a directory anyone can make: the nested build fails at once.
        .env("SVC_MICROVM_ASSETS", "/proc/svc-no-such-dir")
        .current_dir(&root)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the build failed:\n{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("svc carries no guest agent"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning:\n{stderr}");
    let warning = warnings[0];
    assert!(
        warning.starts_with("warning: svc-agent-embedded@")
            && warning.contains("building svc-agent for")
            && warning.contains("docker sandboxes take the engine's exec path unless providers.docker.agent_path names a static svc-agent"),
        "{warning}"
    );
}
