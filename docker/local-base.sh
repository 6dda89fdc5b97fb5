#!/usr/bin/env bash
# Make a "manylinux-like" base image from Debian packages, for machines that reach no
# container registry (cibuildwheel then uses it without pulling: `docker image inspect`
# finds it with the right platform).
#
#   docker/local-base.sh [--python X.Y]... [--mirror URL] [--suite bookworm] [--arch arm64] [--tag-only]
#
# Prints the image reference on its last line: torch-buildtools/local-base:<suite>-<hash>
# (<suite>-arm64-<hash> for --arch arm64), where <hash> covers this script, the suite and
# the exact CPython builds copied in.
#
# --arch arm64 on an x86_64 host makes an aarch64 image for emulated builds (Grace Hopper /
# Grace Blackwell wheels): debootstrap runs the arm64 packages through QEMU user emulation,
# so the kernel must have a binfmt handler for aarch64 with the F flag
# (/proc/sys/fs/binfmt_misc/qemu-aarch64; Debian/Ubuntu: apt-get install qemu-user-static,
# which registers it; `buildtools build --setup-emulation` does it too). The host's CPython
# builds are x86_64 and cannot be copied: the image's Pythons are Debian's own (bookworm:
# 3.11; trixie: 3.13), each a venv at /opt/python/cpXY-cpXY over /usr/bin/pythonX.Y.
# An image with that reference is reused as is; a changed recipe gets a new reference,
# so a stale image is never used. Needs root, debootstrap and a running Docker engine.
#
# What cibuildwheel (platforms/linux.py, oci_container.py) requires of an image, and how
# this one meets it:
#   /opt/python/cpXY-cpXY/bin/{python,pip}   one per build Python: the host's own CPython
#                                            builds (pyenv / uv), copied without their
#                                            site-packages, pip from ensurepip; libpython
#                                            found through /etc/ld.so.conf.d
#   /opt/python/cp39-cp39/bin/python         cibuildwheel's utility interpreter (it only
#                                            runs json/glob one-liners): the real 3.9 when
#                                            asked for, else a link to the newest Python
#   /bin/bash, sh, env, which, test, mkdir, mktemp, rm, mv, tar   (Debian minbase)
#   a C/C++ compiler                         gcc/g++ 12 from Debian
#   manylinux-interpreters                   not needed (cibuildwheel falls back to test -x)
# Being Debian bookworm (glibc 2.36), wheels built here reach manylinux_2_34 at best; the
# manylinux_2_28 promise of torch >= 2.7 needs the real builders (docker/*.Dockerfile).
set -euo pipefail

SUITE=bookworm
MIRROR=""
ARCH=""
PYTHONS=()
TAG_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --python) PYTHONS+=("$2"); shift 2 ;;
        --mirror) MIRROR="$2"; shift 2 ;;
        --suite) SUITE="$2"; shift 2 ;;
        --arch) ARCH="$2"; shift 2 ;;
        --tag-only) TAG_ONLY=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "local-base.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
HOST_ARCH=$(dpkg --print-architecture 2>/dev/null || { [ "$(uname -m)" = aarch64 ] && echo arm64 || echo amd64; })
ARCH=${ARCH:-$HOST_ARCH}
case "$ARCH" in amd64|arm64) ;; *) echo "local-base.sh: --arch $ARCH: expected amd64 or arm64" >&2; exit 2 ;; esac
# a foreign architecture: Debian's Python of the suite (the host's builds are of another machine)
FOREIGN=0
[ "$ARCH" = "$HOST_ARCH" ] || FOREIGN=1
if [ "$FOREIGN" = 1 ] && [ ${#PYTHONS[@]} -eq 0 ]; then
    case "$SUITE" in bookworm) PYTHONS=(3.11) ;; trixie) PYTHONS=(3.13) ;; *) echo "local-base.sh: --arch $ARCH: name the suite's Python with --python X.Y" >&2; exit 2 ;; esac
