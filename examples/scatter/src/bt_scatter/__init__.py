"""bt_scatter: `scatter_sum` as a PyTorch custom operator (CPU, CUDA and ROCm kernels).

Importing the package loads the compiled library, which registers
`torch.ops.bt_scatter.scatter_sum` for every backend it was built with.
"""

from __future__ import annotations

import torch

from . import _C  # noqa: F401  (loading the library registers the operators)

__all__ = ["__version__", "has_kernel", "scatter_sum"]

__version__ = "0.1.0"

_OP = "bt_scatter::scatter_sum"


def scatter_sum(
    src: torch.Tensor, index: torch.Tensor, dim_size: int | None = None
) -> torch.Tensor:
    """Sum the rows of `src` into `dim_size` buckets: out[index[i]] += src[i] (along dim 0).

    `index` is a 1-D int64 tensor with one entry per row of `src`; `dim_size` defaults to
    `index.max() + 1`. float32, float64, float16 and bfloat16 are supported; 16-bit inputs
    are accumulated in float32. Out-of-range indices raise on CPU and are skipped on GPUs.
    """
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    return torch.ops.bt_scatter.scatter_sum(src, index, dim_size)


def has_kernel(dispatch_key: str) -> bool:
    """Whether this build registered a kernel for `dispatch_key` ("CPU", "CUDA")."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(_OP, dispatch_key))


def _register_python_parts() -> None:
    # Shape inference (torch.compile, meta tensors) and autograd, where torch offers the API.
    library = torch.library
    if hasattr(library, "register_fake"):  # torch >= 2.4

        @library.register_fake(_OP)
        def _fake(src: torch.Tensor, index: torch.Tensor, dim_size: int) -> torch.Tensor:
            return src.new_empty((dim_size, *src.shape[1:]))

    if hasattr(library, "register_autograd"):  # torch >= 2.4

        def _setup_context(ctx: object, inputs: tuple[object, ...], output: object) -> None:
            ctx.save_for_backward(inputs[1])

        def _backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
            (index,) = ctx.saved_tensors
            return grad.index_select(0, index), None, None

        library.register_autograd(_OP, _backward, setup_context=_setup_context)


_register_python_parts()
