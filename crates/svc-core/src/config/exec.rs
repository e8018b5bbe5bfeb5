//! `exec.*`: what svc keeps of each exec's output for replay by offset (decisions §2, §8).

use serde::{Deserialize, Serialize};

/// `exec.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ExecConfig {
    /// The last bytes of each stream of each exec kept for `GET .../execs/{id}/output`; at
    /// least 1.
    pub output_buffer_bytes: u64,
    /// The output kept for ended execs, all sandboxes together; beyond it, the oldest ended
    /// execs' output is dropped (reported lost when read).
    pub retained_output_bytes: u64,
    /// What buffered execs' output may hold in memory, all of them together; an exec whose
    /// output would pass it keeps what fits and answers `truncated: true` (decisions §30).
    pub buffered_memory_bytes: u64,
}

impl Default for ExecConfig {
    fn default() -> Self {
        ExecConfig {
            output_buffer_bytes: 8 * 1024 * 1024,
            retained_output_bytes: 256 * 1024 * 1024,
            buffered_memory_bytes: 256 * 1024 * 1024,
        }
    }
}
