# Makes the SDKs' toolchains ready (sourced by scripts/test.sh, after docker-test-env.sh for
# apt_install): a Python virtual environment with the Python SDK and its dev extras, cached
# outside the clone in $SVC_CLIENTS_CACHE, and the TypeScript SDK's node_modules from its lock
# file. Both come from the package registries (PyPI, npm), the only network this machine has.

SVC_CLIENTS_CACHE="${SVC_CLIENTS_CACHE:-/var/cache/svc-clients}"

ensure_clients() {
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv || die "installing python3 failed"
    local venv="$SVC_CLIENTS_CACHE/venv"
    if ! [ -x "$venv/bin/python" ]; then
        say "creating the Python environment for the SDK tests in $venv"
        mkdir -p "$SVC_CLIENTS_CACHE"
        python3 -m venv "$venv" >/dev/null 2>&1 \
            || { apt_install python3-venv && python3 -m venv "$venv"; } \
            || die "python3 -m venv $venv failed"
    fi
    # Quick when everything is installed already; the editable install points at this clone.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "clients/python[dev]" \
        || die "pip could not install clients/python[dev] into $venv"
    # The unmodified E2B SDK, pinned, for the compatibility suite (clients/e2b).
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r clients/e2b/requirements.txt \
        || die "pip could not install clients/e2b/requirements.txt into $venv"
    export SVC_PYTHON="$venv/bin/python"

    if ! command -v npm >/dev/null 2>&1; then
        apt_install nodejs npm || die "installing nodejs and npm failed"
    fi
    local major
    major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
    [ "$major" -ge 20 ] || die "the TypeScript SDK needs Node 20 or newer; node here is $(node --version 2>&1)"
    (cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error >/dev/null) \
        || die "npm ci in clients/typescript failed"
    (cd clients/e2b/js && npm ci --no-audit --no-fund --loglevel=error >/dev/null) \
        || die "npm ci in clients/e2b/js (the pinned e2b npm package) failed"
    # The SDK suites fail instead of skipping when their toolchains are missing.
    export SVC_TEST_REQUIRE_CLIENTS=1
}
