#!/usr/bin/env bash
# Pool mode's benchmark (issue 15): the same users, image and requests against svc with plain
# docker sandboxes and against svc in pool mode on docker (every user a workspace in one shared
# container), a fresh server each, alternating run by run. Needs Docker and the local busybox
# test image (scripts/test.sh builds it).
# Usage: bench/pool.sh [RUNS] [USERS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-3}"
users="${2:-4}"
rounds="${3:-20}"
port="${SVC_BENCH_PORT:-17470}"
image="${SVC_BENCH_IMAGE:-svc-test-busybox:latest}"

cargo build --release --quiet -p svc -p svc-bench
for run in $(seq "$runs"); do
    for mode in plain pool; do
        work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
        settings=(SVC_PROVIDERS__DOCKER__ENABLED=true SVC_PROVIDERS__DEFAULT=docker)
        if [ "$mode" = pool ]; then
            settings+=(SVC_POOL__ENABLED=true SVC_POOL__IMAGE="$image"
                SVC_POOL__MAX_USERS_PER_VM="$users" SVC_POOL__IDLE_TIMEOUT=1s)
        fi
        svc_start "$PWD/target/release/svc" "$work" "${settings[@]}"
        echo "run $run:"
        target/release/svc-bench --url "http://127.0.0.1:$port" pool --image "$image" \
            --users "$users" --rounds "$rounds" --label "$mode"
        # The emptied pool container goes after pool.idle_timeout; svc must still run then.
        [ "$mode" = plain ] || sleep 3
        svc_stop
        rm -rf "$work"
    done
done
