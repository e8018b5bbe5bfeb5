//! Builds the console from `ui/` (its npm packages installed when missing or when the lock file
//! changed) into OUT_DIR, and writes the table of its files for `include_bytes!`, so the binary
//! always carries the console of its own sources: no prebuilt assets, no CDN at run time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let ui = manifest.join("../../ui");
    let ui = ui.canonicalize().unwrap_or(ui);
    for input in [
        "src",
        "build.mjs",
        "package.json",
        "package-lock.json",
        "tsconfig.json",
    ] {
        println!("cargo:rerun-if-changed={}", ui.join(input).display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("ui");
    install(&ui);
    run(
        Command::new("node")
            .arg("build.mjs")
            .arg(&out)
            .current_dir(&ui),
        "building the console (node ui/build.mjs)",
    );
    let mut table = String::from("&[\n");
    for file in files(&out) {
        let name = file
            .strip_prefix(&out)
            .expect("inside the output")
            .to_string_lossy()
            .replace('\\', "/");
        if name.ends_with(".gz") {
            continue;
        }
        let gzip = PathBuf::from(format!("{}.gz", file.display()));
        writeln!(
            table,
            "    crate::Asset {{ path: {name:?}, body: include_bytes!({file:?}), gzip: include_bytes!({gzip:?}) }},",
            file = file.display().to_string(),
            gzip = gzip.display().to_string(),
        )
        .expect("writing to a string");
    }
    table.push(']');
    std::fs::write(
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("assets.rs"),
        table,
    )
    .expect("writing assets.rs");
}

/// `npm ci` when `node_modules` is missing or older than the lock file; one build script at a
/// time (cargo may run this one for two profiles at once).
fn install(ui: &Path) {
    let lock = ui.join("package-lock.json");
    let marker = ui.join("node_modules/.package-lock.json");
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let fresh = matches!((modified(&marker), modified(&lock)), (Some(m), Some(l)) if m >= l);
    if fresh {
        return;
    }
    let lock_dir = ui.join(".npm-install.lock");
    let started = Instant::now();
    while std::fs::create_dir(&lock_dir).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{} is held for 10 minutes; remove it if no build runs",
            lock_dir.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _held = Held(lock_dir);
    let fresh = matches!((modified(&marker), modified(&lock)), (Some(m), Some(l)) if m >= l);
    if !fresh {
        run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(ui),
            "installing the console's npm packages (npm ci in ui/; Node.js 20 and the npm registry are needed)",
        );
    }
}

/// Releases the install lock however the install ends.
struct Held(PathBuf);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn run(command: &mut Command, what: &str) {
    match command.status() {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("{what} failed ({status})"),
        Err(err) => panic!("{what} failed to start: {err}"),
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("the console's output")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push(path);
        }
    }
    found
}
