//! The README, run as a newcomer would (issue 38): the quick start's run command exactly as
//! written (`cargo run --release -- serve`, from a directory inside the clone, on the README's
//! port), then every shell block of "A first sandbox" in one bash, in order, against it.
//!
//! - Any command that fails fails the test (curl runs with `--fail-with-body`; a command whose
//!   `$?` the same line reads is expected to fail).
//! - `# => {...}` under a command is the shape of its answer: the keys shown are present with
//!   the same kinds, strings equal but for generated IDs; `...` stands for keys not shown, and
//!   without it no other key may appear.
//! - The `curl -N .../events` line runs beside the walk-through and must see the sandbox it made
//!   created, running and destroyed.
//! - A block right after `<!-- README check: not run (why) -->` is skipped.
//! - Where a Docker engine answers, `/providers/docker` must say `exec_path: agent`: the release
//!   binary carries the guest agent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The README's port: the walk-through names it.
const PORT: u16 = 7423;
/// How long the run command may take to answer `/health`: a by-hand run may build first.
const BUILD_AND_START: Duration = Duration::from_secs(1800);
/// A hang guard for the walk-through (it takes seconds).
const WALK_THROUGH: Duration = Duration::from_secs(300);

fn clone_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// One fenced block of the README.
#[derive(Debug, Clone, PartialEq)]
struct Block {
    /// The README line of its first code line (1-based).
    line: usize,
    lines: Vec<String>,
    /// The reason in a `<!-- README check: not run (...) -->` right before it.
    skipped: Option<String>,
}

/// The `sh` blocks under the `##` heading `title`, before the next heading of any level.
fn shell_blocks(readme: &str, title: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut inside_section = false;
    let mut current: Option<Block> = None;
    let mut in_other_fence = false;
    let mut last_text = String::new();
    for (index, line) in readme.lines().enumerate() {
        if let Some(block) = current.as_mut() {
            if line.trim_start().starts_with("```") {
                blocks.push(current.take().expect("open block"));
            } else {
                block.lines.push(line.to_owned());
            }
            continue;
        }
        if in_other_fence {
            in_other_fence = !line.trim_start().starts_with("```");
            continue;
        }
        if line.starts_with('#') {
            if inside_section {
                break;
            }
            inside_section = line.trim() == format!("## {title}");
            continue;
        }
        if !inside_section {
            continue;
        }
        let fence = line.trim_start();
        if fence == "```sh" || fence == "```bash" {
            let skipped = last_text
                .strip_prefix("<!-- README check: not run (")
                .and_then(|rest| rest.strip_suffix(") -->"))
                .map(str::to_owned);
            current = Some(Block {
                line: index + 2,
                lines: Vec::new(),
                skipped,
            });
        } else if fence.starts_with("```") {
            in_other_fence = true;
        } else if !line.trim().is_empty() {
            last_text = line.trim().to_owned();
        }
    }
    blocks
}

/// The shape an answer must have: `expected` from a `# =>` line, `...` allowing more keys.
fn shape_differences(expected_text: &str, actual: &Value) -> Result<(), String> {
    let open = expected_text.contains("...");
    let cleaned = expected_text
        .replace(",...}", "}")
        .replace(", ...}", "}")
        .replace("{...}", "{}");
    let expected: Value = serde_json::from_str(&cleaned)
        .map_err(|e| format!("the README's `# => {expected_text}` is not JSON: {e}"))?;
    compare("", &expected, actual, open)
}

