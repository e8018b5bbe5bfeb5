#!/usr/bin/env bash
# The microVM issue's benchmark: one svc with the docker and qemu providers, the same image
# content on both (the local busybox test image; qemu builds its root disk from it once, before
# the timed runs), then spawn (boot to agent ready), exec round trip and file throughput side
# by side. Needs Docker and the microVM assets (scripts/microvm-assets.sh). On a KVM host with
# Firecracker, SVC_BENCH_FIRECRACKER=/path/to/firecracker adds the firecracker provider on the
# same kernel, agent and image (bench/README.md, "MicroVMs on a KVM host").
# Usage: bench/microvm.sh [SANDBOXES] [EXECS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
sandboxes="${1:-5}"
execs="${2:-20}"
port="${SVC_BENCH_PORT:-17460}"
assets="${SVC_MICROVM_ASSETS:-/var/cache/svc-microvm}"
image="${SVC_BENCH_IMAGE:-svc-test-busybox:latest}"

cargo build --release --quiet -p svc -p svc-bench
work="$(mktemp -d -p "${SVC_BENCH_TMP:-/tmp}")"
firecracker_env=() firecracker=()
if [ -n "${SVC_BENCH_FIRECRACKER:-}" ]; then
    firecracker_env=(SVC_PROVIDERS__FIRECRACKER__ENABLED=true
        SVC_PROVIDERS__FIRECRACKER__FIRECRACKER_PATH="$SVC_BENCH_FIRECRACKER"
        SVC_PROVIDERS__FIRECRACKER__KERNEL_PATH="$assets/vmlinux"
        SVC_PROVIDERS__FIRECRACKER__AGENT_PATH="$assets/svc-agent"
        SVC_PROVIDERS__FIRECRACKER__DATA_DIR="$work/fc-vms"
        SVC_PROVIDERS__FIRECRACKER__ROOTFS_DIR="$work/rootfs")
    firecracker=(--provider "firecracker=$image")
fi

svc_start "$PWD/target/release/svc" "$work" \
    SVC_PROVIDERS__DOCKER__ENABLED=true \
    SVC_PROVIDERS__QEMU__ENABLED=true \
    SVC_PROVIDERS__QEMU__ACCEL=tcg \
    SVC_PROVIDERS__QEMU__KERNEL_PATH="$assets/vmlinux" \
    SVC_PROVIDERS__QEMU__AGENT_PATH="$assets/svc-agent" \
    SVC_PROVIDERS__QEMU__VSOCK_BACKEND_PATH="$assets/vhost/bin/vhost-device-vsock" \
    SVC_PROVIDERS__QEMU__DATA_DIR="$work/vms" \
    SVC_PROVIDERS__QEMU__ROOTFS_DIR="$work/rootfs" \
    "${firecracker_env[@]}"
trap 'svc_stop; rm -rf "$work"' EXIT
url="http://127.0.0.1:$port"
# Warm-up: the root disk is built once per image; the timed runs measure boots, not builds.
target/release/svc-bench --url "$url" microvm --provider "qemu=$image" --sandboxes 1 --execs 1 --file-mib 1 >/dev/null
target/release/svc-bench --url "$url" microvm --sandboxes "$sandboxes" --execs "$execs" \
    --provider "docker=$image" --provider "qemu=$image" "${firecracker[@]}"
