#!/usr/bin/env bash
# Runs the unmodified E2B SDKs against svc's E2B listener, on the mock provider and on docker:
# the Python one (requirements.txt; PYTHON selects an interpreter with it and pytest) and the
# npm one (js/package.json; node_modules from `npm ci`). SVC_BIN is the server binary.
# `check.sh python` or `check.sh js` runs one of them.
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
which="${1:-all}"
if [ "$which" = all ] || [ "$which" = python ]; then
    echo "== e2b $("$PY" -c 'import importlib.metadata as m; print(m.version("e2b"))') from PyPI (python: $PY, SVC_BIN: ${SVC_BIN:-target/debug/svc})"
    "$PY" -m pytest -q -p no:cacheprovider tests
fi
if [ "$which" = all ] || [ "$which" = js ]; then
    echo "== e2b $(node -p 'require("./js/node_modules/e2b/package.json").version') from npm (node $(node --version))"
    (cd js && npm test --silent)
fi
