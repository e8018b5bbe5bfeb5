#!/usr/bin/env bash
# The scale benchmark (issue 21): `svc-bench scale` against one svc on SQLite and against three
# replicas on PostgreSQL, side by side, at each size (live sandboxes = SSE subscribers; exec
# streams a tenth of that), RUNS times each, order alternating. Every figure is in the output;
# bench/README.md ("Scale on one node") has the medians.
# Needs PostgreSQL for the replicas: SVC_BENCH_POSTGRES_DSN, or the machine's cluster (started
# and given a fresh database as scripts/test.sh does); CONFIGS="sqlite" skips it.
# Usage: bench/scale.sh [RUNS] [SIZES]   (default: 3 "1000 10000")
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-3}"
sizes="${2:-1000 10000}"
configs=(${CONFIGS:-sqlite pg3})
base_port="${SVC_BENCH_PORT:-17450}"

say() { printf 'scale.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }
# Each subscriber is a socket on both sides.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -gt 12000 ] || die "needs more than 12000 open files (ulimit -n is $(ulimit -n))"
if [[ " ${configs[*]} " == *" pg3 "* ]] && [ -z "${SVC_BENCH_POSTGRES_DSN:-}" ]; then
    . scripts/postgres-test-env.sh
    ensure_postgres
    SVC_BENCH_POSTGRES_DSN="$SVC_TEST_POSTGRES_DSN"
fi
dsn="${SVC_BENCH_POSTGRES_DSN:-}"

cargo build --release --quiet -p svc -p svc-bench
svc="$PWD/target/release/svc"
bench="$PWD/target/release/svc-bench"
# Servers still up when a run fails are stopped on the way out.
started=()
trap 'for p in "${started[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

# run CONFIG SIZE [ARGS...]: svc-bench scale on fresh servers of CONFIG; its output.
run() {
    local config="$1" size="$2" replicas=1 settings=()
    shift 2
    case "$config" in
        sqlite) ;;
        pg3)
            replicas=3
            settings=(SVC_DATABASE__DRIVER=postgres "SVC_DATABASE__DSN=$(fresh_dsn "$dsn")") ;;
    esac
    replicas_start "$replicas" "$svc" "${settings[@]}"
    started+=("${pids[@]}")
    "$bench" scale --replicas "$(IFS=,; echo "${urls[*]}")" --pids "$(IFS=,; echo "${pids[*]}")" \
        --sandboxes "$size" --subscribers "$size" --streams $((size / 10)) "$@"
    replicas_stop
    # The next run starts once the disk has taken this one's writes and deletions: right after
    # a 10,000-sandbox run, SQLite's commits waited on that writeback and an empty server
    # managed a quarter of its rate for some 15 s.
    sync
    sleep 3
}

for size in $sizes; do
    for i in $(seq "$runs"); do
        for j in $(seq 0 $((${#configs[@]} - 1))); do
            config="${configs[$(( (i + j) % ${#configs[@]} ))]}"
            # The empty server's spawn+destroy rate, then the full run compared with it.
            empty="$(run "$config" 0 | sed -n 's/^with 0 live: spawn+destroy \([0-9]*\) pairs.*/\1/p')"
            [ -n "$empty" ] || die "no empty-server rate for $config"
            echo "== $config, $size (run $i)"
            run "$config" "$size" --empty-rate "$empty"
        done
    done
done
