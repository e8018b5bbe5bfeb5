#!/usr/bin/env bash
# The web console's performance (issue 24): bench/console.mjs in Debian's Chromium against svc
# (release build, mock provider) holding SIZE sandboxes, RUNS times, each on a fresh server.
# Targets: first load under 300 KB compressed and interactive within 1 s; the live list smooth
# with 1,000 sandboxes under churn (no long frames, no refetch of the whole list).
# Needs /usr/bin/chromium (scripts/test.sh installs it) and ui/node_modules (the build installs it).
# Usage: bench/console.sh [RUNS] [SIZE] [CHURN]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-3}"
size="${2:-1000}"
churn="${3:-200}"
cargo build --release --quiet -p svc
scratch="$(mktemp -d -p "${SVC_BENCH_TMP:-/var/tmp}")"
trap 'rm -rf "$scratch"' EXIT
port="${SVC_BENCH_PORT:-17496}"
for run in $(seq "$runs"); do
    mkdir -p "$scratch/run-$run"
    svc_start "$PWD/target/release/svc" "$scratch/run-$run"
    echo "== run $run"
    SVC_URL="http://127.0.0.1:$port" node bench/console.mjs "$size" 5 "$churn"
    svc_stop
done
