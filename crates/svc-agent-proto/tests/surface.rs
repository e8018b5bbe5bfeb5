//! The protocol's surface, pinned: one message of every kind, as JSON, against
//! `tests/surface.snapshot`. A change here is a protocol change: follow VERSIONING.md, then
//! refresh the snapshot with `SVC_UPDATE_SNAPSHOT=1 cargo test -p svc-agent-proto`.

#![allow(clippy::unwrap_used)]

use svc_agent_proto::{
    Control, ErrorKind, FileEntry, Op, Reply, Request, RunAs, WindowSize, AGENT_PORT, MAX_CHUNK,
    MAX_FRAME, VERSION,
};

fn surface() -> String {
    let entry = FileEntry {
        name: "a.txt".into(),
        path: "/work/a.txt".into(),
        size: 5,
        is_dir: false,
        mtime_ns: 1_700_000_000_000_000_000,
        mode: 0o644,
    };
    let requests = [
        Op::Hello,
        Op::Exec {
            argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
            env: vec![("A".into(), "1".into())],
            workdir: Some("/work".into()),
            tty: Some(WindowSize { cols: 80, rows: 24 }),
            stdin: true,
            user: None,
            detach: false,
        },
        Op::Exec {
            argv: vec!["id".into()],
            env: Vec::new(),
            workdir: None,
            tty: None,
            stdin: false,
            user: Some(RunAs {
                uid: 20001,
                gid: 20001,
                home: "/workspace/alice".into(),
            }),
            detach: true,
        },
        Op::ExecStatus {
            handle: "5f0c-7".into(),
        },
        Op::ExecSignal {
            handle: "5f0c-7".into(),
            signal: 15,
        },
        Op::Logs { lines: 100 },
        Op::ReadArchive {
            path: "/work".into(),
        },
        Op::WriteArchive {
            path: "/work".into(),
        },
        Op::ReadFile {
            path: "/work/a.txt".into(),
        },
        Op::WriteFile {
            path: "/work/a.txt".into(),
            mode: 0o644,
        },
        Op::Delete {
            path: "/work".into(),
            recursive: true,
        },
        Op::ListDir {
            path: "/work".into(),
        },
        Op::Move {
            from: "/work/a".into(),
            to: "/work/b".into(),
        },
        Op::Chmod {
            path: "/work/a".into(),
            mode: 0o755,
        },
        Op::Stat {
            path: "/work/a".into(),
        },
        Op::Glob {
            pattern: "/work/**/*.rs".into(),
        },
    ]
    .into_iter()
    .map(|op| serde_json::to_string(&Request::new(op)).unwrap());
    let controls = [
        Control::Resize(WindowSize {
            cols: 120,
            rows: 40,
        }),
        Control::Signal { signal: 15 },
    ]
    .iter()
    .map(|c| serde_json::to_string(c).unwrap())
    .collect::<Vec<_>>();
    let replies = [
        Reply::Hello {
            version: 1,
            agent_version: "0.1.0".into(),
            uptime_secs: 3,
        },
        Reply::Started {
            pid: 42,
            handle: None,
        },
        Reply::Started {
            pid: 42,
            handle: Some("5f0c-7".into()),
        },
        Reply::ExecStatus {
            running: true,
            code: None,
        },
        Reply::ExecStatus {
            running: false,
            code: Some(3),
        },
        Reply::Archive,
        Reply::Lines {
            lines: vec!["exec 1: id".into()],
        },
        Reply::Exit { code: 0 },
        Reply::File { size: 5 },
        Reply::Done,
        Reply::Info {
            entry: entry.clone(),
        },
        Reply::Entries {
            entries: vec![entry],
        },
        Reply::Paths {
            paths: vec!["/work/a.txt".into()],
        },
        Reply::Error {
            kind: ErrorKind::NotFound,
            message: "/work/x: no such file or directory".into(),
        },
        Reply::Error {
            kind: ErrorKind::Invalid,
            message: "m".into(),
        },
        Reply::Error {
            kind: ErrorKind::UnsupportedVersion,
            message: "m".into(),
        },
        Reply::Error {
            kind: ErrorKind::Failed,
            message: "m".into(),
        },
    ]
    .iter()
    .map(|r| serde_json::to_string(r).unwrap())
    .collect::<Vec<_>>();
    let mut lines = vec![
        format!(
            "version {VERSION}, port {AGENT_PORT}, max frame {MAX_FRAME}, max chunk {MAX_CHUNK}"
        ),
        "frame kinds: json=1 data=2 stdout=3 stderr=4 end=5 file_data=6".to_owned(),
    ];
    lines.extend(requests);
    lines.extend(controls);
    lines.extend(replies);
    lines.join("\n") + "\n"
}

#[test]
fn the_protocol_surface_matches_its_snapshot() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/surface.snapshot");
    let now = surface();
    if std::env::var_os("SVC_UPDATE_SNAPSHOT").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let pinned = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        now, pinned,
        "the agent protocol changed: follow crates/svc-agent-proto/VERSIONING.md, then refresh \
         the snapshot with SVC_UPDATE_SNAPSHOT=1"
    );
}