fn compare(at: &str, expected: &Value, actual: &Value, open: bool) -> Result<(), String> {
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if kind(expected) != kind(actual) {
        return Err(format!(
            "{} is a {} in the README but a {}: {actual}",
            shown(at),
            kind(expected),
            kind(actual)
        ));
    }
    match (expected, actual) {
        (Value::Object(want), Value::Object(got)) => {
            for (key, value) in want {
                let path = format!("{at}.{key}");
                let Some(found) = got.get(key) else {
                    return Err(format!("{path} is missing from the answer: {actual}"));
                };
                compare(&path, value, found, open)?;
            }
            if !open {
                if let Some(extra) = got.keys().find(|k| !want.contains_key(*k)) {
                    return Err(format!(
                        "{at}.{extra} is in the answer but not in the README (add `...` if it \
                         stands for more): {actual}"
                    ));
                }
            }
            Ok(())
        }
        (Value::String(want), Value::String(got)) => {
            if want == got || (generated_id(want) && generated_id(got)) {
                Ok(())
            } else {
                Err(format!(
                    "{} is {got:?}, the README says {want:?}",
                    shown(at)
                ))
            }
        }
        _ => Ok(()),
    }
}

fn shown(at: &str) -> &str {
    if at.is_empty() {
        "the answer"
    } else {
        at
    }
}

/// `prefix-<hex>`, as svc's IDs are (`sb-3f9c0a1b2c3d4e5f`): the README shows an example.
fn generated_id(text: &str) -> bool {
    text.split_once('-').is_some_and(|(prefix, hex)| {
        !prefix.is_empty()
            && prefix.chars().all(|c| c.is_ascii_lowercase())
            && hex.len() >= 8
            && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

/// The walk-through as one bash script: blocks in order, each command with a `# =>` line
/// wrapped so its answer lands in `answers/<n>`, and the events line taken out (the test runs
/// it alongside). `map` gives each script line its README line.
struct Script {
    text: String,
    map: Vec<usize>,
    /// (README line of the `# =>`, its JSON text, answer number).
    answers: Vec<(usize, String, usize)>,
    /// The `curl -N` events command, if the walk-through has one.
    events: Option<String>,
}

fn script(blocks: &[Block]) -> Script {
    let mut text = String::from(
        "set -o pipefail\n\
         curl() { command curl --fail-with-body \"$@\"; }\n\
         readme_failed() {\n\
         \x20 case \"$(sed -n \"${1}p\" \"$0\")\" in *'$?'*) return 0;; esac\n\
         \x20 echo \"README-CHECK-FAILED $1 $2: $3\" >&2; exit 97\n\
         }\n\
         trap 'readme_failed $LINENO $? \"$BASH_COMMAND\"' ERR\n",
    );
    let mut map = vec![0; text.lines().count()];
    let mut answers = Vec::new();
    let mut events = None;
    for block in blocks.iter().filter(|b| b.skipped.is_none()) {
        // Commands are the runs of lines between comments and blanks.
        let mut pending: Vec<(usize, &str)> = Vec::new();
        let flush = |pending: &mut Vec<(usize, &str)>, text: &mut String, map: &mut Vec<usize>| {
            for (line, code) in pending.drain(..) {
                text.push_str(code);
                text.push('\n');
                map.push(line);
            }
        };
        for (offset, code) in block.lines.iter().enumerate() {
            let line = block.line + offset;
            let trimmed = code.trim();
            if let Some(expected) = trimmed.strip_prefix("# =>") {
                let number = answers.len();
                answers.push((line, expected.trim().to_owned(), number));
                let first = pending.first().map_or(line, |p| p.0);
                text.push_str("{\n");
                map.push(first);
                flush(&mut pending, &mut text, &mut map);
                text.push_str(&format!(
                    "}} > answers/{number}; cat answers/{number}; echo\n"
                ));
                map.push(first);
                continue;
            }
            let continues = pending
                .last()
                .is_some_and(|p| p.1.trim_end().ends_with('\\'));
            let is_events = trimmed.starts_with("curl -N ") && !trimmed.contains(" -X ");
            if is_events && !continues {
                flush(&mut pending, &mut text, &mut map);
                events = Some(trimmed.to_owned());
                continue;
            }
            if (trimmed.is_empty() || trimmed.starts_with('#')) && !continues {
                flush(&mut pending, &mut text, &mut map);
                text.push_str(code);
                text.push('\n');
                map.push(line);
                continue;
            }
            // A line that starts a new command ends the one before (whose answer is not shown),
            // unless a here-document or continuation is open; here-documents are kept whole by
            // flushing only at blanks and comments above.
            pending.push((line, code.as_str()));
        }
        flush(&mut pending, &mut text, &mut map);
    }
    Script {
        text,
        map,
        answers,
        events,
    }
}

/// A working directory inside the clone, as a newcomer's shell would be at the clone's root:
/// `target` is the clone's (what `cargo run --release` built) and `docs` a copy of its docs.
fn working_dir(root: &Path) -> tempfile::TempDir {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let parent = target.join("readme-check");
    std::fs::create_dir_all(&parent).unwrap();
    let dir = tempfile::tempdir_in(&parent).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("target")).unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), docs.join(entry.file_name())).unwrap();
        }
    }
    std::fs::create_dir(dir.path().join("answers")).unwrap();
    dir
}

