//! Signalling host processes, shared by the providers whose commands are host processes (mock)
//! or visible on this host (docker): signals go to the whole process group, and a process that
//! already ended is not an error.

use rustix::process::{kill_process, kill_process_group, Pid, Signal as RustixSignal};

use crate::{ProviderError, Signal};

fn to_rustix(signal: Signal) -> RustixSignal {
    match signal {
        Signal::Hup => RustixSignal::HUP,
        Signal::Int => RustixSignal::INT,
        Signal::Kill => RustixSignal::KILL,
        Signal::Term => RustixSignal::TERM,
    }
}

fn ignore_gone(result: rustix::io::Result<()>, what: Signal) -> Result<(), ProviderError> {
    match result {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(err) => Err(ProviderError::failed(format!("sending {what:?}: {err}"))),
    }
}

/// Sends `signal` to the process group led by `leader`.
pub(crate) fn signal_group(leader: Pid, signal: Signal) -> Result<(), ProviderError> {
    ignore_gone(kill_process_group(leader, to_rustix(signal)), signal)
}

/// Sends `signal` to one process.
pub(crate) fn signal_process(pid: Pid, signal: Signal) -> Result<(), ProviderError> {
    ignore_gone(kill_process(pid, to_rustix(signal)), signal)
}

/// The last `count` lines of `text`, in order.
pub(crate) fn last_lines(text: &str, count: usize) -> Vec<String> {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(count);
    all[start..].iter().map(|l| (*l).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_order() {
        assert_eq!(last_lines("a\nb\nc\n", 2), ["b", "c"]);
        assert_eq!(last_lines("a", 5), ["a"]);
        assert!(last_lines("a\nb", 0).is_empty());
    }
}
