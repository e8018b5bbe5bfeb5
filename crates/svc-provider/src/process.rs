//! Host processes as providers see them: `svc-process` errors become provider errors, and
//! signals reach the processes of the providers whose commands are host processes (mock) or
//! visible on this host (docker): the whole process group, a process already gone no error.

use rustix::process::Pid;

use crate::{ProviderError, Signal};

impl From<svc_process::ProcessError> for ProviderError {
    fn from(err: svc_process::ProcessError) -> Self {
        use svc_process::ProcessError as E;
        match err {
            E::EmptyCommand | E::NotFound { .. } | E::StdinClosed | E::NotATerminal => {
                ProviderError::InvalidRequest {
                    message: err.to_string(),
                }
            }
            E::Io { .. } => ProviderError::Failed {
                message: err.to_string(),
                source: Some(std::sync::Arc::new(err)),
            },
        }
    }
}

/// Sends `signal` to the process group led by `leader`.
pub(crate) fn signal_group(leader: Pid, signal: Signal) -> Result<(), ProviderError> {
    Ok(svc_process::signal_group(leader, signal)?)
}

/// Sends `signal` to one process.
pub(crate) fn signal_process(pid: Pid, signal: Signal) -> Result<(), ProviderError> {
    Ok(svc_process::signal_process(pid, signal)?)
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
