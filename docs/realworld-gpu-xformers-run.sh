#!/usr/bin/env bash
# GPU run of the corpus' abi3 wheel on a Python other than the build's: xformers 0.0.33.post2,
# built unmodified on the CPU-only machine as one abi3 job (Python 3.11, torch 2.11.0+cu130,
# sm_90) covering torch2.11.0-cu130-cp311 and -cp312, smoke-tested here on Python 3.12 with
# its own tests, then its compiled CUDA ops checked against references (ops_check.py).
set -uo pipefail
REPO=$PWD
C=$PWD/.smoke-carry
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site $C/deps/*.whl >/dev/null 2>&1 || exit 1
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch, pytest; print("python", sys.version.split()[0], "torch", torch.__version__, "pytest", pytest.__version__)'; } 2>&1 | tee $OUT/machine.txt
# 1. buildtools smoke: picks the covered cell that matches this runner and runs the project's
# tests; one smoke per test file of project.smoke, in parallel (on the GPU the CUDA cases
# that skip on CPU run, and the whole list took over the 500 s one smoke may take here)
FILES=$(python3 -c "import re, sys; print(re.search(r'^  smoke: .*?importlib (.*)$', open(sys.argv[1]).read(), re.M)[1])" $C/xf/src/matrix.yaml)
i=0
for f in $FILES; do
  i=$((i + 1))
  ( (cd /tmp && PYTHONPATH=/tmp/site:$REPO timeout 570 python3 -c 'import sys; sys.argv[0] = "buildtools"; from buildtools.cli.main import main; sys.exit(main())' smoke \
       $C/xf/wh --system-torch --accelerator cuda --matrix $C/xf/src/matrix.yaml --out /tmp/smoke-$i --timeout 540 \
       --smoke-command "python -m pytest -q -p no:cacheprovider --import-mode=importlib --durations=3 $f") > $OUT/smoke-$i.txt 2>&1
    echo "exit status: $?" >> $OUT/smoke-$i.txt
    cp /tmp/smoke-$i/report.json $OUT/report-$i.json 2>/dev/null ) &
done
# 2. the compiled ops (2:4 sparsity, SwiGLU) and attention against references
V=/tmp/xf-ops
python3 -m venv --system-site-packages $V
TORCH_SITE=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "$TORCH_SITE" > "$($V/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_gpu_torch.pth"
$V/bin/python -m pip install -q --no-deps $C/xf/wh/*.whl
(cd /tmp && timeout 120 $V/bin/python -m xformers.info) 2>&1 | tee $OUT/xformers-info.txt
(cd /tmp && timeout 400 $V/bin/python $REPO/tests/realworld/gpu/ops_check.py xformers) 2>&1 | tee $OUT/ops.txt
echo "exit status: ${PIPESTATUS[0]}" | tee -a $OUT/ops.txt
wait
# one file of each kind comes back: the smokes' logs and reports, in file order
for n in $(seq 1 $i); do cat $OUT/smoke-$n.txt; done > $OUT/smoke.txt
python3 -c 'import json, sys; json.dump([json.load(open(p)) for p in sys.argv[1:]], sys.stdout, indent=1)' \
    $(for n in $(seq 1 $i); do echo $OUT/report-$n.json; done) > $OUT/reports.json
rm -f $OUT/smoke-*.txt $OUT/report-*.json
grep -h "exit status\|passed\|failed\|TIMEOUT\|cell torch" $OUT/smoke.txt | tail -40
