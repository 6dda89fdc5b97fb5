#!/usr/bin/env bash
# GPU run of a real-world corpus wheel: torchlpc 0.7.2, built unmodified on the CPU-only
# machine for torch 2.11.0 + CUDA 13.0 / Python 3.12, with its own test suite as the smoke.
set -uo pipefail
C=$PWD/.smoke-carry
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site $C/deps/*.whl >/dev/null 2>&1 || exit 1
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch, pytest; print("python", sys.version.split()[0], "torch", torch.__version__, "pytest", pytest.__version__)'; } 2>&1 | tee $OUT/machine.txt
(cd /tmp && PYTHONPATH=/tmp/site:$C/btpkg timeout 560 python3 -c 'import sys; sys.argv[0] = "buildtools"; from buildtools.cli.main import main; sys.exit(main())' smoke \
   $C/rw/wh --system-torch --accelerator cuda --matrix $C/rw/src/matrix.yaml --out /tmp/smoke --timeout 500) 2>&1 | tee $OUT/smoke.txt
echo "exit status: ${PIPESTATUS[0]}" | tee -a $OUT/smoke.txt
cp /tmp/smoke/report.json $OUT/report.json 2>/dev/null
