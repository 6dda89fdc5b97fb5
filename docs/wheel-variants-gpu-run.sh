#!/usr/bin/env bash
# The GPU half of docs/index.md "Wheel variants": uv's variant preview, on a machine with an
# NVIDIA GPU and its driver, picks the cu130 variant of the example from a site published
# with index.wheel_variants, and the example's smoke passes on the GPU.
#   SITE: the published site (default ./site); UV: a uv 0.13.10 binary (default: uv on PATH);
#   PY: the interpreter that has torch 2.11.0+cu130 (default python3). Output: $OUT (or .).
set -euo pipefail
SITE=$(cd "${SITE:-site}" && pwd); UV=${UV:-uv}; PY=${PY:-python3}; OUT=${OUT:-.}
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
  "$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_capability())'
  "$UV" --version
} 2>&1 | tee "$OUT/machine.txt"
# the torch the machine has stays: `torch==2.11.*` says which release, the variant the GPU
UV_OFFLINE=1 "$UV" pip install --python "$PY" --break-system-packages \
  --preview-features wheel-variants --index-url "file://$SITE/wheel-variants/" \
  bt-scatter 'torch==2.11.*' -v 2>&1 | tee "$OUT/uv-install.txt" | grep -E 'Selecting: bt-scatter|NVIDIA|CUDA driver|Installed|error' || true
"$PY" -c 'import importlib.metadata as m; d = m.distribution("bt-scatter"); print(d.version, d.read_text("variant.json") is not None)' | tee "$OUT/installed.txt"
(cd examples/scatter && BUILDTOOLS_SMOKE_DEVICE=cuda "$PY" smoke.py) 2>&1 | tee "$OUT/smoke.txt" | tail -4