/// A command run as the newcomer's shell would run it: none of this test run's cargo or svc
/// settings (cargo would see another build; svc another configuration), but the caches'.
fn newcomer(program: &str, dir: &Path) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars() {
        let cargo_own =
            key.starts_with("CARGO_") && key != "CARGO_HOME" && !key.starts_with("CARGO_TERM_");
        let svc_own =
            key.starts_with("SVC_") && key != "SVC_MICROVM_ASSETS" && key != "SVC_EMBED_AGENT";
        if cargo_own
            || svc_own
            || key == "CARGO"
            || key.starts_with("NEXTEST")
            || key == "RUSTFLAGS"
        {
            command.env_remove(key);
        }
    }
    command.current_dir(dir);
    command
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The server started by the README's command; stopped (SIGTERM) when dropped.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn start_server(run_command: &str, dir: &Path) -> Server {
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", PORT)).is_ok(),
        "port {PORT} is taken: the README's server needs it (is a by-hand `svc serve` running?)"
    );
    let log = dir.join("server.log");
    let mut command = newcomer("bash", dir);
    // `exec`: cargo run execs the binary in turn, so the child is the server itself.
    command
        .arg("-c")
        .arg(format!("exec {run_command}"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("server.out")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap());
    let child = command.spawn().unwrap();
    let mut server = Server { child, log };
    let started = Instant::now();
    while !crate::cli::health_answers(PORT) {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!(
                "`{run_command}` ended ({status}) before answering /health:\n{}",
                tail(&server.log)
            );
        }
        assert!(
            started.elapsed() < BUILD_AND_START,
            "`{run_command}` did not answer /health within {BUILD_AND_START:?}:\n{}",
            tail(&server.log)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server
}

/// Runs `script` in bash in `dir`; on failure names the README line.
fn run_walk_through(script: &Script, dir: &Path, readme: &str) -> String {
    let path = dir.join("walk-through.sh");
    std::fs::write(&path, &script.text).unwrap();
    let output_path = dir.join("walk-through.out");
    let mut child = newcomer("bash", dir)
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&output_path).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut { stderr }, &mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > WALK_THROUGH {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the walk-through hung for {WALK_THROUGH:?}; its output so far:\n{}",
                std::fs::read_to_string(&output_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = reader.join().unwrap();
    let output = std::fs::read_to_string(&output_path).unwrap_or_default();
    if !status.success() {
        let failed = stderr
            .lines()
            .find_map(|l| l.strip_prefix("README-CHECK-FAILED "))
            .map(|rest| {
                let (line, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                let readme_line = line
                    .parse::<usize>()
                    .ok()
                    .and_then(|l| script.map.get(l - 1))
                    .copied()
                    .unwrap_or(0);
                let shown = readme
                    .lines()
                    .nth(readme_line.saturating_sub(1))
                    .unwrap_or("");
                format!(
                    "README.md line {readme_line} (`{}`) failed with exit code {rest}",
                    shown.trim()
                )
            })
            .unwrap_or_else(|| format!("the walk-through ended with {status}"));
        panic!("{failed}\nstdout:\n{output}\nstderr:\n{stderr}");
    }
    output
}

/// Whether a Docker engine answers on this host's default socket.
fn docker_answers(dir: &Path) -> bool {
    let ping = newcomer("curl", dir)
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args([
            "--unix-socket",
            "/var/run/docker.sock",
            "http://localhost/_ping",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&ping.stdout) == "200"
}

#[test]
fn the_readme_walk_through_runs_as_written() {
    // The walk-through's fast-path line asks the docker provider, which exists only where an
    // engine answers.
    if !docker_answers(Path::new("/")) {
        assert!(
            std::env::var_os("SVC_TEST_REQUIRE_DOCKER").is_none()
                && std::env::var_os("CI").is_none(),
            "the Docker engine is required here but does not answer"
        );
        eprintln!("SKIPPED (loudly): no Docker engine answers; run scripts/test.sh to start one");
        return;
    }
    let root = clone_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let quick_start = shell_blocks(&readme, "Quick start");
    let run_command = quick_start
        .first()
        .and_then(|b| {
            b.lines
                .iter()
                .find(|l| !l.trim().is_empty() && !l.trim().starts_with('#'))
        })
        .expect("the quick start's first shell block holds the run command")
        .trim()
        .to_owned();
    assert_eq!(run_command, "cargo run --release -- serve");
    let blocks = shell_blocks(&readme, "A first sandbox");
    assert!(blocks.len() >= 3, "the walk-through's blocks: {blocks:?}");
    let script = script(&blocks);
    assert!(
        !script.answers.is_empty(),
        "the walk-through shows answers (`# =>`)"
    );
    let events_command = script
        .events
        .clone()
        .expect("the walk-through follows the events with `curl -N`");

    let dir = working_dir(&root);
    let server = start_server(&run_command, dir.path());

    let events_path = dir.path().join("events.out");
    let mut events = newcomer("bash", dir.path())
        .arg("-c")
        .arg(format!("exec {events_command}"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&events_path).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The stream is open once its first line (a comment or an event) can be read... SSE sends
    // nothing until there is something, so wait for the subscription the diagnostics count.
    let subscribed = Instant::now();
    loop {
        let output = newcomer("curl", dir.path())
            .args(["-s", &format!("http://127.0.0.1:{PORT}/api/v1/diagnostics")])
            .output()
            .unwrap();
        let diagnostics: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        if diagnostics["events"]["subscribers"].as_u64().unwrap_or(0) >= 1 {
            break;
        }
        assert!(
            subscribed.elapsed() < Duration::from_secs(60),
            "`{events_command}` never subscribed: {diagnostics}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let output = run_walk_through(&script, dir.path(), &readme);

    for (line, expected, number) in &script.answers {
        let answer = std::fs::read_to_string(dir.path().join(format!("answers/{number}"))).unwrap();
        let actual: Value = serde_json::from_str(answer.trim()).unwrap_or_else(|e| {
            panic!("README.md line {line}: the answer is not JSON ({e}): {answer}")
        });
        if let Err(difference) = shape_differences(expected, &actual) {
            panic!("README.md line {line}: {difference}");
        }
    }

    // The first sandbox's lifecycle, as `curl -N .../events` showed it.
    let sandbox: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sandbox.json")).unwrap())
            .unwrap();
    let id = sandbox["id"]
        .as_str()
        .expect("sandbox.json names the sandbox")
        .to_owned();
    let wanted = ["sandbox.created", "sandbox.running", "sandbox.destroyed"];
    let watched = Instant::now();
    let seen = loop {
        let text = std::fs::read_to_string(&events_path).unwrap_or_default();
        let seen: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .filter(|event| event.to_string().contains(&id))
            .filter_map(|event| event["type"].as_str().map(str::to_owned))
            .collect();
        if wanted.iter().all(|w| seen.iter().any(|s| s == w)) {
            break seen;
        }
        assert!(
            watched.elapsed() < Duration::from_secs(60),
            "`{events_command}` did not show {wanted:?} for {id}; it showed {seen:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = events.kill();
    let _ = events.wait();
    assert!(seen.len() >= 3, "{seen:?}");

    // With a local engine, the release binary's docker sandboxes take the fast path.
    let detail = newcomer("curl", dir.path())
        .args([
            "-s",
            &format!("http://127.0.0.1:{PORT}/api/v1/providers/docker"),
        ])
        .output()
        .unwrap();
    let detail: Value = serde_json::from_slice(&detail.stdout).unwrap_or(Value::Null);
    assert_eq!(
        detail["config"]["exec_path"], "agent",
        "after `{run_command}`, docker sandboxes take the agent's path: {detail}"
    );
    assert!(
        output.contains("\"exec_path\":\"agent\""),
        "the README's fast-path line printed the agent: {output}"
    );
    let log = server.log.clone();
    drop(server);
    assert!(
        !tail(&log).contains("panicked"),
        "the server panicked:\n{}",
        tail(&log)
    );
}

#[test]
fn blocks_are_found_per_section_and_skips_are_named() {
    let readme = "# t\n## A first sandbox\ntext\n```sh\necho one\n```\n\
                  <!-- README check: not run (needs a Dockerfile) -->\n\n```sh\necho two\n```\n\
                  ```json\n{}\n```\n### Later\n```sh\necho three\n```\n";
    let blocks = shell_blocks(readme, "A first sandbox");
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    assert_eq!(blocks[0].lines, vec!["echo one"]);
    assert_eq!(blocks[0].line, 5);
    assert_eq!(blocks[0].skipped, None);
    assert_eq!(blocks[1].skipped.as_deref(), Some("needs a Dockerfile"));
}

#[test]
fn an_answer_of_another_shape_is_found() {
    let shown = r#"{"id":"sb-3f9c0a1b2c3d4e5f","state":"running","provider":"mock",...}"#;
    let same: Value = serde_json::json!({"id": "sb-0123456789abcdef", "state": "running",
        "provider": "mock", "image": "alpine:latest"});
    assert_eq!(shape_differences(shown, &same), Ok(()));
    let renamed =
        serde_json::json!({"id": "sb-0123456789abcdef", "status": "running", "provider": "mock"});
    let err = shape_differences(shown, &renamed).unwrap_err();
    assert!(err.contains(".state is missing"), "{err}");
    let changed =
        serde_json::json!({"id": "sb-0123456789abcdef", "state": "creating", "provider": "mock"});
    let err = shape_differences(shown, &changed).unwrap_err();
    assert!(err.contains(".state is \"creating\""), "{err}");
    let kind = serde_json::json!({"id": 7, "state": "running", "provider": "mock"});
    let err = shape_differences(shown, &kind).unwrap_err();
    assert!(
        err.contains(".id is a string in the README but a number"),
        "{err}"
    );
    let closed = r#"{"status":"destroyed"}"#;
    let extra = serde_json::json!({"status": "destroyed", "id": "sb-0123456789abcdef"});
    let err = shape_differences(closed, &extra).unwrap_err();
    assert!(
        err.contains(".id is in the answer but not in the README"),
        "{err}"
    );
}

#[test]
fn the_script_captures_shown_answers_and_takes_out_the_events_line() {
    let blocks = vec![Block {
        line: 10,
        lines: [
            "# make one",
            "curl -s -X POST http://x/a \\",
            "  -d '{}' | tee a.json",
            "# => {\"a\":1}",
            "",
            "curl -N http://x/events",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect(),
        skipped: None,
    }];
    let script = script(&blocks);
    assert_eq!(script.events.as_deref(), Some("curl -N http://x/events"));
    assert_eq!(script.answers, vec![(13, "{\"a\":1}".to_owned(), 0)]);
    assert!(
        script
            .text
            .contains("{\ncurl -s -X POST http://x/a \\\n  -d '{}' | tee a.json\n} > answers/0"),
        "{}",
        script.text
    );
    assert!(!script.text.contains("curl -N"), "{}", script.text);
    assert_eq!(script.map.len(), script.text.lines().count());
    let wrapped = script
        .text
        .lines()
        .position(|l| l == "  -d '{}' | tee a.json")
        .unwrap();
    assert_eq!(script.map[wrapped], 12);
}
