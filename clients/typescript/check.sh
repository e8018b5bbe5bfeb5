#!/usr/bin/env bash
# Installs, builds, checks the OpenAPI types and route table against the server, and runs the
# tests against a real server. SVC_BIN names the svc binary (default ../../target/debug/svc).
set -euo pipefail
cd "$(dirname "$0")"
export SVC_BIN="${SVC_BIN:-../../target/debug/svc}"
npm ci
npm run build
npm run check-openapi
npm test
