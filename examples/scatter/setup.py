"""Build bt-scatter: the CPU op always, the CUDA/ROCm kernel when the build asks for it.

Whether device code is built depends on the torch being built against and on the
environment, never on `torch.cuda.is_available()`: build machines usually have no GPU.

Environment:
  FORCE_CUDA=1            build the CUDA (or, with a ROCm torch, HIP) kernel; fail loudly
                          if torch has no CUDA/HIP or no toolkit is found
  FORCE_ONLY_CPU=1        never build device code
  (neither)               build device code when torch has CUDA/HIP and CUDA_HOME/ROCM_HOME
                          resolves (torch.utils.cpp_extension's own search)
  TORCH_CUDA_ARCH_LIST, PYTORCH_ROCM_ARCH, MAX_JOBS
                          read by torch.utils.cpp_extension
  BT_PY_LIMITED_API=cp310 build one abi3 wheel for CPython >= 3.10 (torch >= 2.6)
  BT_TORCH_REQUIREMENT    Requires-Dist for torch; default: the built-against minor, e.g.
                          "torch==2.11.*" (the extension uses torch's C++ ABI)
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import NoReturn

import torch
from setuptools import setup
from torch.torch_version import TorchVersion
from torch.utils import cpp_extension

HERE = Path(__file__).parent.resolve()
TRUE = {"1", "true", "yes", "on"}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in TRUE


def _fail(message: str) -> NoReturn:
    raise SystemExit(f"bt-scatter setup.py: error: {message}")


def _version() -> str:
    text = (HERE / "src" / "bt_scatter" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if match is None:
        _fail("no __version__ in src/bt_scatter/__init__.py")
    return match[1]


def device_backend() -> str | None:
    """'cuda', 'hip' or None (CPU only), from FORCE_* and the torch being built against."""
    if _flag("FORCE_ONLY_CPU"):
        return None
    backend = "hip" if torch.version.hip else "cuda" if torch.version.cuda else None
    home = cpp_extension.ROCM_HOME if backend == "hip" else cpp_extension.CUDA_HOME
    if _flag("FORCE_CUDA"):
        if backend is None:
            _fail(
                f"FORCE_CUDA=1 but torch {torch.__version__} is a CPU-only build; install a "
                "CUDA or ROCm build of torch into the build environment"
            )
        if home is None:
            var = "ROCM_HOME" if backend == "hip" else "CUDA_HOME"
            _fail(f"FORCE_CUDA=1 but no {backend.upper()} toolkit was found; set {var}")
        return backend
    return backend if home is not None else None


def _check_arch_list(backend: str) -> None:
    # Without a visible GPU, cpp_extension derives an empty arch list (CUDA: IndexError;
    # ROCm >= torch 2.12: an empty --offload-arch=). Say so before it crashes.
    var = "PYTORCH_ROCM_ARCH" if backend == "hip" else "TORCH_CUDA_ARCH_LIST"
    if not os.environ.get(var) and not torch.cuda.is_available():
        example = "gfx90a;gfx942" if backend == "hip" else "8.0;9.0+PTX"
        _fail(f"no GPU is visible, so {var} must name the target archs (e.g. {var}='{example}')")


def limited_api() -> tuple[dict[str, object], dict[str, dict[str, str]], str | None]:
    """Extension kwargs, setup() options and python_requires for BT_PY_LIMITED_API."""
    tag = os.environ.get("BT_PY_LIMITED_API", "").strip()
    if not tag:
        return {}, {}, None
    match = re.fullmatch(r"cp3(\d+)", tag)
    if match is None:
        _fail(f"BT_PY_LIMITED_API={tag!r}: expected a CPython tag such as 'cp310'")
    minor = int(match[1])
    if TorchVersion(torch.__version__) < "2.6.0":
        _fail(f"BT_PY_LIMITED_API needs torch >= 2.6 (building against {torch.__version__})")
    if sys.version_info[:2] < (3, minor):
        _fail(f"BT_PY_LIMITED_API={tag} but this is Python {sys.version_info[0]}.{minor}")
    wanted = 0x03000000 | (minor << 16)
    # torch >= 2.7 defines Py_LIMITED_API itself, at its own minimum CPython; a lower tag would
    # promise compatibility the binary does not have.
    floor = getattr(cpp_extension, "min_supported_cpython", None)
    kwargs: dict[str, object] = {"py_limited_api": True}
    if floor is None:
        kwargs["define_macros"] = [("Py_LIMITED_API", hex(wanted))]
    elif wanted < int(floor, 16):
        _fail(f"BT_PY_LIMITED_API={tag} is below torch {torch.__version__}'s floor {floor}")
    return kwargs, {"bdist_wheel": {"py_limited_api": tag}}, f">=3.{minor}"


def torch_requirement() -> str:
    override = os.environ.get("BT_TORCH_REQUIREMENT", "").strip()
    if override:
        return override
    major, minor = TorchVersion(torch.__version__).split(".")[:2]
    return f"torch=={major}.{minor}.*"


def extensions() -> tuple[list[object], dict[str, dict[str, str]], str | None]:
    backend = device_backend()
    limited_kwargs, options, python_requires = limited_api()
    sources = ["csrc/scatter.cpp"]
    extra_compile_args: dict[str, list[str]] = {"cxx": ["-O3"]}
    if backend is None:
        print(f"bt-scatter: building the CPU op only (torch {torch.__version__})", file=sys.stderr)
        factory = cpp_extension.CppExtension
    else:
        _check_arch_list(backend)
        arch_var = "PYTORCH_ROCM_ARCH" if backend == "hip" else "TORCH_CUDA_ARCH_LIST"
        home = cpp_extension.ROCM_HOME if backend == "hip" else cpp_extension.CUDA_HOME
        print(
            f"bt-scatter: building the CPU op and the {backend.upper()} kernel (torch "
            f"{torch.__version__}, toolkit {home}, {arch_var}={os.environ.get(arch_var)!r})",
            file=sys.stderr,
        )
        sources.append("csrc/scatter_cuda.cu")
        extra_compile_args["nvcc"] = ["-O3"]
        factory = cpp_extension.CUDAExtension
    ext = factory(
        name="bt_scatter._C",
        sources=sources,
        include_dirs=[str(HERE / "csrc")],
        extra_compile_args=extra_compile_args,
        **limited_kwargs,
    )
    return [ext], options, python_requires


ext_modules, options, python_requires = extensions()

setup(
    name="bt-scatter",
    version=_version(),
    description="scatter_sum for PyTorch (CPU, CUDA, ROCm): torch-buildtools' example extension",
    license="BSD-3-Clause",
    package_dir={"": "src"},
    packages=["bt_scatter"],
    ext_modules=ext_modules,
    cmdclass={"build_ext": cpp_extension.BuildExtension},
    options=options,
    python_requires=python_requires or ">=3.9",
    install_requires=[torch_requirement()],
    zip_safe=False,
)
