#!/usr/bin/env bash
# torch-harmonics 0.8.0's CUDA wheel on an offline GPU runner whose python3 holds a CUDA torch
# (docs/realworld.md, "Run on a GPU (torch-harmonics 0.8.0, sm_90, built through a cluster)").
# Run from the repository root:
#
#     WHEEL=torch_harmonics-0.8.0+pt211cu130-cp312-…whl SDIST=torch_harmonics-0.8.0.tar.gz \
#         DEPS=dir-of-wheels OUT=/tmp/out bash docs/realworld-gpu-harmonics-run.sh
#
# DEPS holds what the runner cannot download: pip, pytest (with iniconfig, pluggy, pygments)
# and parameterized. The wheel goes beside the runner's torch (pip --target, PYTHONPATH);
# nothing is installed into the runner's Python.
set -u
: "${WHEEL:?the wheel}" "${SDIST:?its sdist (for tests/)}" "${DEPS:?a directory of wheels}"
OUT=${OUT:-/tmp/out}
SITE=${SITE:-/tmp/th-site}
mkdir -p "$OUT"
PIPW=$(ls "$DEPS"/pip-*.whl | head -1)
python3 "$PIPW/pip" install -q --no-index --find-links "$DEPS" --no-deps --target "$SITE" \
    "$WHEEL" parameterized pytest iniconfig pluggy pygments || exit 1
export PYTHONPATH=$SITE
sha256sum "$WHEEL" | tee "$OUT/smoke.log"
# the wheel's own CUDA extension modules, their kernels seen by the profiler, and results
# against the CPU path of the same layers (fp32 on both sides: cuDNN's TF32, on by default,
# would round the attention's projections)
(cd /tmp && python3 - <<'PY') 2>&1 | tee -a "$OUT/smoke.log"
import torch
import attention_cuda_extension
import disco_cuda_extension
import torch_harmonics as th
from torch.profiler import ProfilerActivity, profile
from torch_harmonics import _neighborhood_attention as na
from torch_harmonics import convolution

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
print("torch", torch.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
for m in (disco_cuda_extension, attention_cuda_extension, th):
    print("module", m.__name__, m.__file__)
assert convolution._cuda_extension_available and na._cuda_extension_available


def on_gpu(layer, x, marker):
    ref = layer(x)  # CPU: the package's torch code
    gpu = layer.to("cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = gpu(x.cuda())
        torch.cuda.synchronize()
    kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    mine = [k for k in kernels if marker in k]
    err = (out.detach().cpu() - ref.detach()).abs().max().item()
    print(f"kernels of the wheel ({marker}): {mine[:4]}; max |gpu - cpu|: {err}")
    assert mine, kernels
    assert torch.allclose(out.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-3), err


torch.manual_seed(0)
conv = th.DiscreteContinuousConvS2(4, 8, in_shape=(32, 64), out_shape=(16, 32), kernel_shape=(3, 3))
on_gpu(conv, torch.randn(2, 4, 32, 64), "disco")
att = th.NeighborhoodAttentionS2(in_channels=8, num_heads=1, in_shape=(16, 32), out_shape=(16, 32))
on_gpu(att, torch.randn(1, 8, 16, 32), "s2_attn")
print("GPU SMOKE OK")
PY
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
# its own tests (classes run on CPU and on CUDA), from a directory without its sources
rm -rf /tmp/th-tests && mkdir -p /tmp/th-tests && tar xzf "$SDIST" -C /tmp/th-tests
cd /tmp/th-tests/torch_harmonics-0.8.0 && rm -rf torch_harmonics || exit 1
timeout 600 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib \
    tests/test_convolution.py tests/test_attention.py 2>&1 | tail -5 | tee "$OUT/tests.log"
