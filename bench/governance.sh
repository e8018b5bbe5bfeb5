#!/usr/bin/env bash
# The governance issue's benchmark, one build side by side:
#  - mock spawn+destroy pairs/s with quotas and rate limiting off vs on. Both spread requests
#    over 1,000 owners (X-User-ID); "on" also has 1,000 saved owner quotas, global and per-owner
#    limits and the rate limiter enabled (with limits too high to refuse anything), so the
#    difference is the cost of checking them. Interleaved run by run, order rotating.
#  - queue wake-up: destroy -> the queued spawn answered, on max_sandboxes 1 in queue mode.
# Usage: bench/governance.sh [RUNS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-5}"
seconds="${2:-5}"
port="${SVC_BENCH_PORT:-17425}"
owners=1000

cargo build --release --quiet -p svc -p svc-bench
svc="$PWD/target/release/svc"
bench="$PWD/target/release/svc-bench"
url="http://127.0.0.1:$port"

# settings CONFIG(off|on|queue): the server's settings for a configuration.
settings() {
    case "$1" in
        on) echo "SVC_DEFAULTS__MAX_SANDBOXES=10000 SVC_DEFAULTS__MAX_SANDBOXES_PER_OWNER=100 \
SVC_RATE_LIMIT__ENABLED=true SVC_RATE_LIMIT__REQUESTS_PER_MINUTE=6000000 SVC_RATE_LIMIT__BURST=1000000" ;;
        queue) echo "SVC_DEFAULTS__MAX_SANDBOXES=1 SVC_DEFAULTS__SPAWN_OVERFLOW=queue" ;;
    esac
}

run() {
    local config="$1" work
    work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
    # shellcheck disable=SC2046
    svc_start "$svc" "$work" $(settings "$config")
    if [ "$config" = on ]; then
        "$bench" --url "$url" quotas --owners "$owners" >/dev/null
    fi
    printf 'governance-%s spawn-destroy: ' "$config"
    "$bench" --url "$url" spawn-destroy --concurrency 16 --seconds "$seconds" --owners "$owners"
    svc_stop
    rm -rf "$work"
}

configs=(off on)
for i in $(seq "$runs"); do
    echo "== run $i"
    for j in 0 1; do
        run "${configs[$(( (i + j) % 2 ))]}"
        sync
        sleep 2
    done
done

work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
# shellcheck disable=SC2046
svc_start "$svc" "$work" $(settings queue)
"$bench" --url "$url" queue-wakeup --iterations 300
svc_stop
rm -rf "$work"
