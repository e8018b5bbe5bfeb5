#!/usr/bin/env bash
# Template builds (issue 23, decisions §17): the same small context built through svc
# (`POST /templates/{name}/build`, timed to the log's result line) and straight through the
# Engine API, alternating round by round in one run against one engine.
# Target: svc's median within 10% of the engine's. Needs Docker with the local busybox test
# image (scripts/test.sh builds it).
# Usage: bench/build.sh [RUNS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-3}"
rounds="${2:-8}"
cargo build --release --quiet -p svc -p svc-bench
scratch="$(mktemp -d -p "${SVC_BENCH_TMP:-/var/tmp}")"
trap 'rm -rf "$scratch"' EXIT
port="${SVC_BENCH_PORT:-17495}"
for run in $(seq "$runs"); do
    mkdir -p "$scratch/run-$run"
    svc_start "$PWD/target/release/svc" "$scratch/run-$run" SVC_PROVIDERS__DOCKER__ENABLED=true \
        SVC_PROVIDERS__DOCKER__AGENT=never
    echo "== run $run"
    target/release/svc-bench --url "http://127.0.0.1:$port" template-build --rounds "$rounds"
    svc_stop
done
