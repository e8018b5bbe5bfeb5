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
runs="${1:-5}"
seconds="${2:-5}"
port="${SVC_BENCH_PORT:-17425}"
owners=1000

cargo build --release --quiet -p svc -p svc-bench
svc="$PWD/target/release/svc"
bench="$PWD/target/release/svc-bench"
url="http://127.0.0.1:$port"

# serve CONFIG(off|on|queue) WORKDIR: starts svc in the background; sets $pid.
serve() {
    local config="$1" work="$2"
    (
        cd "$work"
        export SVC_SERVER__PORT="$port" SVC_PROVIDERS__MOCK__ROOT_DIR="$work/mock" \
            SVC_PROVIDERS__DOCKER__ENABLED=false SVC_LOGGING__LEVEL=warn
        case "$config" in
            on)
                export SVC_DEFAULTS__MAX_SANDBOXES=10000 SVC_DEFAULTS__MAX_SANDBOXES_PER_OWNER=100 \
                    SVC_RATE_LIMIT__ENABLED=true SVC_RATE_LIMIT__REQUESTS_PER_MINUTE=6000000 \
                    SVC_RATE_LIMIT__BURST=1000000 ;;
            queue)
                export SVC_DEFAULTS__MAX_SANDBOXES=1 SVC_DEFAULTS__SPAWN_OVERFLOW=queue ;;
        esac
        exec "$svc" serve 2>"$work/svc.log"
    ) &
    pid=$!
    for _ in $(seq 100); do
        curl -sf "$url/api/v1/health" >/dev/null && return 0
        sleep 0.1
    done
    echo "svc ($config) did not come up; log:" >&2
    cat "$work/svc.log" >&2
    exit 1
}

stop() {
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

run() {
    local config="$1" work
    work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
    serve "$config" "$work"
    if [ "$config" = on ]; then
        "$bench" --url "$url" quotas --owners "$owners" >/dev/null
    fi
    printf 'governance-%s spawn-destroy: ' "$config"
    "$bench" --url "$url" spawn-destroy --concurrency 16 --seconds "$seconds" --owners "$owners"
    stop
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
serve queue "$work"
"$bench" --url "$url" queue-wakeup --iterations 300
stop
rm -rf "$work"
