#!/usr/bin/env bash
# The PostgreSQL issue's benchmark, one build side by side: mock spawn+destroy pairs/s on SQLite
# (one node), PostgreSQL with one replica, and PostgreSQL with three replicas (each loaded by
# its own load process; the pairs add up), order rotating run by run; then the cross-replica
# event latency (spawn on one replica, `sandbox.created` on another).
# Needs PostgreSQL: SVC_BENCH_POSTGRES_DSN, or the machine's cluster (started and given a fresh
# database as scripts/test.sh does).
# Usage: bench/replicas.sh [RUNS] [SECONDS] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-5}"
seconds="${2:-5}"
concurrency="${3:-18}"
base_port="${SVC_BENCH_PORT:-17430}"

say() { printf 'replicas.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
if [ -z "${SVC_BENCH_POSTGRES_DSN:-}" ]; then
    . scripts/postgres-test-env.sh
    ensure_postgres
    SVC_BENCH_POSTGRES_DSN="$SVC_TEST_POSTGRES_DSN"
fi
dsn="$SVC_BENCH_POSTGRES_DSN"

cargo build --release --quiet -p svc -p svc-bench
svc="$PWD/target/release/svc"
bench="$PWD/target/release/svc-bench"
results="$(mktemp -p "${SVC_BENCH_TMP:-/tmp}")"


run() {
    local config="$1" replicas=1 settings=() i
    case "$config" in
        sqlite) settings=() ;;
        pg1) settings=(SVC_DATABASE__DRIVER=postgres "SVC_DATABASE__DSN=$(fresh_dsn "$dsn")") ;;
        pg3)
            replicas=3
            settings=(SVC_DATABASE__DRIVER=postgres "SVC_DATABASE__DSN=$(fresh_dsn "$dsn")") ;;
    esac
    replicas_start "$replicas" "$svc" "${settings[@]}"
    local per=$((concurrency / replicas)) loads=() total=0 rate
    for i in $(seq 0 $((replicas - 1))); do
        "$bench" --url "${urls[$i]}" spawn-destroy --concurrency "$per" --seconds "$seconds" \
            >"${works[$i]}/load.txt" &
        loads+=("$!")
    done
    for i in $(seq 0 $((replicas - 1))); do
        wait "${loads[$i]}"
        rate="$(sed -n 's/.*= \([0-9]*\)\/s.*/\1/p' "${works[$i]}/load.txt")"
        total=$((total + rate))
    done
    echo "$config spawn-destroy: $total pairs/s ($replicas replica(s), concurrency $concurrency)" | tee -a "$results"
    replicas_stop
}

configs=(sqlite pg1 pg3)
for i in $(seq "$runs"); do
    echo "== run $i"
    for j in 0 1 2; do
        run "${configs[$(( (i + j) % 3 ))]}"
        sleep 1
    done
done

python3 - "$results" <<'PY'
import re, statistics, sys
rates = {}
for line in open(sys.argv[1]):
    rates.setdefault(line.split()[0], []).append(int(re.search(r": (\d+) pairs", line).group(1)))
for c in ("sqlite", "pg1", "pg3"):
    print(f"median {c}: {statistics.median(rates[c])} pairs/s over {len(rates[c])} runs")
ratios = [b / a for a, b in zip(rates["pg1"], rates["pg3"])]
print("per-run pg3/pg1: " + " ".join(f"{r:.2f}" for r in ratios) + f"; median {statistics.median(ratios):.2f} (target >= 2)")
PY
rm -f "$results"

# Cross-replica event latency on two replicas.
replicas_start 2 "$svc" SVC_DATABASE__DRIVER=postgres "SVC_DATABASE__DSN=$(fresh_dsn "$dsn")"
"$bench" event-latency --publish "${urls[0]}" --subscribe "${urls[1]}" --iterations 300
replicas_stop
