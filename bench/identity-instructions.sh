#!/usr/bin/env bash
# Instructions the server spends per authenticated read request (GET /api/v1/pool/status) with
# no authentication, an API key and an ES256 bearer token, counted by callgrind: repeatable
# whatever else the machine does, unlike requests/s on two shared cores. Each configuration is
# measured twice, with FEW and MANY sequential keep-alive requests; the difference divided by
# MANY - FEW is the cost of one request, start-up and shutdown cancelled out.
# Usage: bench/identity-instructions.sh [FEW] [MANY]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
few="${1:-500}"
many="${2:-2500}"
port="${SVC_BENCH_PORT:-17427}"
api_key="bench-api-key-0123456789abcdef0123456789"

cargo build --release --quiet -p svc -p svc-bench
svc="$PWD/target/release/svc"
keys="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
token="$(target/release/svc-bench mint-token --public-key-out "$keys/oidc.pem")"

# A wrapper so svc_start runs the server under callgrind.
cat >"$keys/svc-under-callgrind" <<WRAP
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file="\$PWD/callgrind.out" "$svc" "\$@"
WRAP
chmod +x "$keys/svc-under-callgrind"

# instructions CONFIG COUNT: total instructions of a server life serving COUNT requests.
instructions() {
    local config="$1" count="$2" work header=""
    work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
    case "$config" in
        open) svc_start "$keys/svc-under-callgrind" "$work" ;;
        apikey)
            svc_start "$keys/svc-under-callgrind" "$work" SVC_AUTH__ENABLED=true SVC_AUTH__API_KEY="$api_key"
            header="X-API-Key: $api_key" ;;
        bearer)
            svc_start "$keys/svc-under-callgrind" "$work" SVC_AUTH__OIDC_ISSUER=https://idp.bench \
                SVC_AUTH__OIDC_AUDIENCE=svc-bench SVC_AUTH__OIDC_PUBLIC_KEY_FILE="$keys/oidc.pem" \
                SVC_AUTH__OIDC_OPERATOR_GROUPS=operators
            header="Authorization: Bearer $token" ;;
    esac
    python3 - "$port" "$count" "$header" <<'PY'
import http.client, sys
port, count, header = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
headers = dict([header.split(": ", 1)]) if header else {}
connection = http.client.HTTPConnection("127.0.0.1", port)
for _ in range(count):
    connection.request("GET", "/api/v1/pool/status", headers=headers)
    response = connection.getresponse()
    response.read()
    assert response.status == 200, response.status
PY
    svc_stop
    grep -E '^(summary|totals):' "$work/callgrind.out" | head -1 | awk '{print $2}'
    rm -rf "$work"
}

for config in open apikey bearer; do
    low="$(instructions "$config" "$few")"
    high="$(instructions "$config" "$many")"
    echo "$config $(( (high - low) / (many - few) )) instructions/request"
done | tee "$keys/results"
python3 - "$keys/results" <<'PY'
import sys
cost = {line.split()[0]: int(line.split()[1]) for line in open(sys.argv[1])}
print(f"bearer / apikey instructions: {cost['bearer'] / cost['apikey']:.3f}")
print(f"apikey - open: {cost['apikey'] - cost['open']} instructions; bearer - open: {cost['bearer'] - cost['open']}")
PY
rm -rf "$keys"
