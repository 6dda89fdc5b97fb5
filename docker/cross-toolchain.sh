#!/usr/bin/env bash
# Make a relocated x86_64 → aarch64 GCC cross toolchain for emulated aarch64 builds.
#
# An aarch64 wheel built on an x86_64 machine compiles in an arm64 container under QEMU
# user emulation, where cc1plus runs instruction by instruction (6-13x slower than native).
# The kernel runs x86_64 programs natively inside that container when their loader and
# libraries are there: this script makes a directory holding Debian's aarch64 cross GCC
# and binutils together with every x86_64 library they load (glibc's loader included),
# patched (patchelf) to load those from the directory's in-container path (--prefix), so
# that one read-only mount makes it work in any arm64 container, whatever its distribution
# (nothing lands on /lib64 or /usr/lib/x86_64-linux-gnu of the container).
#
# It holds no aarch64 C library: the compiler is pointed at the container's own headers,
# crt files and libc (sysroot /), so the glibc symbol versions of a wheel are those of the
# image it is built in, exactly as with the image's own compiler. libstdc++'s headers and
# link library are the cross GCC's (its version is checked against the image's g++ in the
# container before it is used; see buildtools.backends.docker.incontainer).
#
# The packages come from the mirror apt uses (`apt-get download`, no root needed; the same
# Debian release as the host's apt sources). Elsewhere run it in any Debian container:
#   docker run --rm -v "$PWD/out:/out" debian:bookworm bash -c \
#     'apt-get update && apt-get install -y patchelf && bash /dev/stdin --out /out' < docker/cross-toolchain.sh
#
# usage: docker/cross-toolchain.sh --out DIR [--prefix /opt/buildtools/cross]
# prints the GCC version on success; exit 2 on bad usage, 1 when a step fails.
set -euo pipefail

OUT=""
PREFIX=/opt/buildtools/cross
die() { echo "cross-toolchain.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="${2:?}"; shift 2 ;;
        --prefix) PREFIX="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "cross-toolchain.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$OUT" ] || { echo "cross-toolchain.sh: --out DIR is required" >&2; exit 2; }
[ "$(uname -m)" = x86_64 ] || die "this host is $(uname -m): the toolchain is made of x86_64 programs"
for tool in apt-get apt-cache dpkg-deb patchelf; do
    command -v "$tool" >/dev/null || die "$tool: not found (a Debian/Ubuntu host, or a Debian container, with patchelf installed)"
done

# the cross GCC's major version that the release's gcc-aarch64-linux-gnu depends on
MAJOR=$(apt-cache depends gcc-aarch64-linux-gnu 2>/dev/null | sed -n 's/.*Depends: gcc-\([0-9][0-9]*\)-aarch64-linux-gnu.*/\1/p' | head -1)
[ -n "$MAJOR" ] || die "apt knows no gcc-aarch64-linux-gnu (run apt-get update, or use a Debian release that has it)"

PACKAGES=(
    "cpp-$MAJOR-aarch64-linux-gnu" "gcc-$MAJOR-aarch64-linux-gnu" "g++-$MAJOR-aarch64-linux-gnu"
    binutils-aarch64-linux-gnu
    # aarch64 link-time files of GCC itself (not glibc: the container's is used)
    "libgcc-$MAJOR-dev-arm64-cross" "libstdc++-$MAJOR-dev-arm64-cross" libgcc-s1-arm64-cross
    libstdc++6-arm64-cross libgomp1-arm64-cross libatomic1-arm64-cross
    # x86_64 libraries the programs load (ldd of cc1plus, as, ld.bfd; libbinutils: libsframe)
    libc6 libisl23 libmpc3 libmpfr6 libgmp10 zlib1g libzstd1 libjansson4 libbinutils
)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
STAGE="$WORK/root"
mkdir -p "$WORK/debs" "$STAGE"
(cd "$WORK/debs" && apt-get download -q "${PACKAGES[@]}" >"$WORK/download.log" 2>&1) \
    || { tail -5 "$WORK/download.log" >&2; die "apt-get download failed"; }
for deb in "$WORK"/debs/*.deb; do
    dpkg-deb -x "$deb" "$STAGE"
    dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb" >>"$WORK/manifest"
done
rm -rf "$STAGE/usr/share/doc" "$STAGE/usr/share/man" "$STAGE/usr/share/info" "$STAGE/usr/share/locale" \
    "$STAGE/usr/share/lintian" "$STAGE/etc" "$STAGE/sbin" "$STAGE/usr/sbin" "$STAGE/usr/lib/x86_64-linux-gnu/gconv" \
    "$STAGE/usr/lib/x86_64-linux-gnu/audit"

# every x86_64 shared library, side by side in one directory, with glibc's loader
LIBS="$STAGE/x86_64/lib"
mkdir -p "$LIBS"
for dir in "$STAGE/lib/x86_64-linux-gnu" "$STAGE/usr/lib/x86_64-linux-gnu"; do
    [ -d "$dir" ] && find "$dir" -maxdepth 1 \( -type f -o -type l \) -name '*.so*' -exec cp -a {} "$LIBS/" \;
done
rm -rf "$STAGE/lib" "$STAGE/lib64" "$STAGE/usr/lib/x86_64-linux-gnu"
[ -f "$LIBS/ld-linux-x86-64.so.2" ] || die "libc6 brought no ld-linux-x86-64.so.2"

# the programs load that loader and those libraries from the in-container prefix
# (DT_RPATH, not RUNPATH: it also covers the libraries' own dependencies)
patched=0
while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    if patchelf --print-interpreter "$f" >/dev/null 2>&1; then
        patchelf --set-interpreter "$PREFIX/x86_64/lib/ld-linux-x86-64.so.2" \
            --force-rpath --set-rpath "$PREFIX/x86_64/lib" "$f"
        patched=$((patched + 1))
    fi
done < <(find "$STAGE/usr/bin" "$STAGE/usr/lib/gcc-cross" -type f -print0)
[ "$patched" -gt 5 ] || die "patched only $patched programs: the packages' layout is not the expected one"

GXX="$STAGE/usr/bin/aarch64-linux-gnu-g++-$MAJOR"
[ -x "$GXX" ] || die "no $GXX after unpacking"
ln -sf "aarch64-linux-gnu-g++-$MAJOR" "$STAGE/usr/bin/aarch64-linux-gnu-g++"
ln -sf "aarch64-linux-gnu-gcc-$MAJOR" "$STAGE/usr/bin/aarch64-linux-gnu-gcc"
VERSION=$("$STAGE/x86_64/lib/ld-linux-x86-64.so.2" --library-path "$LIBS" "$GXX" -dumpfullversion)
{ echo "gcc $VERSION"; echo "prefix $PREFIX"; sort "$WORK/manifest"; } >"$STAGE/MANIFEST"

mkdir -p "$(dirname "$OUT")"
rm -rf "$OUT.tmp"
mv "$STAGE" "$OUT.tmp"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$VERSION"
