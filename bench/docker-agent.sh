#!/usr/bin/env bash
# The Docker fast path (issue 22, decisions §14), side by side in one run on the same image:
# svc with the agent as every container's init, svc on the engine's exec path, and the raw
# Engine API. Per run: `svc-bench docker` against both servers at once (spawn to first exec,
# exec round trips of `true`, destroy, interleaved round by round), then `bench/transfer.sh`
# for file write and read MB/s on both paths.
# Targets: agent exec p50 <= 5 ms and at least 8x faster than the raw engine exec; file
# throughput at least 2x the archive-API path; spawn to first exec no slower than the engine
# path. Needs Docker with the local busybox test image and the static agent (scripts/test.sh
# or scripts/microvm-assets.sh builds both).
# Usage: bench/docker-agent.sh [RUNS] [SANDBOXES] [SIZE_MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-3}"
sandboxes="${2:-15}"
size_mib="${3:-1024}"
agent="$(bench_agent)"
cargo build --release --quiet -p svc -p svc-bench
scratch="$(mktemp -d -p "${SVC_BENCH_TMP:-/var/tmp}")"
trap 'rm -rf "$scratch"' EXIT

for run in $(seq "$runs"); do
    port="${SVC_BENCH_PORT:-17490}"
    mkdir -p "$scratch/agent-$run" "$scratch/engine-$run"
    svc_start "$PWD/target/release/svc" "$scratch/agent-$run" SVC_PROVIDERS__DOCKER__ENABLED=true \
        SVC_PROVIDERS__DOCKER__AGENT=always "SVC_PROVIDERS__DOCKER__AGENT_PATH=$agent"
    agent_pid="$pid" agent_url="http://127.0.0.1:$port"
    port=$((port + 1))
    svc_start "$PWD/target/release/svc" "$scratch/engine-$run" SVC_PROVIDERS__DOCKER__ENABLED=true \
        SVC_PROVIDERS__DOCKER__AGENT=never
    engine_pid="$pid" engine_url="http://127.0.0.1:$port"
    echo "== run $run"
    target/release/svc-bench --url "$agent_url" docker --sandboxes "$sandboxes" \
        --engine-url "$engine_url"
    pid="$agent_pid" svc_stop
    pid="$engine_pid" svc_stop
    sync
done
echo "== file throughput ($size_mib MiB)"
bench/transfer.sh "$runs" "$size_mib" "docker docker-agent"
