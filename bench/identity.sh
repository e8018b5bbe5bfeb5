#!/usr/bin/env bash
# The identity issue's benchmark, one build side by side: requests/s on an authenticated read
# route (GET /api/v1/pool/status) with no authentication, with an API key, and with an ES256
# OIDC bearer token (auth.oidc_public_key_file, so no identity provider is needed). Each run
# starts a fresh server per configuration, order rotating run by run; the summary gives the
# medians and the bearer/API-key ratio (target: bearer within 15% of the API key).
# Usage: bench/identity.sh [RUNS] [SECONDS] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs="${1:-5}"
seconds="${2:-5}"
concurrency="${3:-32}"
port="${SVC_BENCH_PORT:-17426}"
api_key="bench-api-key-0123456789abcdef0123456789"

cargo build --release --quiet -p svc -p svc-bench
svc="$PWD/target/release/svc"
bench="$PWD/target/release/svc-bench"
url="http://127.0.0.1:$port"
keys="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
token="$("$bench" mint-token --public-key-out "$keys/oidc.pem")"
results="$keys/results.txt"

# settings CONFIG(open|apikey|bearer): the server's settings for a configuration.
settings() {
    case "$1" in
        apikey) echo "SVC_AUTH__ENABLED=true SVC_AUTH__API_KEY=$api_key" ;;
        bearer) echo "SVC_AUTH__OIDC_ISSUER=https://idp.bench SVC_AUTH__OIDC_AUDIENCE=svc-bench \
SVC_AUTH__OIDC_PUBLIC_KEY_FILE=$keys/oidc.pem SVC_AUTH__OIDC_OPERATOR_GROUPS=operators" ;;
    esac
}

run() {
    local config="$1" work line
    work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
    # shellcheck disable=SC2046
    svc_start "$svc" "$work" $(settings "$config")
    case "$config" in
        open) line="$("$bench" --url "$url" pool-status --concurrency "$concurrency" --seconds "$seconds")" ;;
        apikey) line="$(SVC_API_KEY="$api_key" "$bench" --url "$url" pool-status --concurrency "$concurrency" --seconds "$seconds")" ;;
        bearer) line="$(SVC_BEARER_TOKEN="$token" "$bench" --url "$url" pool-status --concurrency "$concurrency" --seconds "$seconds")" ;;
    esac
    echo "identity-$config $line"
    echo "$config $line" >>"$results"
    svc_stop
    rm -rf "$work"
}

configs=(open apikey bearer)
for i in $(seq "$runs"); do
    echo "== run $i"
    for j in 0 1 2; do
        run "${configs[$(( (i + j) % 3 ))]}"
        sleep 1
    done
done

python3 - "$results" "$runs" <<'PY'
import re, statistics, sys
rates, order = {}, []
for line in open(sys.argv[1]):
    config = line.split()[0]
    rates.setdefault(config, []).append(float(re.search(r"= (\d+)/s", line).group(1)))
med = {c: statistics.median(v) for c, v in rates.items()}
for c in ("open", "apikey", "bearer"):
    print(f"median {c}: {med[c]:.0f} requests/s over {len(rates[c])} runs")
# Each run measured all three back to back: its own ratio cancels the drift between runs.
ratios = [b / a for a, b in zip(rates["apikey"], rates["bearer"])]
print("per-run bearer/apikey: " + " ".join(f"{r:.3f}" for r in ratios))
print(f"median per-run bearer/apikey: {statistics.median(ratios):.3f} (target >= 0.85)")
print(f"ratio of medians bearer/apikey: {med['bearer'] / med['apikey']:.3f}")
print(f"ratio of medians apikey/open: {med['apikey'] / med['open']:.3f}")
PY
rm -rf "$keys"
