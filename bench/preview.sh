#!/usr/bin/env bash
# Preview proxy benchmark (issue 19): busybox httpd inside a docker sandbox, one small page
# fetched directly at the container's address and through svc's preview proxy
# (/api/v1/sandboxes/{id}/proxy/8080/...), alternately in each round (svc-bench preview).
# Targets: the proxy adds under 1 ms p50 and keeps at least 70% of direct throughput.
# Needs curl, Docker and the local busybox test image.
# Usage: bench/preview.sh [ROUNDS] [SECONDS] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds="${1:-3}"
seconds="${2:-5}"
concurrency="${3:-16}"
port="${SVC_BENCH_PORT:-17485}"
image="${SVC_BENCH_IMAGE:-svc-test-busybox:latest}"
api="http://127.0.0.1:$port/api/v1"

cargo build --release --quiet -p svc -p svc-bench
work="$(mktemp -d -p "${SVC_BENCH_TMP:-/var/tmp}")"
trap 'svc_stop 2>/dev/null || true; rm -rf "$work"' EXIT
svc_start "$PWD/target/release/svc" "$work" SVC_PROVIDERS__DOCKER__ENABLED=true
id="$(curl -sf -X POST "$api/sandboxes" -H 'content-type: application/json' \
    -d "{\"provider\": \"docker\", \"image\": \"$image\"}" | sed 's/.*"id":"\([^"]*\)".*/\1/')"
curl -sf -X POST "$api/sandboxes/$id/files" -H 'content-type: application/json' \
    -d '{"path": "/tmp/www/index.html", "content": "<h1>preview</h1>"}' >/dev/null
curl -sf -X POST "$api/sandboxes/$id/exec" -H 'content-type: application/json' \
    -d '{"command": "exec httpd -f -p 8080 -h /tmp/www", "background": true}' >/dev/null
address="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "svc-$id")"
for _ in $(seq 100); do
    curl -sf "http://$address:8080/index.html" >/dev/null && break
    sleep 0.1
done
echo "== busybox httpd in a docker sandbox (one connection per request on both paths)"
./target/release/svc-bench preview --direct "http://$address:8080/index.html" \
    --proxied "$api/sandboxes/$id/proxy/8080/index.html" \
    --rounds "$rounds" --seconds "$seconds" --concurrency "$concurrency"
curl -sf -X DELETE "$api/sandboxes/$id" >/dev/null
# A keep-alive server (svc-bench's own) behind a mock sandbox, whose ports are this host's
# loopback ones: the client keeps its connections on both paths, and the proxy its upstream ones.
page_port="${SVC_BENCH_PAGE_PORT:-17486}"
mock="$(curl -sf -X POST "$api/sandboxes" -H 'content-type: application/json' \
    -d '{"provider": "mock"}' | sed 's/.*"id":"\([^"]*\)".*/\1/')"
echo "== a keep-alive server behind a mock sandbox (connections reused on both paths)"
./target/release/svc-bench preview --serve "$page_port" --direct "http://127.0.0.1:$page_port/" \
    --proxied "$api/sandboxes/$mock/proxy/$page_port/" \
    --rounds "$rounds" --seconds "$seconds" --concurrency "$concurrency"
curl -sf -X DELETE "$api/sandboxes/$mock" >/dev/null
