#!/usr/bin/env bash
# Streamed transfer benchmark (issue 16): a file of SIZE MiB uploaded with `PUT /files` and
# downloaded with `GET /files` through svc, side by side with the direct path for the same
# bytes (mock: copying the host file into and out of the sandbox directory; docker: `docker cp`
# in and out), run by run. Providers: `mock`, `docker` (the engine's archive API) and
# `docker-agent` (the Docker fast path: the static agent at $SVC_BENCH_AGENT, default the one
# scripts/microvm-assets.sh builds), and svc's resident memory sampled every 50 ms during each transfer.
# Prints MB/s per run and the medians; targets: svc at least 50% of the direct throughput, and
# RSS growth under 64 MiB. Needs curl, and for docker Docker with the local busybox test image.
# Usage: bench/transfer.sh [RUNS] [SIZE_MIB] [PROVIDERS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-3}"
size_mib="${2:-2048}"
providers="${3:-mock docker}"
port="${SVC_BENCH_PORT:-17480}"
image="${SVC_BENCH_IMAGE:-svc-test-busybox:latest}"
api="http://127.0.0.1:$port/api/v1"

cargo build --release --quiet -p svc
scratch="$(mktemp -d -p "${SVC_BENCH_TMP:-/var/tmp}")"
trap 'rm -rf "$scratch"' EXIT
source_file="$scratch/source.bin"
head -c "$((size_mib << 20))" /dev/urandom > "$source_file"

now() { date +%s.%N; }
mbps() { awk -v s="$size_mib" -v t="$1" 'BEGIN { printf "%.0f", s * 1.048576 / t }'; }

# rss_watch: samples $pid's VmRSS (KiB) into $scratch/rss until rss_stop.
rss_watch() {
    : > "$scratch/rss"
    ( while kill -0 "$pid" 2>/dev/null; do
          awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" >> "$scratch/rss" 2>/dev/null || true
          sleep 0.05
      done ) &
    watcher=$!
}
rss_stop() { kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null || true; sort -n "$scratch/rss" | tail -1; }

results="$scratch/results"
: > "$results"
for provider in $providers; do
    for run in $(seq "$runs"); do
        work="$(mktemp -d -p "$scratch")"
        settings=()
        body='{}'
        case "$provider" in
            docker)
                settings=(SVC_PROVIDERS__DOCKER__ENABLED=true SVC_PROVIDERS__DOCKER__AGENT=never)
                body="{\"provider\": \"docker\", \"image\": \"$image\"}"
                ;;
            docker-agent)
                settings=(SVC_PROVIDERS__DOCKER__ENABLED=true SVC_PROVIDERS__DOCKER__AGENT=always
                    "SVC_PROVIDERS__DOCKER__AGENT_PATH=$(bench_agent)")
                body="{\"provider\": \"docker\", \"image\": \"$image\"}"
                ;;
        esac
        svc_start "$PWD/target/release/svc" "$work" "${settings[@]}"
        id="$(curl -sf -X POST "$api/sandboxes" -H 'content-type: application/json' -d "$body" | sed 's/.*"id":"\([^"]*\)".*/\1/')"
        base_rss="$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")"

        rss_watch
        start="$(now)"
        curl -sf -o /dev/null -T "$source_file" "$api/sandboxes/$id/files?path=/big.bin"
        up="$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')"
        up_rss="$(rss_stop)"
        rss_watch
        start="$(now)"
        curl -sf -o "$work/down.bin" "$api/sandboxes/$id/files?path=/big.bin"
        down="$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')"
        down_rss="$(rss_stop)"
        cmp -s "$source_file" "$work/down.bin" || { echo "the download differs from the upload" >&2; exit 1; }
        rm -f "$work/down.bin"

        if [ "$provider" = mock ]; then
            inside="$work/mock/$id/direct.bin"
            start="$(now)"; cat "$source_file" > "$inside"; sync -f "$inside" 2>/dev/null || true
            direct_up="$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')"
            start="$(now)"; cat "$inside" > "$work/direct-down.bin"
            direct_down="$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')"
        else
            start="$(now)"; docker cp -q "$source_file" "svc-$id:/direct.bin" 2>/dev/null || docker cp "$source_file" "svc-$id:/direct.bin" >/dev/null
            direct_up="$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')"
            start="$(now)"; docker cp "svc-$id:/direct.bin" "$work/direct-down.bin" >/dev/null
            direct_down="$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')"
        fi
        rm -f "$work/direct-down.bin"
        curl -sf -X DELETE "$api/sandboxes/$id" >/dev/null
        svc_stop
        rm -rf "$work"
        growth=$(( ( $(printf '%s\n%s\n' "$up_rss" "$down_rss" | sort -n | tail -1) - base_rss ) / 1024 ))
        printf '%s run %s: upload %s MB/s (direct %s), download %s MB/s (direct %s), RSS growth %s MiB\n' \
            "$provider" "$run" "$(mbps "$up")" "$(mbps "$direct_up")" "$(mbps "$down")" "$(mbps "$direct_down")" "$growth"
        echo "$provider $(mbps "$up") $(mbps "$direct_up") $(mbps "$down") $(mbps "$direct_down") $growth" >> "$results"
    done
done

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for provider in $providers; do
    column() { awk -v p="$provider" -v c="$1" '$1 == p { print $c }' "$results" | median; }
    up="$(column 2)"; direct_up="$(column 3)"; down="$(column 4)"; direct_down="$(column 5)"; growth="$(column 6)"
    printf '%s median of %s runs, %s MiB: upload %s MB/s = %s%% of direct %s; download %s MB/s = %s%% of direct %s; RSS growth %s MiB\n' \
        "$provider" "$runs" "$size_mib" "$up" "$(awk -v a="$up" -v b="$direct_up" 'BEGIN { printf "%.0f", 100 * a / b }')" "$direct_up" \
        "$down" "$(awk -v a="$down" -v b="$direct_down" 'BEGIN { printf "%.0f", 100 * a / b }')" "$direct_down" "$growth"
done