fi
[ ${#PYTHONS[@]} -gt 0 ] || PYTHONS=(3.10 3.11 3.12 3.13)

# Debian packages: the compiler, the shared libraries the copied CPython modules link
# (ssl, ctypes, sqlite3, curses, uuid, nis, bz2, lzma, zlib), and git, which manylinux images
# have and setup.py files run for version stamps (xformers 0.0.33's calls `git describe` even
# in an sdist, and fails without the program).
PACKAGES=gcc,g++,make,libc6-dev,binutils,git,libssl3,libffi8,libsqlite3-0,libncursesw6,libnsl2,libuuid1,libbz2-1.0,liblzma5,zlib1g

die() { echo "local-base.sh: $*" >&2; exit 1; }

# The prefix of a self-contained CPython X.Y build (pyenv or uv; not the distribution's
# /usr python, whose files are spread over the system).
python_prefix() {
    local v=$1 cand
    cand=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v".* 2>/dev/null | grep -E "/$v\.[0-9]+$" | sort -V | tail -1 || true)
    if [ -z "$cand" ] && command -v "python$v" >/dev/null 2>&1; then
        cand=$("python$v" -c 'import sys; print(sys.base_prefix)')
    fi
    [ -n "$cand" ] && [ -x "$cand/bin/python$v" ] && [ "$cand" != /usr ] && [ "$cand" != /usr/local ] \
        || die "no self-contained CPython $v found; install one with: pyenv install $v (or: uv python install $v)"
    echo "$cand"
}

declare -A PREFIX FULL
if [ "$FOREIGN" = 1 ]; then
    # debootstrap resolves no virtual packages: python3.X-venv needs python3.X-distutils, which
    # python3-distutils provides
    for v in "${PYTHONS[@]}"; do PACKAGES="$PACKAGES,python$v,python$v-dev,python$v-venv"; done
    PACKAGES="$PACKAGES,python3-pip-whl,python3-setuptools-whl"
    [ "$SUITE" != bookworm ] || PACKAGES="$PACKAGES,python3-distutils,python3-lib2to3"
fi
KEY="$(sha256sum "$0" | cut -d' ' -f1) $SUITE $ARCH $PACKAGES"
for v in "${PYTHONS[@]}"; do
    [[ "$v" =~ ^3\.[0-9]+$ ]] || die "--python $v: expected X.Y, e.g. 3.12"
    [ "$FOREIGN" = 0 ] || continue
    PREFIX[$v]=$(python_prefix "$v")
    FULL[$v]=$("${PREFIX[$v]}/bin/python$v" -c 'import platform; print(platform.python_version())')
    KEY="$KEY ${FULL[$v]}:$(sha256sum "${PREFIX[$v]}/lib/libpython$v.so.1.0" 2>/dev/null | cut -c1-16)"
done
HASH=$(printf '%s' "$KEY" | sha256sum | cut -c1-12)
if [ "$ARCH" = amd64 ]; then
    IMAGE="torch-buildtools/local-base:$SUITE-$HASH"
else
    IMAGE="torch-buildtools/local-base:$SUITE-$ARCH-$HASH"
fi
if [ "$TAG_ONLY" = 1 ]; then echo "$IMAGE"; exit 0; fi

command -v docker >/dev/null || die "docker: not found; install it with: apt-get install -y docker.io"
docker info >/dev/null 2>&1 || die "no running Docker engine; start one: dockerd >/var/log/dockerd.log 2>&1 &"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "local-base.sh: $IMAGE exists (recipe unchanged); reusing it" >&2
    echo "$IMAGE"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "debootstrap and chroot need root"
command -v debootstrap >/dev/null || die "debootstrap: not found; install it with: apt-get install -y debootstrap"
if [ "$FOREIGN" = 1 ]; then
    qemu=/proc/sys/fs/binfmt_misc/qemu-aarch64
    [ "$ARCH" = arm64 ] || die "--arch $ARCH on a $HOST_ARCH host: only arm64 is emulated"
    grep -qx enabled "$qemu" 2>/dev/null \
        || die "no binfmt handler for aarch64 ($qemu); register one: apt-get install -y qemu-user-static binfmt-support && mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null; update-binfmts --enable qemu-aarch64"
fi

if [ -z "$MIRROR" ]; then
    # the mirror apt already uses (deb822 or one-line sources)
    MIRROR=$(grep -hE '^[[:space:]]*(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
        | grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi

WORK=$(mktemp -d /var/tmp/buildtools-local-base.XXXXXX)
ROOT="$WORK/root"
cleanup() {
    mountpoint -q "$ROOT/proc" 2>/dev/null && umount "$ROOT/proc"
    rm -rf "$WORK"
}
trap cleanup EXIT

started=$(date +%s)
echo "local-base.sh: debootstrap $SUITE from $MIRROR into $ROOT" >&2
debootstrap --arch="$ARCH" --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*

mount -t proc proc "$ROOT/proc"
newest=""
for v in "${PYTHONS[@]}"; do
    tag="cp${v/./}-cp${v/./}"
    newest=$tag
    [ "$FOREIGN" = 0 ] || continue
    dest="$ROOT/opt/python/$tag"
    src=${PREFIX[$v]}
    echo "local-base.sh: CPython ${FULL[$v]} from $src -> /opt/python/$tag" >&2
    mkdir -p "$dest/bin"
    # the interpreter and its standard library; not the host's installed packages or tests
    tar -C "$src" -cf - --exclude="./lib/python$v/site-packages/*" --exclude="./lib/python$v/test" \
        --exclude='__pycache__' ./include ./lib | tar -C "$dest" -xf -
    cp -a "$src/bin/python$v" "$dest/bin/"
    ln -s "python$v" "$dest/bin/python3"
    ln -s "python$v" "$dest/bin/python"
    # the build's own paths recorded in sysconfig now point at the new prefix
    grep -rlIF "$src" "$dest/lib/python$v"/_sysconfigdata_*.py "$dest/lib/python$v"/config-* "$dest/lib/pkgconfig" 2>/dev/null \
        | xargs -r sed -i "s#$src#/opt/python/$tag#g"
    echo "/opt/python/$tag/lib" >>"$ROOT/etc/ld.so.conf.d/opt-python.conf"
    newest=$tag
done
chroot "$ROOT" ldconfig
for v in "${PYTHONS[@]}"; do
    tag="cp${v/./}-cp${v/./}"
    if [ "$FOREIGN" = 1 ]; then
        # Debian's interpreter as a venv: bin/python and bin/pip where cibuildwheel looks,
        # and pip free to install (the system one is marked externally managed)
        chroot "$ROOT" "/usr/bin/python$v" -m venv "/opt/python/$tag" \
            || die "python$v -m venv failed inside the $ARCH image"
        FULL[$v]=$(chroot "$ROOT" "/opt/python/$tag/bin/python" -c 'import platform; print(platform.python_version())')
        continue
    fi
    chroot "$ROOT" env -i PATH=/usr/bin:/bin "/opt/python/$tag/bin/python" -m ensurepip --default-pip >"$WORK/ensurepip.log" 2>&1 \
        || { cat "$WORK/ensurepip.log" >&2; die "ensurepip failed for $v"; }
    chroot "$ROOT" "/opt/python/$tag/bin/python" -c 'import ssl, ctypes, sqlite3, zlib, bz2, lzma, uuid, venv' \
        || die "CPython $v does not work inside the image (a missing Debian library?)"
done
if [ ! -e "$ROOT/opt/python/cp39-cp39" ]; then
    mkdir -p "$ROOT/opt/python/cp39-cp39/bin"
    ln -s "/opt/python/$newest/bin/python" "$ROOT/opt/python/cp39-cp39/bin/python"
    echo "cibuildwheel's utility interpreter only: python is /opt/python/$newest" >"$ROOT/opt/python/cp39-cp39/NOT-CPYTHON-3.9"
fi
umount "$ROOT/proc"

echo "local-base.sh: importing $IMAGE" >&2
tar -C "$ROOT" -c . | docker import --platform "linux/$ARCH" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL org.torch-buildtools.recipe=$HASH org.torch-buildtools.arch=$ARCH org.torch-buildtools.pythons=$(IFS=,; echo "${PYTHONS[*]}")" \
    - "$IMAGE" >/dev/null
if [ "$FOREIGN" = 1 ]; then
    # `docker import --platform` is ignored by older engines (20.10 records the host's arch),
    # and cibuildwheel then pulls instead of using the image: set the architecture in the
    # image config and load it back
    mkdir "$WORK/image"
    docker save "$IMAGE" | tar -C "$WORK/image" -xf -
    python3 - "$WORK/image" "$ARCH" <<'PY'
import json, pathlib, sys
root, arch = pathlib.Path(sys.argv[1]), sys.argv[2]
config = root / json.loads((root / "manifest.json").read_text())[0]["Config"]
data = json.loads(config.read_text())
data["architecture"] = arch
config.write_text(json.dumps(data))
PY
    tar -C "$WORK/image" -cf - . | docker load >/dev/null
    [ "$(docker image inspect --format '{{.Architecture}}' "$IMAGE")" = "$ARCH" ] \
        || die "$IMAGE: could not record the $ARCH architecture in the image"
fi
echo "local-base.sh: $IMAGE made in $(( $(date +%s) - started )) s" >&2
echo "$IMAGE"
