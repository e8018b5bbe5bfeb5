//! `stats` on the docker provider: one sample of the engine's container stats, reduced the way
//! the docker CLI reduces it (`docker stats`), so the numbers match what operators see there.

use bollard::models::{ContainerMemoryStats, ContainerStatsResponse};
use bollard::query_parameters::StatsOptions;
use bollard::Docker;
use futures::StreamExt;
use svc_core::{Clock, SystemClock};

use super::errors::container_error;
use crate::{ProviderError, SandboxStats};

/// Takes one sample of `container`. `one_shot: false` makes the engine wait for a second
/// collection cycle (about a second) so `precpu_stats` is filled and a CPU rate exists.
pub(super) async fn sample(
    docker: &Docker,
    container: &str,
    sandbox_id: &str,
) -> Result<SandboxStats, ProviderError> {
    let options = StatsOptions {
        stream: false,
        one_shot: false,
    };
    let mut stream = docker.stats(container, Some(options));
    let response = stream
        .next()
        .await
        .ok_or_else(|| ProviderError::failed("reading container stats: the engine sent none"))?
        .map_err(|e| container_error(sandbox_id, "reading container stats", e))?;
    Ok(reduce(&response, SystemClock.now()))
}

/// The engine's sample as svc's stats, taken at `sampled_at`.
fn reduce(response: &ContainerStatsResponse, sampled_at: svc_core::Timestamp) -> SandboxStats {
    let memory = response.memory_stats.as_ref();
    let (net_rx_bytes, net_tx_bytes) = response
        .networks
        .iter()
        .flat_map(|networks| networks.values())
        .fold((0u64, 0u64), |(rx, tx), network| {
            (
                rx.saturating_add(network.rx_bytes.unwrap_or(0)),
                tx.saturating_add(network.tx_bytes.unwrap_or(0)),
            )
        });
    SandboxStats {
        cpu_percent: cpu_percent(response),
        memory_bytes: memory.map_or(0, memory_in_use),
        memory_limit_bytes: memory.and_then(|m| m.limit).unwrap_or(0),
        pids: response
            .pids_stats
            .as_ref()
            .and_then(|p| p.current)
            .unwrap_or(0),
        net_rx_bytes,
        net_tx_bytes,
        sampled_at,
    }
}

/// The docker CLI's `calculateCPUPercentUnix`: the container's share of the host's CPU time
/// between the two samples, scaled by the online CPUs (so 100 is one CPU busy).
fn cpu_percent(response: &ContainerStatsResponse) -> f64 {
    let total = |stats: Option<&bollard::models::ContainerCpuStats>| {
        stats
            .and_then(|s| s.cpu_usage.as_ref())
            .and_then(|u| u.total_usage)
            .unwrap_or(0)
    };
    let system = |stats: Option<&bollard::models::ContainerCpuStats>| {
        stats.and_then(|s| s.system_cpu_usage).unwrap_or(0)
    };
    let (now, before) = (response.cpu_stats.as_ref(), response.precpu_stats.as_ref());
    let cpu_delta = total(now).saturating_sub(total(before));
    let system_delta = system(now).saturating_sub(system(before));
    let online = now
        .and_then(|s| s.online_cpus)
        .filter(|n| *n > 0)
        .map(f64::from)
        .or_else(|| {
            now.and_then(|s| s.cpu_usage.as_ref())
                .and_then(|u| u.percpu_usage.as_ref())
                .map(|per_cpu| per_cpu.len() as f64)
        })
        .unwrap_or(0.0);
    if cpu_delta == 0 || system_delta == 0 {
        return 0.0;
    }
    (cpu_delta as f64 / system_delta as f64) * online * 100.0
}

