#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine of this kind (Debian, root, package registries
# only). It first installs and starts what the tests need when it is missing, waiting for each
# with a deadline and saying clearly what failed, then runs every test of the workspace.
#
# Services the tests use today: none beyond a temporary SQLite file and the mock provider.
# (Docker and PostgreSQL join here with the issues that need them.)
set -euo pipefail

cd "$(dirname "$0")/.."

say() { printf 'test.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

command -v cargo >/dev/null 2>&1 || die "cargo is not installed (the machine's Rust toolchain is required)"

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
