#!/usr/bin/env bash
# Warm pool benchmark (issue 18): spawn-to-first-exec on docker, side by side, ROUNDS times each
# per run on a fresh server per run:
#   warm  POST /sandboxes {"template": <a template with warm_pool 2>}, then POST .../exec `true`
#         (each round waits for the pool to be full again first, untimed);
#   cold  the same with a template of the same image and no pool;
#   raw   the engine API itself (curl on the Docker socket): create, start, exec create, exec
#         start of a container of the same image: the floor svc's cold path stands on.
# Every timed step is one curl, so the three pay the same client overhead. Prints per-run
# medians (ms) and the median of the runs; targets: warm p50 under 60 ms and at least 4x faster
# than cold. Needs curl, Docker and the local busybox test image.
# Usage: bench/warm.sh [RUNS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-3}"
rounds="${2:-20}"
port="${SVC_BENCH_PORT:-17482}"
image="${SVC_BENCH_IMAGE:-svc-test-busybox:latest}"
api="http://127.0.0.1:$port/api/v1"
engine=(curl -sf --unix-socket /var/run/docker.sock -H 'content-type: application/json')
engine_api="http://localhost/v1.41"

cargo build --release --quiet -p svc
scratch="$(mktemp -d -p "${SVC_BENCH_TMP:-/var/tmp}")"
trap 'docker ps -aq --filter label=svc-bench-warm | xargs -r docker rm -f >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT

now_ns() { date +%s%N; }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed "s/.*\"$1\":\"\\{0,1\\}\\([^\",}]*\\).*/\\1/"; }

# spawn_exec TEMPLATE: one spawn and its first exec; prints the milliseconds and the sandbox ID.
spawn_exec() {
    local start id
    start="$(now_ns)"
    id="$(curl -sf -X POST "$api/sandboxes" -H 'content-type: application/json' \
        -d "{\"template\": \"$1\"}" | field id)"
    curl -sf -X POST "$api/sandboxes/$id/exec" -H 'content-type: application/json' \
        -d '{"command": "true"}' >/dev/null
    echo "$(( ($(now_ns) - start) / 1000000 )) $id"
}

# raw_engine: create, start and exec in a container through the engine API; prints the ms.
raw_engine() {
    local start id exec
    start="$(now_ns)"
    id="$("${engine[@]}" -X POST "$engine_api/containers/create" \
        -d "{\"Image\": \"$image\", \"Cmd\": [\"sleep\", \"3600\"], \"Labels\": {\"svc-bench-warm\": \"1\"}}" | field Id)"
    "${engine[@]}" -X POST "$engine_api/containers/$id/start" >/dev/null
    exec="$("${engine[@]}" -X POST "$engine_api/containers/$id/exec" \
        -d '{"Cmd": ["true"], "AttachStdout": true, "AttachStderr": true}' | field Id)"
    "${engine[@]}" -X POST "$engine_api/exec/$exec/start" -d '{"Detach": false, "Tty": false}' >/dev/null
    echo "$(( ($(now_ns) - start) / 1000000 ))"
    "${engine[@]}" -X DELETE "$engine_api/containers/$id?force=true" >/dev/null
}

wait_warm() {
    for _ in $(seq 300); do
        [ "$(curl -sf "$api/templates/warm" | field warm_ready)" = 2 ] && return 0
        sleep 0.05
    done
    echo "the warm pool did not refill within 15 s" >&2
    exit 1
}

results="$scratch/results"
: > "$results"
for run in $(seq "$runs"); do
    work="$(mktemp -d -p "$scratch")"
    svc_start "$PWD/target/release/svc" "$work" SVC_PROVIDERS__DOCKER__ENABLED=true \
        SVC_DEFAULTS__WARM_CHECK_INTERVAL=1s
    for template in warm cold; do
        pool=0; [ "$template" = warm ] && pool=2
        curl -sf -X POST "$api/templates" -H 'content-type: application/json' \
            -d "{\"name\": \"$template\", \"provider\": \"docker\", \"image\": \"$image\", \"warm_pool\": $pool}" >/dev/null
    done
    : > "$work/warm"; : > "$work/cold"; : > "$work/raw"
    for _ in $(seq "$rounds"); do
        wait_warm
        read -r took id < <(spawn_exec warm); echo "$took" >> "$work/warm"
        curl -sf -X DELETE "$api/sandboxes/$id" >/dev/null
        read -r took id < <(spawn_exec cold); echo "$took" >> "$work/cold"
        curl -sf -X DELETE "$api/sandboxes/$id" >/dev/null
        raw_engine >> "$work/raw"
    done
    warm="$(median < "$work/warm")"; cold="$(median < "$work/cold")"; raw="$(median < "$work/raw")"
    hits="$(curl -sf "$api/metrics/scrape" | awk '/^svc_warm_pool_hits_total\{template="warm"\}/ { print $2 }')"
    curl -sf -X DELETE "$api/templates/warm" >/dev/null
    sleep 1
    svc_stop
    rm -rf "$work"
    printf 'run %s (%s rounds, %s warm hits): warm %s ms, cold %s ms, raw engine %s ms\n' \
        "$run" "$rounds" "$hits" "$warm" "$cold" "$raw"
    echo "$warm $cold $raw" >> "$results"
done

column() { awk -v c="$1" '{ print $c }' "$results" | median; }
warm="$(column 1)"; cold="$(column 2)"; raw="$(column 3)"
printf 'median of %s runs: warm %s ms (target under 60 ms), cold %s ms (%sx warm; target at least 4x), raw engine create+start+exec %s ms\n' \
    "$runs" "$warm" "$cold" "$(awk -v c="$cold" -v w="$warm" 'BEGIN { printf "%.1f", c / w }')" "$raw"
