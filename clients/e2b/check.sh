#!/usr/bin/env bash
# Runs the unmodified E2B Python SDK (requirements.txt) against svc's E2B listener, on the mock
# provider and on docker. PYTHON selects the interpreter (it needs pytest and requirements.txt);
# SVC_BIN the server binary.
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
echo "== e2b $("$PY" -c 'import importlib.metadata as m; print(m.version("e2b"))') (python: $PY, SVC_BIN: ${SVC_BIN:-target/debug/svc})"
"$PY" -m pytest -q -p no:cacheprovider "$@" tests