/// The docker CLI's `calculateMemUsageUnixNoCache`: usage without the page cache the kernel
/// can reclaim (cgroup v1 `total_inactive_file`, cgroup v2 `inactive_file`, older engines
/// `cache`).
fn memory_in_use(memory: &ContainerMemoryStats) -> u64 {
    let usage = memory.usage.unwrap_or(0);
    let reclaimable = memory.stats.as_ref().and_then(|stats| {
        ["total_inactive_file", "inactive_file", "cache"]
            .iter()
            .find_map(|key| stats.get(*key).copied())
    });
    match reclaimable {
        Some(reclaimable) if reclaimable < usage => usage - reclaimable,
        _ => usage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{
        ContainerCpuStats, ContainerCpuUsage, ContainerNetworkStats, ContainerPidsStats,
    };
    use std::collections::HashMap;

    fn cpu(total: u64, system: u64) -> ContainerCpuStats {
        ContainerCpuStats {
            cpu_usage: Some(ContainerCpuUsage {
                total_usage: Some(total),
                percpu_usage: Some(vec![0, 0]),
                ..Default::default()
            }),
            system_cpu_usage: Some(system),
            online_cpus: Some(2),
            ..Default::default()
        }
    }

    fn network(rx: u64, tx: u64) -> ContainerNetworkStats {
        ContainerNetworkStats {
            rx_bytes: Some(rx),
            tx_bytes: Some(tx),
            ..Default::default()
        }
    }

    #[test]
    fn reduces_like_the_docker_cli() {
        let response = ContainerStatsResponse {
            cpu_stats: Some(cpu(1_500, 10_000)),
            precpu_stats: Some(cpu(1_000, 8_000)),
            memory_stats: Some(ContainerMemoryStats {
                usage: Some(10_000),
                limit: Some(256 * 1024 * 1024),
                stats: Some(HashMap::from([
                    ("total_inactive_file".to_owned(), 4_000),
                    ("cache".to_owned(), 6_000),
                ])),
                ..Default::default()
            }),
            pids_stats: Some(ContainerPidsStats {
                current: Some(3),
                limit: Some(256),
            }),
            networks: Some(HashMap::from([
                ("eth0".to_owned(), network(100, 10)),
                ("eth1".to_owned(), network(5, 1)),
            ])),
            ..Default::default()
        };
        let at = svc_core::Timestamp::default();
        let stats = reduce(&response, at);
        // 500 of 2000 host nanoseconds on 2 CPUs: half of one CPU.
        assert!((stats.cpu_percent - 50.0).abs() < 1e-9, "{stats:?}");
        assert_eq!(
            stats.memory_bytes, 6_000,
            "inactive file pages are not in use"
        );
        assert_eq!(stats.memory_limit_bytes, 256 * 1024 * 1024);
        assert_eq!(stats.pids, 3);
        assert_eq!((stats.net_rx_bytes, stats.net_tx_bytes), (105, 11));
        assert_eq!(stats.sampled_at, at);
    }

    #[test]
    fn an_empty_sample_is_zero() {
        // What the engine answers for a container that is not running, or has no network.
        let stats = reduce(&ContainerStatsResponse::default(), Default::default());
        assert_eq!(stats.cpu_percent, 0.0);
        assert_eq!(
            (stats.memory_bytes, stats.memory_limit_bytes, stats.pids),
            (0, 0, 0)
        );
        assert_eq!((stats.net_rx_bytes, stats.net_tx_bytes), (0, 0));
    }

    #[test]
    fn cgroup_v2_and_cache_fallbacks() {
        let memory = |key: &str, value: u64| ContainerMemoryStats {
            usage: Some(1_000),
            stats: Some(HashMap::from([(key.to_owned(), value)])),
            ..Default::default()
        };
        assert_eq!(memory_in_use(&memory("inactive_file", 300)), 700);
        assert_eq!(memory_in_use(&memory("cache", 100)), 900);
        assert_eq!(
            memory_in_use(&memory("inactive_file", 5_000)),
            1_000,
            "a reclaimable figure above usage is ignored"
        );
    }
}
