//! `defaults.*`: what a spawn gets when it does not say, the ceilings it may ask for, global
//! admission limits and the reaper (decisions §2, §7, §10). A zero `max_*` limit means unlimited.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

/// What happens to a spawn (or pool placement) when capacity is exhausted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpawnOverflow {
    /// Refuse at once.
    #[default]
    Reject,
    /// Wait in the spawn queue until capacity frees or the queue timeout passes.
    Queue,
}

impl SpawnOverflow {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SpawnOverflow::Reject => "reject",
            SpawnOverflow::Queue => "queue",
        }
    }
}

impl fmt::Display for SpawnOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `defaults.*` keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DefaultsConfig {
    /// Image of a spawn that names none.
    pub image: String,
    /// Lifetime of a spawn that names none.
    pub ttl: GoDuration,
    /// Memory of a spawn that names none, in MiB.
    pub memory_mb: u64,
    /// vCPUs of a spawn that names none.
    pub vcpus: u32,
    /// Most memory a spawn or template may ask for, in MiB (decisions §30).
    pub max_memory_mb: u64,
    /// Most vCPUs a spawn or template may ask for (and never more than the host has).
    pub max_vcpus: u32,
    /// Longest lifetime a spawn or extend may ask for; `0s` = no ceiling.
    pub max_ttl: GoDuration,
    /// Exec deadline when the request names none; `0s` = no default deadline.
    pub default_exec_timeout: GoDuration,
    /// Longest exec deadline a request may ask for; `0s` = no ceiling.
    pub max_exec_timeout: GoDuration,
    /// Global cap on live sandboxes; `0` = unlimited.
    pub max_sandboxes: u64,
    /// Cap on live sandboxes per owner; `0` = unlimited.
    pub max_sandboxes_per_owner: u64,
    /// `reject` or `queue` when a limit is reached.
    pub spawn_overflow: SpawnOverflow,
    /// How long a queued spawn waits before giving up.
    pub spawn_queue_timeout: GoDuration,
    /// Most spawns waiting at once.
    pub max_spawn_queue: usize,
    /// How often expired sandboxes are destroyed.
    pub reap_interval: GoDuration,
    /// How long destroyed records stay readable.
    pub destroyed_retention: GoDuration,
    /// How long a provider may take to create a runtime (image pull included) before the spawn
    /// fails and is rolled back.
    pub spawn_timeout: GoDuration,
    /// Most warm runtimes (template `warm_pool`) this server keeps started at once, over every
    /// template (decisions §17).
    pub max_warm_runtimes: u32,
    /// How often the ready runtimes of warm pools are checked and the pools resynchronised
    /// with the templates (which another replica may have changed).
    pub warm_check_interval: GoDuration,
    /// Most template builds this server runs at once; later ones wait, shown `running`
    /// (decisions §17).
    pub max_concurrent_builds: u32,
    /// How long a template build may take before it fails.
    pub build_timeout: GoDuration,
}

impl Default for DefaultsConfig {
    fn default() -> Self {
        DefaultsConfig {
            image: "alpine:latest".to_owned(),
            ttl: GoDuration::from_secs(30 * 60),
            memory_mb: 512,
            vcpus: 1,
            max_memory_mb: 16384,
            max_vcpus: 8,
            max_ttl: GoDuration::from_secs(24 * 60 * 60),
            default_exec_timeout: GoDuration::from_secs(60),
            max_exec_timeout: GoDuration::from_secs(10 * 60),
            max_sandboxes: 0,
            max_sandboxes_per_owner: 0,
            spawn_overflow: SpawnOverflow::Reject,
            spawn_queue_timeout: GoDuration::from_secs(30),
            max_spawn_queue: 100,
            reap_interval: GoDuration::from_secs(10),
            destroyed_retention: GoDuration::from_secs(24 * 60 * 60),
            spawn_timeout: GoDuration::from_secs(5 * 60),
            max_warm_runtimes: 20,
            warm_check_interval: GoDuration::from_secs(10),
            max_concurrent_builds: 2,
            build_timeout: GoDuration::from_secs(30 * 60),
        }
    }
}
