#!/usr/bin/env bash
# The GPU proof of issue 22 (docs/gpu-smoke.md, "A smoke needs its GPU"), run from the
# repository root on an offline GPU machine whose python3 holds torch 2.11.0+cu130.
#
# CARRY holds what the machine cannot download or does not have:
#   deps/*.whl        buildtools' dependencies it lacks (pydantic, pydantic-core,
#                     annotated-types, typing-inspection, ruamel.yaml, pyelftools) for 3.12
#   src/buildtools/   the buildtools package under test
#   scatter/smoke.py  the example's smoke script (device mode, cases report)
#   wheels/good/      the example's cu130 cp312 wheel (TORCH_CUDA_ARCH_LIST
#                     "7.5;8.0;8.6;9.0;10.0;12.0+PTX"), built on the CPU-only machine
#   wheels/sm80/      the same wheel built for "8.0" only: no sm_90 cubin, no PTX
#   wheels/torchao/   torchao 0.18.0 from PyPI (cp310-abi3, CUDA 13): not built here
set -uo pipefail
ROOT=$PWD
C=$ROOT/${CARRY:-.devcarry}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/bt-proof}  # the carried packages and each run's --out
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1

python3 -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$C"/deps/*.whl \
    || exit 1
# the carried buildtools, not the checkout's: run from a directory without a buildtools/
export PYTHONPATH=$WORK/site:$C/src
cd "$WORK" || exit 1

{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
    python3 -c 'import buildtools, sys; print("buildtools from", buildtools.__file__)'
} 2>&1 | tee "$OUT/machine.txt"

# smoke NAME ARGS...: one `buildtools smoke`; its output and exit status go to runs.txt,
# its report to $WORK/smoke-NAME/report.json (all merged into reports.json at the end)
smoke() {
    local name=$1
    shift
    echo "=== $name: buildtools smoke $*" | tee -a "$OUT/runs.txt"
    python3 -m buildtools smoke "$@" --timeout 300 --out "$WORK/smoke-$name" 2>&1 \
        | tee -a "$OUT/runs.txt"
    echo "exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/runs.txt"
}

SCATTER=(--project "$C/scatter" --smoke-command "python smoke.py")
# 1. the example's wheel passes on the H100: device, capability, driver, device cases
smoke good "$C/wheels/good" --accelerator cuda --system-torch "${SCATTER[@]}"
# 2. the same source built for sm_80 only: not-covered on sm_90, before its install
smoke sm80 "$C/wheels/sm80" --accelerator cuda --system-torch "${SCATTER[@]}"
# 3. a GPU runner whose torch sees no device: no-device, exit 17, nothing installed;
#    and `auto` on a runner the workflow declares cuda does not become cpu
CUDA_VISIBLE_DEVICES="" smoke nodevice "$C/wheels/good" --accelerator cuda --system-torch \
    "${SCATTER[@]}"
CUDA_VISIBLE_DEVICES="" BUILDTOOLS_RUNNER_ACCELERATOR=cuda smoke nodevice-auto \
    "$C/wheels/good" --system-torch "${SCATTER[@]}"
# 4. a wheel not built here (torchao from PyPI, tested as it is): its two shared objects
#    are torch.ops libraries (no PyInit); the Blackwell-only _C_mxfp8 (sm_100, compute_120)
#    does not run on sm_90: not-covered, unless declared optional
TORCHAO=(--accelerator cuda --system-torch --unrecorded
    --smoke-command "python -c 'import torchao; print(torchao.__version__)'")
smoke torchao "$C/wheels/torchao" "${TORCHAO[@]}"
smoke torchao-optional "$C/wheels/torchao" "${TORCHAO[@]}" --optional-module torchao._C_mxfp8
# at most a few files come back: one JSON with every report, one archive with the logs
python3 - "$OUT/reports.json" "$WORK" good sm80 nodevice nodevice-auto torchao torchao-optional <<'PY'
import json, pathlib, sys
out = {}
for name in sys.argv[3:]:
    path = pathlib.Path(sys.argv[2]) / f"smoke-{name}" / "report.json"
    out[name] = json.loads(path.read_text()) if path.is_file() else None
pathlib.Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")
PY
tar -czf "$OUT/logs.tgz" -C "$WORK" smoke-good/logs smoke-torchao-optional/logs 2>/dev/null
ls -l "$OUT"
