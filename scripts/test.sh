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
# SVC_TEST_CPU_STRESS=N keeps N stress-ng CPU workers busy beside the tests, to prove that no
# test depends on timing (issue 38).
#
# At the end, pass or fail, it says how long each phase took.
set -euo pipefail

cd "$(dirname "$0")/.."

say() { printf 'test.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

# Phase timings: `phase NAME` ends the running phase and starts NAME (a name may come again; its
# times add up); the EXIT trap reports them, pass or fail.
declare -A spent=()
order=""
phase_name=""
phase_started=$SECONDS
run_started=$SECONDS
phase() {
    if [ -n "$phase_name" ]; then
        [ -n "${spent[$phase_name]:-}" ] || order="$order $phase_name"
        spent[$phase_name]=$(( ${spent[$phase_name]:-0} + SECONDS - phase_started ))
    fi
    phase_name="$1"
    phase_started=$SECONDS
}
stress_pid=""
build_pid=""
deny_pid=""
report() {
    local status=$? summary="" name
    [ -z "$stress_pid" ] || kill "$stress_pid" 2>/dev/null || true
    # A build still running when the run fails early would hold the target directory's lock;
    # each runs in its own process group, so cargo and its compilers end together.
    [ -z "$build_pid" ] || kill -- "-$build_pid" 2>/dev/null || true
    [ -z "$deny_pid" ] || kill -- "-$deny_pid" 2>/dev/null || true
    phase ""
    for name in $order; do summary="$summary $name ${spent[$name]}s,"; done
    say "time per phase:${summary%,}; in all $((SECONDS - run_started))s (exit $status)"
}
trap report EXIT

phase install

command -v cargo >/dev/null 2>&1 || die "cargo is not installed (the machine's Rust toolchain is required)"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
if ! cargo nextest --version >/dev/null 2>&1; then
    say "installing cargo-nextest (cargo install; once per machine)"
    cargo install --quiet --locked cargo-nextest || die "cargo install cargo-nextest failed"
fi

# Builds are the slow part on two cores, and need nothing the steps below install, so they start
# now and run beside the installs, which mostly wait on the network and the disk: the tests'
# build, then the release binary the README check runs (crates/svc/tests/it/readme.rs runs the
# README's `cargo run --release -- serve` as written, which then finds everything built). One
# after the other, so neither slows the other down. Their output goes to logs, shown on failure.
build_log="target/test-sh-builds.log"
mkdir -p target
# The release build carries the guest agent, built in the microVM assets' cache (the same build
# scripts/microvm-assets.sh makes; cargo's lock lets one wait for the other).
export SVC_MICROVM_ASSETS="${SVC_MICROVM_ASSETS:-/var/cache/svc-microvm}"
say "building the workspace tests, then the release binary, in the background (log: $build_log)"
set -m # a process group of its own, so the EXIT trap can end cargo and its compilers together
(
    started=$SECONDS
    cargo nextest run --workspace --no-run --cargo-quiet && cargo build --release --quiet
    status=$?
    echo "builds took $(( SECONDS - started ))s in the background" >&2
    exit "$status"
) >"$build_log" 2>&1 &
build_pid=$!
set +m

# shellcheck source=scripts/docker-test-env.sh
. scripts/docker-test-env.sh
if [ -n "${SVC_TEST_SKIP_DOCKER:-}" ] && [ -z "${CI:-}" ]; then
    say "SVC_TEST_SKIP_DOCKER is set: Docker tests will skip"
else
    ensure_docker
    phase images
    build_test_images
    # The Docker tests fail instead of skipping when the engine is missing.
    export SVC_TEST_REQUIRE_DOCKER=1
fi

phase install
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
# outside the clone in $SVC_MICROVM_ASSETS (set above); the microVM tests fail instead of
# skipping without.
phase microvm-assets
say "preparing the microVM assets in $SVC_MICROVM_ASSETS (scripts/microvm-assets.sh)"
bash scripts/microvm-assets.sh >/dev/null || die "scripts/microvm-assets.sh failed (see its messages above)"
export SVC_TEST_REQUIRE_MICROVM=1

# The SDK suites (crates/svc/tests/it/sdks.rs) need a Python with the SDK's dev extras and the
# TypeScript SDK's node_modules; they fail instead of skipping without.
# shellcheck source=scripts/clients-test-env.sh
. scripts/clients-test-env.sh
phase sdks
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
phase install
if ! [ -x /usr/bin/chromium ]; then
    say "installing Debian's chromium for the console's browser tests"
    apt_install chromium fonts-dejavu-core || die "could not install the chromium package with apt-get"
fi
/usr/bin/chromium --version >/dev/null 2>&1 || die "/usr/bin/chromium is installed but does not start"
export SVC_CHROMIUM=/usr/bin/chromium SVC_TEST_REQUIRE_BROWSER=1

phase build
say "waiting for the builds"
if ! wait "$build_pid"; then
    build_pid=""
    cat "$build_log" >&2
    die "building the workspace tests or the release binary failed (output above and in $build_log)"
fi
build_pid=""
say "$(tail -n 1 "$build_log")"

# cargo-deny checks deny.toml (licences, bans, sources) after the tests. It is not on the machine:
# installed once into a cache outside the clone, beside the tests at the lowest priority (they
# mostly wait on Docker, PostgreSQL and QEMU; a fresh install is about 300 CPU-seconds).
deny_version="0.20.2"
deny_root="${SVC_TOOLS:-/var/cache/svc-tools}"
deny="$deny_root/bin/cargo-deny"
deny_log="target/test-sh-cargo-deny.log"
if ! "$deny" --version 2>/dev/null | grep -qx "cargo-deny $deny_version"; then
    say "installing cargo-deny $deny_version into $deny_root in the background (log: $deny_log)"
    mkdir -p "$deny_root"
    set -m # its own process group, ended with cargo's compilers if the run stops early
    nice -n 19 cargo install --quiet --locked --root "$deny_root" --version "$deny_version" cargo-deny \
        >"$deny_log" 2>&1 &
    deny_pid=$!
    set +m
fi

phase tests
if [ -n "${SVC_TEST_CPU_STRESS:-}" ]; then
    command -v stress-ng >/dev/null 2>&1 || apt_install stress-ng || die "installing stress-ng failed"
    say "keeping $SVC_TEST_CPU_STRESS stress-ng CPU workers busy during the tests"
    stress-ng --cpu "$SVC_TEST_CPU_STRESS" --quiet &
    stress_pid=$!
fi
say "running the workspace tests with cargo nextest"
# The workspace has no doctests (examples live in tests), which nextest does not run anyway.
tests_status=0
cargo nextest run --workspace --no-fail-fast "$@" || tests_status=$?

phase deny
if [ -n "$deny_pid" ] && ! wait "$deny_pid"; then
    deny_pid=""
    cat "$deny_log" >&2
    die "installing cargo-deny failed (output above and in $deny_log)"
fi
deny_pid=""
say "checking the dependency graph against deny.toml (cargo deny check bans licenses sources)"
deny_status=0
"$deny" check bans licenses sources || deny_status=$?
[ "$deny_status" -eq 0 ] || say "FAILED: cargo deny found dependencies deny.toml does not allow (above)"
[ "$tests_status" -eq 0 ] || die "tests failed (exit $tests_status)"
[ "$deny_status" -eq 0 ] || exit "$deny_status"
