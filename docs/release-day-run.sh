#!/usr/bin/env bash
# Release day, for real on one machine: the backfill workflow's steps, with one cell built.
#
#   bash docs/release-day-run.sh            # from the repository root, buildtools installed
#
# 1. a published site holding the example's torch2.13.0-cpu-cp311 wheel;
# 2. `plan --missing` against it for torch 2.13.0 and 2.14.1 x cpu, cu130 x Python 3.11
#    (what `ci backfill` computes against a release's record);
# 3. one missing cell built: torch2.14.1-cu130-cp311 (PyPI's torch 2.14.1 is a CUDA build;
#    a CPU build of 2.14.1 lives only on download.pytorch.org);
# 4. merged into the site, which then lacks two cells;
# 5. installed from the site next to torch 2.14.1 with pip, and with uv from the find-links
#    page and the PEP 503 index, each followed by the example's smoke test (its CPU cases:
#    this machine has no GPU).
# Results of a run on 2026-11-26 are in docs/release-day.md.
set -euo pipefail

BT=${BT:-buildtools}
UV=${UV:-uv}
PY=${PY:-python3.11}
REPO=$(pwd)
W=${W:-/tmp/release-day}
mkdir -p "$W"
cd "$W"

cat > matrix.yaml <<EOF
version: 1
project: {path: $REPO/examples/scatter, name: bt-scatter, smoke: python smoke.py}
axes:
  torch: ["2.13.0", "2.14.1"]
  accelerator: [cpu, cu130]
  python: ["3.11"]
EOF

step() { printf '\n=== %s\n' "$*"; }

step "1. the published site: the example's torch2.13.0-cpu-cp311 wheel"
"$BT" build --matrix matrix.yaml --only torch2.13.0-cpu-cp311 --wheelhouse wh-first --no-live | tail -n 4
rm -rf site
"$BT" index wh-first --site site --base-url '' --no-matrix | tail -n 1

step "2. what the site lacks"
"$BT" plan --matrix matrix.yaml --missing site --format ids | tee missing.txt
printf '%s\n' torch2.13.0-cu130-cp311 torch2.14.1-cpu-cp311 torch2.14.1-cu130-cp311 > want.txt
diff want.txt missing.txt && echo "missing: exactly the three expected cells"

step "3. build one missing cell: torch2.14.1-cu130-cp311"
"$BT" build --matrix matrix.yaml --only torch2.14.1-cu130-cp311 --wheelhouse wh-backfill --no-live | tail -n 4

step "4. merge it into the site"
"$BT" index wh-backfill --site site --base-url '' --no-matrix | tail -n 1
"$BT" plan --matrix matrix.yaml --missing site --format ids | tee missing-after.txt
printf '%s\n' torch2.13.0-cu130-cp311 torch2.14.1-cpu-cp311 | diff - missing-after.txt
"$BT" plan --matrix matrix.yaml --missing site | tail -n 1

smoke() {  # the example's smoke test from an empty directory, with the given interpreter
  (cd / && "$1" "$REPO/examples/scatter/smoke.py")
  "$1" -c 'import torch, bt_scatter, importlib.metadata as m; print("torch", torch.__version__, "bt-scatter", m.version("bt-scatter"))'
}

step "5a. pip: torch 2.14.1, then bt-scatter from the find-links page"
rm -rf pip-env
"$PY" -m venv pip-env
pip-env/bin/pip install -q torch==2.14.1
pip-env/bin/pip install -q bt-scatter -f "$W/site/torch-2.14.1+cu130.html"
smoke "$W/pip-env/bin/python"

step "5b. uv: bt-scatter from the find-links page (torch 2.14.1 from PyPI through its pin)"
rm -rf uv-env
"$UV" venv -q -p "$PY" uv-env
"$UV" pip install -q --no-config -p uv-env/bin/python bt-scatter \
  --find-links "$W/site/torch-2.14.1+cu130.html"
smoke "$W/uv-env/bin/python"

step "5c. uv: bt-scatter again from the page's PEP 503 index"
"$UV" pip uninstall -q -p uv-env/bin/python bt-scatter
"$UV" pip install -q --no-config -p uv-env/bin/python bt-scatter \
  --index "file://$W/site/torch-2.14.1+cu130/"
smoke "$W/uv-env/bin/python"
step "done"
