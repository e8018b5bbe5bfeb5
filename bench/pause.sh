#!/usr/bin/env bash
# Pause/resume benchmark (issue 18): the latency of `POST /sandboxes/{id}/pause` and `/resume`
# through svc, side by side with the engine's own `docker pause` / `docker unpause` on another
# container of the same image (the direct path), ROUNDS times each per run, on a fresh server
# per run. Prints per-run medians (ms) and the median of the runs; targets: pause and resume
# each under 50 ms p50 on docker. Needs curl, Docker and the local busybox test image.
# Usage: bench/pause.sh [RUNS] [ROUNDS] [PROVIDERS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-3}"
rounds="${2:-30}"
providers="${3:-docker mock}"
port="${SVC_BENCH_PORT:-17481}"
image="${SVC_BENCH_IMAGE:-svc-test-busybox:latest}"
api="http://127.0.0.1:$port/api/v1"

cargo build --release --quiet -p svc
scratch="$(mktemp -d -p "${SVC_BENCH_TMP:-/var/tmp}")"
direct="svc-bench-pause-$$"
trap 'docker rm -f "$direct" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT

# ms COMMAND...: runs it and prints its wall time in milliseconds.
ms() {
    local start end
    start="$(date +%s%N)"
    "$@" >/dev/null
    end="$(date +%s%N)"
    echo $(( (end - start) / 1000000 ))
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

results="$scratch/results"
: > "$results"
for provider in $providers; do
    for run in $(seq "$runs"); do
        work="$(mktemp -d -p "$scratch")"
        settings=()
        body='{}'
        if [ "$provider" = docker ]; then
            settings=(SVC_PROVIDERS__DOCKER__ENABLED=true)
            body="{\"provider\": \"docker\", \"image\": \"$image\"}"
            docker run -d --name "$direct" "$image" sleep 3600 >/dev/null
        fi
        svc_start "$PWD/target/release/svc" "$work" "${settings[@]}"
        id="$(curl -sf -X POST "$api/sandboxes" -H 'content-type: application/json' -d "$body" | sed 's/.*"id":"\([^"]*\)".*/\1/')"
        # A process to freeze, as a real sandbox would have.
        curl -sf -X POST "$api/sandboxes/$id/exec" -H 'content-type: application/json' \
            -d '{"command": "while true; do sleep 0.1; done", "background": true}' >/dev/null
        : > "$work/pause"; : > "$work/resume"; : > "$work/direct-pause"; : > "$work/direct-resume"
        for _ in $(seq "$rounds"); do
            ms curl -sf -X POST "$api/sandboxes/$id/pause" >> "$work/pause"
            ms curl -sf -X POST "$api/sandboxes/$id/resume" >> "$work/resume"
            if [ "$provider" = docker ]; then
                ms docker pause "$direct" >> "$work/direct-pause"
                ms docker unpause "$direct" >> "$work/direct-resume"
            fi
        done
        pause="$(median < "$work/pause")"; resume="$(median < "$work/resume")"
        direct_pause="-"; direct_resume="-"
        if [ "$provider" = docker ]; then
            direct_pause="$(median < "$work/direct-pause")"; direct_resume="$(median < "$work/direct-resume")"
            docker rm -f "$direct" >/dev/null
        fi
        curl -sf -X DELETE "$api/sandboxes/$id" >/dev/null
        svc_stop
        rm -rf "$work"
        printf '%s run %s (%s rounds): pause %s ms (docker CLI %s), resume %s ms (docker CLI %s)\n' \
            "$provider" "$run" "$rounds" "$pause" "$direct_pause" "$resume" "$direct_resume"
        echo "$provider $pause $resume $direct_pause $direct_resume" >> "$results"
    done
done

for provider in $providers; do
    column() { awk -v p="$provider" -v c="$1" '$1 == p { print $c }' "$results" | median; }
    printf '%s median of %s runs: pause %s ms, resume %s ms (target: each under 50 ms); docker CLI pause %s ms, unpause %s ms\n' \
        "$provider" "$runs" "$(column 2)" "$(column 3)" \
        "$( [ "$provider" = docker ] && column 4 || echo -)" "$( [ "$provider" = docker ] && column 5 || echo -)"
done
