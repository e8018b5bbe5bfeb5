//! Exec requests and results (interface Exec; decisions §8), and the file-mode syntax the file
//! API shares.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

/// The exit code of a command that hit its deadline (as `timeout(1)` reports it).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// How the wire spells the exit code of a command whose status could not be learnt (the
/// provider lost it while waiting): answers and exit frames carry a number, so they say -1.
/// Inside svc such a code is `None`; events leave `exit_code` out.
pub const UNKNOWN_EXIT_CODE: i32 = -1;

/// An exit code as answers and exit frames carry it: [`UNKNOWN_EXIT_CODE`] when none is known.
pub fn exit_code_on_wire(code: Option<i32>) -> i32 {
    code.unwrap_or(UNKNOWN_EXIT_CODE)
}

/// `POST /sandboxes/{id}/exec` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ExecRequest {
    /// Shell command line (run by `/bin/sh -c`), or the program when `args` is given.
    pub command: String,
    /// Arguments; when present, `command` runs directly without a shell.
    pub args: Option<Vec<String>>,
    /// Extra environment.
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory inside the sandbox.
    pub workdir: Option<String>,
    /// Deadline, e.g. `30s`; default `defaults.default_exec_timeout`.
    #[schema(value_type = Option<String>, example = "30s")]
    pub timeout: Option<GoDuration>,
    /// Stream output as NDJSON instead of one buffered result.
    pub stream: bool,
    /// Answer 202 at once and let the command run on (no default deadline).
    pub background: bool,
    /// What a streamed exec does when its client goes away: `kill` (default) or `continue`.
    pub on_disconnect: Option<OnDisconnect>,
}

/// What a streamed exec does when its client goes away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    /// The command is killed.
    #[default]
    Kill,
    /// The command runs on as a background exec.
    Continue,
}

/// `202` answer of a background exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecStarted {
    /// Its ID.
    pub exec_id: crate::ExecId,
    /// Always `running`.
    pub status: ExecStatus,
}

/// The buffered exec result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecResult {
    /// The exec's ID (`ex-` + 16 hex), as in its events.
    pub exec_id: crate::ExecId,
    /// Exit code; 124 on timeout, 128+N when killed by signal N.
    pub exit_code: i32,
    /// Standard output (invalid UTF-8 replaced by U+FFFD).
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Wall time, as a Go duration.
    #[schema(value_type = String, example = "12.5ms")]
    pub duration: GoDuration,
    /// True when the deadline killed the command.
    pub timed_out: bool,
    /// Present and true when output was left out: past the per-stream limit, or past what
    /// buffered execs may hold in memory together (`exec.buffered_memory_bytes`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// Where an exec is in its life (decisions §8, "Exec jobs").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// Still running.
    Running,
    /// Ended by itself (also after a signal sent through the signal route: 128+N).
    Exited,
    /// Its deadline killed it.
    TimedOut,
    /// svc ended it: the kill route, a client that went away, or the sandbox ending.
    Killed,
    /// It could not start.
    Failed,
}

/// One exec as `GET /sandboxes/{id}/execs` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecRecord {
    /// Its ID.
    pub exec_id: crate::ExecId,
    /// The sandbox it runs in.
    pub sandbox_id: crate::SandboxId,
    /// The command as given.
    pub command: String,
    /// Its arguments, when given (then no shell ran it).
    pub args: Option<Vec<String>>,
    /// True for a background exec.
    pub background: bool,
    /// Where it is.
    pub status: ExecStatus,
    /// Exit code; null while running.
    pub exit_code: Option<i32>,
    /// When it started.
    #[schema(value_type = String, format = DateTime)]
    pub started_at: crate::Timestamp,
    /// When it ended; null while running.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub ended_at: Option<crate::Timestamp>,
    /// Bytes it wrote to stdout so far.
    pub stdout_bytes: u64,
    /// Bytes it wrote to stderr so far.
    pub stderr_bytes: u64,
    /// Present only when svc lost sight of the exec (a restart while it ran): what is and is
    /// not known of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Parses a file mode: 1 to 4 octal digits (`755`, `0644`), optionally prefixed `0o`.
pub fn parse_mode(text: &str) -> Result<u32, String> {
    let digits = text.trim().strip_prefix("0o").unwrap_or(text.trim());
    let invalid = || {
        format!(
            "invalid mode {}: expected octal digits such as 644 or 0755",
            crate::error::echo(text)
        )
    };
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b))
    {
        return Err(invalid());
    }
    u32::from_str_radix(digits, 8).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_modes() {
        assert_eq!(parse_mode("755"), Ok(0o755));
        assert_eq!(parse_mode("0644"), Ok(0o644));
        assert_eq!(parse_mode("0o600"), Ok(0o600));
        assert_eq!(parse_mode("4755"), Ok(0o4755));
        for bad in ["", "999", "abc", "8", "07777777", "-1", "0x1ff"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
    }
}
