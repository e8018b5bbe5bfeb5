# Shared by the benchmark scripts (sourced): svc on a throw-away directory and back down.
# Callers set $port.

# svc_start BINARY WORK [VAR=VALUE...]: svc on $port with the mock provider only, quiet logs
# and the given settings; waits for /health (10 s) and sets $pid.
svc_start() {
    local binary="$1" work="$2"
    shift 2
    (
        cd "$work"
        export SVC_SERVER__PORT="$port" SVC_PROVIDERS__MOCK__ROOT_DIR="$work/mock" SVC_PROVIDERS__MOCK__ENABLED=true \
            SVC_PROVIDERS__DOCKER__ENABLED=false SVC_LOGGING__LEVEL=warn
        if [ "$#" -gt 0 ]; then export "$@"; fi
        exec "$binary" serve 2>"$work/svc.log"
    ) &
    pid=$!
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$port/api/v1/health" >/dev/null && return 0
        sleep 0.1
    done
    echo "svc ($binary $*) did not come up; log:" >&2
    cat "$work/svc.log" >&2
    exit 1
}

# svc_stop: stops the server svc_start started.
svc_stop() {
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

# fresh_dsn DSN: a new schema in that database, and a DSN that uses it, so every configuration
# run starts from empty tables.
fresh_dsn() {
    local schema="bench_$(date +%s%N)"
    psql "$1" -qc "CREATE SCHEMA $schema" >/dev/null
    echo "$1?options=-c%20search_path%3D$schema"
}

# replicas_start COUNT BINARY [VAR=VALUE...]: COUNT servers (workers w0, w1, ...) on ports
# $base_port onwards, each on its own throw-away directory with the given settings; sets the
# arrays works, pids and urls.
replicas_start() {
    local count="$1" binary="$2" i
    shift 2
    works=() pids=() urls=()
    for i in $(seq 0 $((count - 1))); do
        works+=("$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")")
        port=$((base_port + i))
        svc_start "$binary" "${works[$i]}" "$@" "SVC_WORKER__ID=w$i"
        pids+=("$pid")
        urls+=("http://127.0.0.1:$port")
    done
}

# replicas_stop: stops what replicas_start started and removes their directories.
replicas_stop() {
    local i
    for i in "${!pids[@]}"; do
        pid="${pids[$i]}"
        svc_stop
        rm -rf "${works[$i]}"
    done
}

# bench_agent: the static agent for the Docker fast path ($SVC_BENCH_AGENT, else the one
# scripts/microvm-assets.sh builds), or stop naming what is missing.
bench_agent() {
    local agent="${SVC_BENCH_AGENT:-${SVC_MICROVM_ASSETS:-/var/cache/svc-microvm}/svc-agent}"
    if [ ! -x "$agent" ]; then
        echo "no static agent at $agent: run scripts/microvm-assets.sh or set SVC_BENCH_AGENT" >&2
        exit 1
    fi
    echo "$agent"
}
