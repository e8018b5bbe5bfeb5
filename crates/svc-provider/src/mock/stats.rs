//! `stats` on the mock provider. A mock sandbox's processes are host processes, and the mock
//! keeps no table of them (nothing survives a server restart but the directory), so they are
//! found in `/proc`: every process whose working directory lies inside the sandbox directory,
//! which is where exec starts each command. A command that `cd`s out of the sandbox is no
//! longer counted; the mock is not isolation, and its stats are an estimate to match.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use svc_core::{Clock, SystemClock};

use crate::{ProviderError, SandboxStats};

/// The window between the two CPU-time reads.
const CPU_WINDOW: Duration = Duration::from_millis(100);
/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux's mainstream
/// architectures; reading it would need `sysconf`).
const USER_HZ: f64 = 100.0;

/// One process at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcessSample {
    /// `starttime` tells a process apart from a later one reusing its PID.
    start_ticks: u64,
    /// `utime + stime`.
    cpu_ticks: u64,
    rss_bytes: u64,
}

/// Every process of the sandbox, by PID, and when they were read.
struct Scan {
    at: Instant,
    processes: HashMap<u32, ProcessSample>,
}

/// Samples the processes working inside `sandbox_dir`; `memory_limit_bytes` is reported as
/// given (the mock enforces no limit).
pub(super) async fn sample(
    sandbox_dir: PathBuf,
    memory_limit_bytes: u64,
) -> Result<SandboxStats, ProviderError> {
    let base = tokio::fs::canonicalize(&sandbox_dir).await?;
    let first = scan_blocking(base.clone()).await?;
    tokio::time::sleep(CPU_WINDOW).await;
    let second = scan_blocking(base).await?;
    Ok(SandboxStats {
        cpu_percent: cpu_percent(&first, &second),
        memory_bytes: second
            .processes
            .values()
            .fold(0u64, |sum, p| sum.saturating_add(p.rss_bytes)),
        memory_limit_bytes,
        pids: second.processes.len() as u64,
        net_rx_bytes: 0,
        net_tx_bytes: 0,
        sampled_at: SystemClock.now(),
    })
}

async fn scan_blocking(base: PathBuf) -> Result<Scan, ProviderError> {
    tokio::task::spawn_blocking(move || scan(&base))
        .await
        .map_err(|e| ProviderError::caused("stats task failed", e))?
}

/// Reads `/proc` for the processes whose working directory is `base` or below it. Processes
/// that end mid-scan, or that belong to users this one may not inspect, are skipped.
fn scan(base: &Path) -> Result<Scan, ProviderError> {
    let entries = std::fs::read_dir("/proc").map_err(|e| ProviderError::io("reading /proc", e))?;
    let at = Instant::now();
    let mut processes = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        // Zombies and other users' processes have no readable cwd.
        let Ok(cwd) = std::fs::read_link(dir.join("cwd")) else {
            continue;
        };
        if !cwd.starts_with(base) {
            continue;
        }
        let Some((start_ticks, cpu_ticks)) = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .as_deref()
            .and_then(parse_stat)
        else {
            continue;
        };
        let rss_bytes = std::fs::read_to_string(dir.join("status"))
            .ok()
            .as_deref()
            .and_then(parse_rss)
            .unwrap_or(0);
        processes.insert(
            pid,
            ProcessSample {
                start_ticks,
                cpu_ticks,
                rss_bytes,
            },
        );
    }
    Ok(Scan { at, processes })
}

/// `(starttime, utime + stime)` from `/proc/<pid>/stat`. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from its last `)`.
fn parse_stat(text: &str) -> Option<(u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is index 0 here: utime is field 14, stime 15, starttime 22.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    Some((field(22)?, field(14)?.saturating_add(field(15)?)))
}

/// Resident memory from `/proc/<pid>/status` (`VmRSS:  1234 kB`), which spares knowing the
/// page size that `statm` counts in. Kernel threads have none.
fn parse_rss(text: &str) -> Option<u64> {
    let value = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib = value
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

/// CPU time used between the scans, in percent of one CPU. A process new in the second scan
/// started inside the window, so all its time counts; one that ended in between is lost.
fn cpu_percent(first: &Scan, second: &Scan) -> f64 {
    let elapsed = second.at.saturating_duration_since(first.at).as_secs_f64();
    if elapsed <= 0.0 {
        return 0.0;
    }
    let ticks = second
        .processes
        .iter()
        .map(|(pid, now)| match first.processes.get(pid) {
            Some(before) if before.start_ticks == now.start_ticks => {
                now.cpu_ticks.saturating_sub(before.cpu_ticks)
            }
            _ => now.cpu_ticks,
        })
        .fold(0u64, u64::saturating_add);
    ticks as f64 / USER_HZ / elapsed * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    7 5 0 0 20 0 1 0 123456 1000000 200 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((123_456, 12)));
        assert_eq!(parse_stat("4242 (short) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn rss_is_read_in_kib() {
        let status = "Name:\tsleep\nVmPeak:\t  2000 kB\nVmRSS:\t     512 kB\nThreads:\t1\n";
        assert_eq!(parse_rss(status), Some(512 * 1024));
        assert_eq!(parse_rss("Name:\tkthreadd\nThreads:\t1\n"), None);
    }

    #[test]
    fn cpu_counts_each_process_over_the_window() {
        let at = Instant::now();
        let process = |start_ticks, cpu_ticks| ProcessSample {
            start_ticks,
            cpu_ticks,
            rss_bytes: 0,
        };
        let first = Scan {
            at,
            processes: HashMap::from([(1, process(10, 100)), (2, process(20, 50))]),
        };
        let second = Scan {
            at: at + Duration::from_millis(200),
            // 1 used 10 ticks; 2 is a new process on a reused PID (4 ticks); 3 is new (6).
            processes: HashMap::from([
                (1, process(10, 110)),
                (2, process(30, 4)),
                (3, process(40, 6)),
            ]),
        };
        // 20 ticks = 0.2 s of CPU in 0.2 s: one CPU busy.
        assert!((cpu_percent(&first, &second) - 100.0).abs() < 1e-9);
        assert_eq!(cpu_percent(&second, &second), 0.0);
    }
}
