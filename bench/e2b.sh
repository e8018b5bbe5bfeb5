#!/usr/bin/env bash
# E2B compatibility benchmark (issue 20): create + run `true` + kill through the unmodified E2B
# Python SDK vs. svc's own Python SDK, side by side on one release server (bench/e2b_vs_svc.py).
# PROVIDER docker (default; the busybox test image as the default image) or mock.
# Needs the SDK environment of scripts/clients-test-env.sh ($SVC_PYTHON, with e2b installed).
# Usage: bench/e2b.sh [ROUNDS] [CYCLES] [PROVIDER]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds="${1:-3}"
cycles="${2:-20}"
provider="${3:-docker}"
port="${SVC_BENCH_PORT:-17487}"
e2b_port="${SVC_BENCH_E2B_PORT:-17488}"
python="${SVC_PYTHON:-/var/cache/svc-clients/venv/bin/python}"
image="${SVC_BENCH_IMAGE:-svc-test-busybox:latest}"

cargo build --release --quiet -p svc
work="$(mktemp -d -p "${SVC_BENCH_TMP:-/var/tmp}")"
trap 'svc_stop 2>/dev/null || true; rm -rf "$work"' EXIT
settings=(SVC_E2B__ENABLED=true SVC_E2B__PORT="$e2b_port")
if [ "$provider" = docker ]; then
    settings+=(SVC_PROVIDERS__DOCKER__ENABLED=true SVC_PROVIDERS__DEFAULT=docker SVC_DEFAULTS__IMAGE="$image")
fi
svc_start "$PWD/target/release/svc" "$work" "${settings[@]}"
PYTHONPATH="$PWD/clients/python/src" "$python" bench/e2b_vs_svc.py "http://127.0.0.1:$e2b_port" \
    "http://127.0.0.1:$port" "$rounds" "$cycles"
