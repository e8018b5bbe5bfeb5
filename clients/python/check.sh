#!/usr/bin/env bash
# Type-checks and tests the Python SDK. Needs a python with the dev extras installed:
#   pip install -e 'clients/python[dev]'
# PYTHON selects the interpreter (default: python3); SVC_BIN the server binary the tests start.
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
# This checkout's SDK, whatever an editable install in a shared environment points at (the
# README tests run it in subprocesses too, hence the variable rather than pytest's option).
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
echo "== mypy --strict (python: $PY, SVC_BIN: ${SVC_BIN:-target/debug/svc})"
"$PY" -m mypy --strict src tests scripts
echo "== generated sync client is current"
"$PY" scripts/unasync.py --check
echo "== pytest"
"$PY" -m pytest -q "$@"
