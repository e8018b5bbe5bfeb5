#!/usr/bin/env bash
# Makes a Docker engine and the local test images available (sourced by scripts/test.sh).
# No registry is reachable here, so test images are built locally with `docker import` from a
# busybox root filesystem; tests never pull.
#   svc-test-busybox:latest  busybox (static) as the whole userland
#   svc-test-noshell:latest  one file and no shell at all
DOCKER_SOCK="${DOCKER_SOCK:-/var/run/docker.sock}"
DOCKERD_LOG="${DOCKERD_LOG:-/tmp/svc-test-dockerd.log}"

docker_answers() {
    curl -sf --max-time 2 --unix-socket "$DOCKER_SOCK" http://localhost/_ping >/dev/null 2>&1
}

apt_install() {
    if [ -z "${SVC_APT_UPDATED:-}" ]; then
        apt-get update -qq || return 1
        SVC_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_docker() {
    command -v curl >/dev/null 2>&1 || apt_install curl ca-certificates || die "installing curl failed"
    if docker_answers; then
        say "Docker engine answers at $DOCKER_SOCK"
    else
        if ! command -v dockerd >/dev/null 2>&1; then
            say "installing Debian's docker.io"
            apt_install docker.io || die "apt-get install docker.io failed"
        fi
        say "starting dockerd (log: $DOCKERD_LOG)"
        nohup dockerd >"$DOCKERD_LOG" 2>&1 &
        local deadline=$((SECONDS + 60))
        until docker_answers; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                tail -n 30 "$DOCKERD_LOG" >&2 || true
                die "dockerd did not answer at $DOCKER_SOCK within 60s (log above: $DOCKERD_LOG)"
            fi
            sleep 0.5
        done
        say "dockerd is up"
    fi
    command -v docker >/dev/null 2>&1 || apt_install docker.io || die "no docker client"
    if ! [ -x /bin/busybox ] || ! file_is_static /bin/busybox; then
        say "installing busybox-static for the test images"
        apt_install busybox-static || die "apt-get install busybox-static failed"
    fi
}

file_is_static() {
    # The test image holds nothing but busybox, so it must not need a dynamic loader.
    ! ldd "$1" >/dev/null 2>&1
}

build_test_images() {
    if ! docker image inspect svc-test-busybox:latest >/dev/null 2>&1; then
        say "building svc-test-busybox:latest with docker import"
        local root
        root="$(mktemp -d)"
        mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/root" "$root/proc" "$root/sys" "$root/dev"
        chmod 1777 "$root/tmp"
        cp /bin/busybox "$root/bin/busybox"
        for applet in $("$root/bin/busybox" --list); do
            [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
        done
        echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
        echo 'root:x:0:' >"$root/etc/group"
        tar -C "$root" -c . | docker import -c 'ENV PATH=/bin' -c 'CMD ["/bin/sh"]' - svc-test-busybox:latest >/dev/null \
            || die "docker import of svc-test-busybox failed"
        rm -rf "$root"
    fi
    if ! docker image inspect svc-test-noshell:latest >/dev/null 2>&1; then
        say "building svc-test-noshell:latest with docker import"
        local root
        root="$(mktemp -d)"
        mkdir -p "$root/data"
        echo "no shell here" >"$root/data/readme.txt"
        tar -C "$root" -c . | docker import -c 'CMD ["/nothing"]' - svc-test-noshell:latest >/dev/null \
            || die "docker import of svc-test-noshell failed"
        rm -rf "$root"
    fi
}
