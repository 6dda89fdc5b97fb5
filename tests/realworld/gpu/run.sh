#!/usr/bin/env bash
# GPU run of the real-world corpus' CUDA wheels (torch2.11.0-cu130-cp312, sm_90), built
# unmodified on the CPU-only machine. For each wheel in wheels/: a fresh venv over this
# machine's torch (--system-site-packages, plus a .pth to torch's site-packages for when the
# interpreter is itself a venv), the wheel installed from the file with --no-deps, then its
# own test suite where the sdist ships one (torchlpc), else ops_check.py (CUDA kernels against
# the wheel's CPU kernels or plain torch). Offline: extra deps come from deps/ only, and only
# when the machine lacks them.
#
# usage: bash run.sh [PYTHON]      PYTHON: has torch 2.11.0+cu130, Python 3.12 (default python3)
# Writes $OUT (default ./out): machine.txt, one <wheel>.txt per wheel, summary.txt.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${1:-python3}
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/rw-gpu.XXXXXX)
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1

{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
    "$PY" -c 'import numpy; print("numpy", numpy.__version__)' 2>&1 | tail -1
    "$PY" -c 'import scipy; print("scipy", scipy.__version__)' 2>&1 | tail -1
    "$PY" -c 'import numba; print("numba", numba.__version__)' 2>&1 | tail -1
    "$PY" -c 'import pytest; print("pytest", pytest.__version__)' 2>&1 | tail -1
} 2>&1 | tee "$OUT/machine.txt"
TORCH_SITE=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') || {
    echo "no torch in $PY"; exit 2; }

# the import names each test needs, installed from deps/ only when missing
needs() {
    case $1 in
        torchlpc-*) echo "pytest numpy numba" ;;
        torch_cluster-*) echo "scipy" ;;
        *) echo "" ;;
    esac
}

: > "$OUT/summary.txt"
for wheel in "$HERE"/wheels/*.whl; do
    base=$(basename "$wheel")
    dist=${base%%-*}
    log="$OUT/${base%.whl}.txt"
    venv="$WORK/$dist"
    started=$SECONDS
    (
        echo "== $base"
        "$PY" -m venv --system-site-packages "$venv" || exit 3
        site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$TORCH_SITE" > "$site/zz_gpu_torch.pth"
        "$venv/bin/python" -m pip install -q --no-deps "$wheel" || exit 4
        for mod in $(needs "$base"); do
            if ! "$venv/bin/python" -c "import $mod" 2>/dev/null; then
                pkg=$mod
                echo "installing $pkg from deps/ (missing here)"
                "$venv/bin/python" -m pip install -q --find-links "$HERE/deps" "$pkg" || echo "cannot install $pkg offline"
            fi
        done
        cd "$WORK"
        case $dist in
            torchlpc)
                timeout 1500 "$venv/bin/python" -m pytest -q -p no:cacheprovider --import-mode=importlib \
                    -rs "$HERE/tests/torchlpc_tests" ;;
            *)
                timeout 900 "$venv/bin/python" "$HERE/ops_check.py" "$dist" ;;
        esac
    ) > "$log" 2>&1
    rc=$?
    line="$base: exit $rc in $((SECONDS - started)) s; $(tail -1 "$log")"
    echo "$line" | tee -a "$OUT/summary.txt"
done
rm -rf "$WORK"
