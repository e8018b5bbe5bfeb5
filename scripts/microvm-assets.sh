#!/usr/bin/env bash
# Prepares everything the microVM providers need on a machine of this kind (Debian, root,
# package registries only) into $SVC_MICROVM_ASSETS (default /var/cache/svc-microvm), and
# prints on its last lines the YAML fragment that enables the qemu provider with them
# (decisions §14). Idempotent: what is already there is kept, so a second run takes seconds.
#
#   packages   qemu-system-x86 (QEMU's microvm machine), e2fsprogs (mkfs.ext4 -d)
#   kernel     Debian's cloud kernel, unpacked from its package (nothing is installed on the
#              host): vmlinux (the ELF image QEMU boots through its PVH entry) and the modules
#              the guest needs for virtio-mmio and vsock, decompressed, in load order
#   agent      svc-agent built static (x86_64-unknown-linux-musl)
#   vsock      vhost-device-vsock (cargo install), QEMU's vsock backend with Firecracker's
#              host-side protocol
#
# Slow steps (the agent and vhost-device-vsock builds) use a cargo target directory inside
# the assets directory, so CI runs on one machine reuse them.
set -euo pipefail
cd "$(dirname "$0")/.."

assets="${SVC_MICROVM_ASSETS:-/var/cache/svc-microvm}"
say() { printf 'microvm-assets.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}

mkdir -p "$assets"

# --- packages -------------------------------------------------------------------------------
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    say "installing qemu-system-x86"
    apt_install qemu-system-x86 || die "apt-get install qemu-system-x86 failed"
fi
if ! command -v mkfs.ext4 >/dev/null 2>&1; then
    say "installing e2fsprogs"
    apt_install e2fsprogs || die "apt-get install e2fsprogs failed"
fi
# Kernel payloads and modules may be compressed with any of these.
for tool in xz:xz-utils zstd:zstd lz4:lz4; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || apt_install "${tool##*:}" || die "apt-get install ${tool##*:} failed"
done

# --- kernel ---------------------------------------------------------------------------------
# The guest's init loads these from its initramfs, in this order (virtio-mmio, the virtio
# block device that holds the root disk, and vsock are modules in Debian's cloud kernel).
modules=(virtio_ring virtio virtio_mmio virtio_blk vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport)
if [ ! -s "$assets/vmlinux" ] || ! grep -qx virtio_blk.ko "$assets/modules/order" 2>/dev/null; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    package="$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')"
    if [ -z "$package" ]; then
        apt-get update -qq >/dev/null 2>&1 || true
        package="$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')"
    fi
    [ -n "$package" ] || die "cannot tell which package holds Debian's cloud kernel"
    say "fetching $package (unpacked into $assets, not installed)"
    # apt drops privileges to _apt for downloads; the directory must let it write.
    chmod 0777 "$work"
    (cd "$work" && apt-get download -qq "$package" >/dev/null 2>&1) || die "apt-get download $package failed"
    dpkg-deb -x "$work"/"$package"_*.deb "$work/root" || die "unpacking $package failed"
    vmlinuz="$(ls "$work"/root/boot/vmlinuz-* | head -n1)"
    release="${vmlinuz##*/vmlinuz-}"
    # The ELF kernel is the compressed payload inside the bzImage; its place and length are in
    # the boot protocol's setup header, its format in its first bytes.
    python3 - "$vmlinuz" "$work/vmlinux" <<'PY' || die "could not extract vmlinux from $vmlinuz"
import bz2, gzip, io, lzma, struct, subprocess, sys
data = open(sys.argv[1], "rb").read()
setup_sectors = data[0x1F1] or 4
offset, length = struct.unpack("<II", data[0x248:0x250])
start = (setup_sectors + 1) * 512 + offset
payload = data[start:start + length]
def tool(*argv):
    # The kernel appends its size after the stream, which some tools call trailing garbage
    # (and exit 1 for); the ELF check below decides.
    return subprocess.run(list(argv), input=payload, capture_output=True).stdout
if payload.startswith(b"\x1f\x8b"):
    kernel = gzip.GzipFile(fileobj=io.BytesIO(payload)).read()
elif payload.startswith(b"\xfd7zXZ"):
    kernel = lzma.decompress(payload)
elif payload.startswith(b"\x5d\x00\x00"):
    kernel = lzma.decompress(payload, format=lzma.FORMAT_ALONE)
elif payload.startswith(b"BZh"):
    kernel = bz2.decompress(payload)
elif payload.startswith(b"\x28\xb5\x2f\xfd"):
    kernel = tool("zstd", "-dcq")
elif payload.startswith(b"\x02\x21\x4c\x18"):
    kernel = tool("lz4", "-dcq")
else:
    sys.exit("unknown kernel compression " + payload[:4].hex())
if kernel[:4] != b"\x7fELF":
    sys.exit("the decompressed kernel is not an ELF image")
open(sys.argv[2], "wb").write(kernel)
PY
    mkdir -p "$work/modules"
    : >"$work/modules/order"
    for module in "${modules[@]}"; do
        file="$(find "$work/root/lib/modules/$release" -name "$module.ko*" | head -n1)"
        if [ -z "$file" ]; then
            # Built into this kernel: nothing to load.
            continue
        fi
        case "$file" in
            *.xz) xz -dc "$file" >"$work/modules/$module.ko" ;;
            *.zst) zstd -dcq "$file" >"$work/modules/$module.ko" ;;
            *) cp "$file" "$work/modules/$module.ko" ;;
        esac
        echo "$module.ko" >>"$work/modules/order"
    done
    rm -rf "$assets/modules"
    mv "$work/modules" "$assets/modules"
    mv "$work/vmlinux" "$assets/vmlinux"
    echo "$release" >"$assets/kernel-release"
    say "kernel $release ready ($(wc -l <"$assets/modules/order") modules to load)"
