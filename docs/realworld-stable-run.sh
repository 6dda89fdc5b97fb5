#!/usr/bin/env bash
# A real third-party stable-ABI extension, unmodified: pytorch/extension-cpp's
# extension_cpp_stable (commit a851af5f), built once for its torch >=2.10 window, checked
# (the stable-ABI check: every torch symbol a shim of 2.10) and smoke-tested with its own
# tests on every torch release of the window (2.10.0 … 2.15.0), CPU.
#
#   git clone https://github.com/pytorch/extension-cpp && git -C extension-cpp checkout a851af5f
#   docs/realworld-stable-run.sh extension-cpp OUT
#
# The only file added to the checkout is the matrix (tests/realworld/stable/). PyPI serves
# the releases other than the local CPU build as CUDA builds (their CPU libraries are what a
# CPU wheel uses): ~24 GB in uv's cache the first time. PIP_CONSTRAINT=/dev/null lifts a
# machine-wide pip constraint that would put another torch over the release under test.
set -euo pipefail
checkout=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
work="$out/extension-cpp"
rm -rf "$work" && cp -r "$checkout" "$work"
cp "$here/tests/realworld/stable/extension_cpp_stable.matrix.yaml" \
   "$work/extension_cpp_stable/matrix.yaml"
cd "$work/extension_cpp_stable"
buildtools plan
buildtools build --wheelhouse "$out/wheelhouse" --no-live
wheel=$(ls "$out"/wheelhouse/extension_cpp_stable-*.whl)
buildtools check "$wheel"
PIP_CONSTRAINT=/dev/null buildtools smoke "$wheel" --torch-index https://pypi.org/simple \
  --out "$out/smoke"
