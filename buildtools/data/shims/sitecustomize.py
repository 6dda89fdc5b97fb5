"""buildtools build shim: `torch.cuda.is_available()` answers True during a CUDA/ROCm build.

Many setup.py files decide whether to compile device code with torch.cuda.is_available(),
which is False on a CPU-only build node, so a CUDA cell would silently produce a CPU-only
wheel. buildtools puts this directory on PYTHONPATH for device cells only (with
BUILDTOOLS_FORCE_CUDA_AVAILABLE=1); the no-device-code check still verifies the result.
Set BUILDTOOLS_FORCE_CUDA_AVAILABLE=0 in the job's build_env to turn it off.
"""

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

_ACTIVE = os.environ.get("BUILDTOOLS_FORCE_CUDA_AVAILABLE") == "1"


class _PatchTorchCuda(importlib.abc.MetaPathFinder):
    """After `torch.cuda` is imported, make `is_available` return True."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            module.is_available = lambda: True  # type: ignore[attr-defined]
            sys.stderr.write(
                "[buildtools] torch.cuda.is_available() forced to True for this device build\n"
            )

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _ACTIVE:
    sys.meta_path.insert(0, _PatchTorchCuda())
