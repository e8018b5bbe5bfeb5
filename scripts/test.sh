#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine of this kind (Debian, root, package registries
# only). It first installs and starts what the tests need when it is missing, waiting for each
# with a deadline and saying clearly what failed, then runs every test of the workspace.
#
# What the tests use: a temporary SQLite file, the mock provider, a real Docker engine with
# locally built test images (scripts/docker-test-env.sh), `promtool` (Debian's `prometheus`
# package) to check the metrics exposition, the machine's PostgreSQL 15 cluster with a fresh
# database per run (scripts/postgres-test-env.sh), and QEMU with a guest kernel, the static guest
# agent and vhost-device-vsock for the microVM tests (scripts/microvm-assets.sh), and Python
# (a virtual environment) and Node with the SDKs' dependencies for the SDK suites
# (scripts/clients-test-env.sh), and Debian's Chromium for the web console's browser tests.
#
# SVC_TEST_SKIP_DOCKER=1 runs without Docker (the Docker tests then skip loudly); CI never sets it.
set -euo pipefail

cd "$(dirname "$0")/.."

say() { printf 'test.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

command -v cargo >/dev/null 2>&1 || die "cargo is not installed (the machine's Rust toolchain is required)"

# shellcheck source=scripts/docker-test-env.sh
. scripts/docker-test-env.sh
if [ -n "${SVC_TEST_SKIP_DOCKER:-}" ] && [ -z "${CI:-}" ]; then
    say "SVC_TEST_SKIP_DOCKER is set: Docker tests will skip"
else
    ensure_docker
    # The Docker tests fail instead of skipping when the engine is missing.
    export SVC_TEST_REQUIRE_DOCKER=1
fi

# promtool checks the text metrics (tests/it/observe.rs); the test fails without it in CI.
if ! command -v promtool >/dev/null 2>&1; then
    say "installing promtool (Debian package prometheus)"
    apt_install prometheus || die "could not install the prometheus package (promtool) with apt-get"
    # The package's service is not needed; on machines with an init system it may have started.
    command -v systemctl >/dev/null 2>&1 && systemctl stop prometheus >/dev/null 2>&1 || true
fi
command -v promtool >/dev/null 2>&1 || die "promtool is still missing after installing prometheus"
export SVC_TEST_REQUIRE_PROMTOOL=1

# shellcheck source=scripts/postgres-test-env.sh
. scripts/postgres-test-env.sh
ensure_postgres
ensure_restartable_postgres
# The PostgreSQL tests fail instead of skipping when the database is missing.
export SVC_TEST_REQUIRE_POSTGRES=1

# The microVM assets (QEMU, the guest kernel, the static agent, the vsock backend), cached
# outside the clone in $SVC_MICROVM_ASSETS; the microVM tests fail instead of skipping without.
export SVC_MICROVM_ASSETS="${SVC_MICROVM_ASSETS:-/var/cache/svc-microvm}"
say "preparing the microVM assets in $SVC_MICROVM_ASSETS (scripts/microvm-assets.sh)"
bash scripts/microvm-assets.sh >/dev/null || die "scripts/microvm-assets.sh failed (see its messages above)"
export SVC_TEST_REQUIRE_MICROVM=1

# The SDK suites (crates/svc/tests/it/sdks.rs) need a Python with the SDK's dev extras and the
# TypeScript SDK's node_modules; they fail instead of skipping without.
# shellcheck source=scripts/clients-test-env.sh
. scripts/clients-test-env.sh
say "preparing the SDK toolchains (scripts/clients-test-env.sh)"
ensure_clients

# The largest tests write 2 GiB each (one at a time, .config/nextest.toml) into the temporary
# directory and into Docker's storage; on a nearly full disk everything after them fails with
# "disk is full", so say so before the run instead of leaving it to be guessed from the failures.
for dir in "${TMPDIR:-/tmp}" "$(docker info --format '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)"; do
    [ -d "$dir" ] || continue
    free_gib=$(( $(df -Pk "$dir" | awk 'NR == 2 { print $4 }') / 1048576 ))
    if [ "$free_gib" -lt 6 ]; then
        say "WARNING: only ${free_gib} GiB free under $dir; the tests need about 6 GiB (2 GiB files, databases, images)"
    fi
done

# The web console's browser tests (crates/svc/tests/it/browser.rs) drive Debian's Chromium with
# playwright-core (one of ui/'s npm packages, which the build installs); they fail instead of
# skipping without it.
if ! [ -x /usr/bin/chromium ]; then
    say "installing Debian's chromium for the console's browser tests"
    apt_install chromium fonts-dejavu-core || die "could not install the chromium package with apt-get"
fi
/usr/bin/chromium --version >/dev/null 2>&1 || die "/usr/bin/chromium is installed but does not start"
export SVC_CHROMIUM=/usr/bin/chromium SVC_TEST_REQUIRE_BROWSER=1

# One shared target directory; builds are the slow part on two cores.
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

if cargo nextest --version >/dev/null 2>&1; then
    say "running the workspace tests with cargo nextest"
    # The workspace has no doctests (examples live in tests), which nextest does not run anyway.
    cargo nextest run --workspace --no-fail-fast "$@"
else
    say "cargo-nextest not found; running the workspace tests with cargo test"
    cargo test --workspace --no-fail-fast "$@"
fi
