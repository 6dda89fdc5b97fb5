#!/usr/bin/env bash
# GPU proof of issue 14's abi3 smoke: a cp311-abi3 CUDA wheel (built on the CPU-only machine
# with Python 3.11, torch 2.11.0+cu130, sm_90) smoke-tested on this runner's Python 3.12.
set -uo pipefail
C=$PWD/.smoke-carry
P=$PWD/examples/scatter
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $C/deps/*.whl || exit 1
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, torch.cuda.get_device_name(0))'; } 2>&1 | tee $OUT/machine.txt
for v in old new; do
  echo "=== buildtools $v" | tee -a $OUT/smoke-$v.txt
  # from /tmp: `python -m` puts the working directory first on sys.path
  (cd /tmp && PYTHONPATH=/tmp/site:$C/$v timeout 500 python3 -c 'import buildtools, sys; print("buildtools from", buildtools.__file__); sys.argv[0] = "buildtools"; from buildtools.cli.main import main; sys.exit(main())' smoke \
      $C/wheels/abi3 --system-torch --timeout 300 --smoke-command "python smoke.py" \
      --project $P --out /tmp/smoke-$v) 2>&1 | tee -a $OUT/smoke-$v.txt
  echo "exit status: ${PIPESTATUS[0]}" | tee -a $OUT/smoke-$v.txt
  cp /tmp/smoke-$v/report.json $OUT/report-$v.json 2>/dev/null
done
