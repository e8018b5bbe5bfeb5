#!/usr/bin/env bash
# The observability issue's benchmark, one build side by side:
#  - GET /health requests/s and buffered exec p50, without and with a scraper polling
#    GET /metrics/scrape every 100 ms (fresh server each, order rotating run by run);
#  - one scrape's latency on a server holding 10,000 running mock sandboxes (target < 50 ms).
# Usage: bench/observe.sh [RUNS] [SECONDS] [SANDBOXES]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-5}"
seconds="${2:-5}"
sandboxes="${3:-10000}"
port="${SVC_BENCH_PORT:-17428}"

cargo build --release --quiet -p svc -p svc-bench
svc="$PWD/target/release/svc"
bench="$PWD/target/release/svc-bench"
url="http://127.0.0.1:$port"
results="$(mktemp -p "${SVC_BENCH_TMP:-/tmp}")"

run() {
    local config="$1" work poller="" line
    work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
    svc_start "$svc" "$work"
    if [ "$config" = scraped ]; then
        "$bench" --url "$url" scrape-poll --interval-ms 100 --seconds 600 >"$work/poll.txt" &
        poller=$!
        sleep 0.5
    fi
    line="$("$bench" --url "$url" health --concurrency 32 --seconds "$seconds")"
    echo "$config health $line" | tee -a "$results"
    line="$("$bench" --url "$url" exec-latency --iterations 300 | grep "svc buffered exec")"
    echo "$config exec $line" | tee -a "$results"
    [ -n "$poller" ] && kill "$poller" 2>/dev/null && wait "$poller" 2>/dev/null || true
    svc_stop
    rm -rf "$work"
}

configs=(plain scraped)
for i in $(seq "$runs"); do
    echo "== run $i"
    for j in 0 1; do
        run "${configs[$(( (i + j) % 2 ))]}"
        sleep 1
    done
done

python3 - "$results" <<'PY'
import re, statistics, sys
health, execs = {}, {}
for line in open(sys.argv[1]):
    config, kind = line.split()[:2]
    if kind == "health":
        health.setdefault(config, []).append(float(re.search(r"= (\d+)/s", line).group(1)))
    else:
        execs.setdefault(config, []).append(float(re.search(r"p50 ([\d.]+)", line).group(1)))
for name, values, unit in (("health req/s", health, "req/s"), ("buffered exec p50", execs, "ms")):
    plain, scraped = values["plain"], values["scraped"]
    ratios = [s / p for p, s in zip(plain, scraped)]
    print(f"{name}: median plain {statistics.median(plain):.2f} {unit}, scraped {statistics.median(scraped):.2f} {unit}; "
          f"per-run scraped/plain {' '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}")
PY
rm -f "$results"

work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
svc_start "$svc" "$work"
"$bench" --url "$url" scrape-latency --sandboxes "$sandboxes" --iterations 50
svc_stop
rm -rf "$work"