fi

# --- agent ----------------------------------------------------------------------------------
target=x86_64-unknown-linux-musl
if ! rustup target list --installed | grep -qx "$target"; then
    say "adding the Rust target $target"
    rustup target add "$target" >/dev/null || die "rustup target add $target failed"
fi
say "building svc-agent ($target)"
cargo build --release --quiet -p svc-agent --target "$target" --target-dir "$assets/target" \
    || die "building svc-agent for $target failed"
install -m 0755 "$assets/target/$target/release/svc-agent" "$assets/svc-agent.new"
mv "$assets/svc-agent.new" "$assets/svc-agent"

# --- vsock backend --------------------------------------------------------------------------
if [ ! -x "$assets/vhost/bin/vhost-device-vsock" ]; then
    say "building vhost-device-vsock (cargo install; once per machine)"
    CARGO_TARGET_DIR="$assets/target" cargo install --quiet --locked vhost-device-vsock \
        --root "$assets/vhost" >/dev/null \
        || die "cargo install vhost-device-vsock failed"
fi

mkdir -p "$assets/rootfs" "$assets/vms"
# `auto` spends up to boot_timeout on a probe boot under KVM at start-up. Where KVM is absent,
# or nested under a hypervisor (paravirtual KVM, where stock kernels crawl), the probe cannot
# win, so the fragment says `tcg` outright; on bare metal it leaves the choice to the probe.
accel=auto
if [ ! -w /dev/kvm ] || grep -qw hypervisor /proc/cpuinfo; then
    accel=tcg
fi
say "ready in $assets"
cat <<EOF
providers:
  qemu:
    enabled: true
    qemu_path: $(command -v qemu-system-x86_64)
    kernel_path: $assets/vmlinux
    agent_path: $assets/svc-agent
    rootfs_dir: $assets/rootfs
    data_dir: $assets/vms
    vsock_backend_path: $assets/vhost/bin/vhost-device-vsock
    accel: $accel
EOF
