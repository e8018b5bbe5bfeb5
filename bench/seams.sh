#!/usr/bin/env bash
# The seams issue's benchmark: the same mock spawn+destroy and buffered-exec scenarios against
# (a) a baseline binary built from an earlier commit, (b) this build with auth off and (c) this
# build with an API key, interleaved run by run so the machine's drift hits all three alike.
# Usage: bench/seams.sh BASELINE_SVC_BINARY [RUNS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
baseline="${1:?usage: bench/seams.sh BASELINE_SVC_BINARY [RUNS] [SECONDS]}"
runs="${2:-5}"
seconds="${3:-5}"
port="${SVC_BENCH_PORT:-17424}"
key="bench-api-key-0123456789abcdef0123456789"

cargo build --release --quiet -p svc -p svc-bench
current="$PWD/target/release/svc"
url="http://127.0.0.1:$port"

# run LABEL BINARY AUTH(on|off)
run() {
    local label="$1" binary="$2" auth="$3" work
    work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
    if [ "$auth" = on ]; then
        svc_start "$binary" "$work" SVC_AUTH__ENABLED=true SVC_AUTH__API_KEY="$key"
    else
        svc_start "$binary" "$work"
    fi
    local env=()
    [ "$auth" = on ] && env=(env SVC_API_KEY="$key")
    printf '%s spawn-destroy: ' "$label"
    "${env[@]}" target/release/svc-bench --url "$url" spawn-destroy --concurrency 16 --seconds "$seconds" | tr '\n' ' '
    echo
    printf '%s pool-status: ' "$label"
    "${env[@]}" target/release/svc-bench --url "$url" pool-status --concurrency 32 --seconds "$seconds" | tr '\n' ' '
    echo
    printf '%s exec-latency: ' "$label"
    "${env[@]}" target/release/svc-bench --url "$url" exec-latency --iterations 300 | grep -i buffered | tr '\n' ' '
    echo
    svc_stop
    rm -rf "$work"
}

# The order rotates run by run: whatever drifts within a run (page cache, writeback of the
# previous run's deleted files) must not always hit the same configuration.
configs=("baseline $baseline off" "auth-off $current off" "api-key $current on")
for i in $(seq "$runs"); do
    echo "== run $i"
    for j in 0 1 2; do
        # shellcheck disable=SC2086
        run ${configs[$(( (i + j) % 3 ))]}
        sync
        sleep 2
    done
done
