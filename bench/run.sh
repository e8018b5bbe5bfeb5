#!/usr/bin/env bash
# Builds svc and the load tool in release mode, starts svc on a throw-away directory (SQLite
# file, mock provider), runs each scenario RUNS times, prints every result, and stops svc.
# Usage: bench/run.sh [RUNS] [SECONDS] [STREAM_BYTES]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
seconds="${2:-5}"
stream_bytes="${3:-1073741824}"
port="${SVC_BENCH_PORT:-17423}"

cargo build --release --quiet -p svc -p svc-bench
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
(
    cd "$work"
    SVC_SERVER__PORT="$port" SVC_PROVIDERS__MOCK__ROOT_DIR="$work/mock" \
        exec "$OLDPWD/target/release/svc" serve 2>"$work/svc.log"
) &
pid=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/api/v1/health" >/dev/null && break
    sleep 0.1
done
url="http://127.0.0.1:$port"
bench() { target/release/svc-bench --url "$url" "$@"; }
for _ in $(seq "$runs"); do bench health --concurrency 64 --seconds "$seconds"; done
for _ in $(seq "$runs"); do bench spawn-destroy --concurrency 16 --seconds "$seconds"; done
for _ in $(seq "$runs"); do bench exec-latency --iterations 300; done
for _ in $(seq "$runs"); do bench stream-throughput --bytes "$stream_bytes" --server-pid "$pid"; done
for _ in $(seq "$runs"); do bench files --mib 32 --rounds 5; done
if curl -sf --unix-socket /var/run/docker.sock http://localhost/_ping >/dev/null 2>&1; then
    for _ in $(seq "$runs"); do bench docker --sandboxes 15 --execs 10; done
else
    echo "docker benchmark skipped: no engine at /var/run/docker.sock (scripts/test.sh starts one)"
fi
