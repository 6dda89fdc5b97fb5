"""The real-world corpus: third-party extensions as published on PyPI, pinned by hash.

Each is built unmodified: `buildtools init` writes its matrix.yaml, and `edits` (the only
hand edits, each with its reason, also listed in docs/realworld.md) are applied to it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Extension:
    name: str
    version: str
    sdist: str  # file name on PyPI
    sha256: str
    style: str  # the build style it stands for
    module: str
    # (old, new, why) replacements in the matrix.yaml init wrote; empty: used as written
    edits: tuple[tuple[str, str, str], ...] = ()
    # why the published sdist builds no extension by default (the build must say so)
    pure: str | None = None
    # its CUDA cell is built by test_cuda_cell (opt-in: BUILDTOOLS_TEST_CUDA=1)
    cuda: bool = True
    # edits of its CUDA build only, on top of `edits` and CUDA_EDITS, each with its reason
    cuda_edits: tuple[tuple[str, str, str], ...] = ()
    # the cells its CUDA job covers (an abi3 job covers one per Python)
    cuda_cells: tuple[str, ...] = ("torch2.11.0-cu130-cp312",)


# The CUDA cell every compiled corpus extension builds on the CPU-only machine (its toolchain:
# torch 2.11.0+cu130 and the CUDA 13.0 compiler wheels, Python 3.12), from the `pr` profile
# `buildtools init` writes.
CUDA_CELL = "torch2.11.0-cu130-cp312"

# The one matrix.yaml edit of the CUDA cells: device code for the GPU the wheels are tested on
# (H100, sm_90) instead of the six archs of the knowledge base. Each arch is a separate device
# compile of every .cu file; on a 2-core machine six of them took torchlpc 1510 s.
CUDA_EDITS: tuple[tuple[str, str, str], ...] = (
    (
        "\naccelerators:\n",
        '\naccelerators:\n  cu130: {arch_list: "9.0"}\n',
        "arch list reduced to sm_90 (the H100 the wheels are tested on): compile time on 2 cores",
    ),
)


# xformers 0.0.33.post2's test files that import only the package (see its edit), less two
# that test no compiled code and fail here for other reasons (measured: 35 of 272 failed):
# test_checkpoint.py (xformers.checkpoint, pure Python over torch.utils.checkpoint: 24 fail
# with an IndexError inside torch 2.13's checkpoint.py, 7 need scipy's LinearConstraint) and
# test_fwbw_overlap.py (4 tests allocate on "cuda" without a skip marker).
XFORMERS_TESTS = (
    "attention_mask",
    "attention_patterns",
    "attention_utils",
    "core_attention",
    "custom_ops",
    "profiler",
    "residual",
    "sparsecs",
    "tiled_matmul",
    "tree_attention",
    "triton_varargs",
    "unbind",
)

CORPUS: tuple[Extension, ...] = (
    Extension(
        name="torch-scatter",
        version="2.1.2",
        sdist="torch_scatter-2.1.2.tar.gz",
        sha256="69b3aa435f2424ac6a1bfb6ff702da6eb73b33ca0db38fb26989c74159258e47",
        style="setup.py, CppExtension/CUDAExtension chosen by torch.cuda.is_available() "
        "or FORCE_CUDA, several .cu files",
        module="torch_scatter",
    ),
    Extension(
        name="torch-cluster",
        version="1.6.3",
        sdist="torch_cluster-1.6.3.tar.gz",
        sha256="78d5a930a5bbd0d8788df8c6d66addd68d6dd292fe3edb401e3dacba26308152",
        style="setup.py, one extension per operator, CUDA by torch.cuda.is_available(), "
        "FORCE_CUDA or FORCE_ONLY_CUDA, several .cu files",
        module="torch_cluster",
    ),
    Extension(
        name="chamferdist",
        version="1.0.3",
        sdist="chamferdist-1.0.3.tar.gz",
        sha256="ac9d3a723329d230bcdd5ee8a01f13632ebae31b2ae221116579637ed57a4567",
        style="setup.py + setup.cfg, CUDAExtension when torch.cuda.is_available() and "
        "CUDA_HOME, or FORCE_CUDA; NVCC_FLAGS read from the environment",
        module="chamferdist",
    ),
    Extension(
        name="torchlpc",
        version="0.7.2",
        sdist="torchlpc-0.7.2.tar.gz",
        sha256="260a765645cdf0112d3fcfcebc41d11855ac52264b3185f24068ad873b1b0be3",
        style="pyproject.toml (setuptools backend) + setup.py from PyTorch's extension "
        "template (py_limited_api switch, off in this release), OpenMP, ships tests/",
        module="torchlpc",
    ),
    Extension(
        name="xformers",
        version="0.0.33.post2",
        sdist="xformers-0.0.33.post2.tar.gz",
        sha256="647ddf26578d2b8643230467ef1f0fbfef0bbe556a546bd27a70d4855d3433e1",
        style="pyproject.toml (setuptools backend, torch>=2.7 at build time) + setup.py; "
        "py_limited_api=True with bdist_wheel py_limited_api=cp39 (a cp39-abi3 wheel, as on "
        "PyPI); CPU: 13 .cpp files (sparse attention CPU kernels); CUDA: its 18 .cu files "
        "(sputnik sparse attention, 2:4 sparsity, SwiGLU) with flash-attention off",
        module="xformers",
        edits=(
            (
                "--import-mode=importlib tests\n",
                "--import-mode=importlib "
                + " ".join(f"tests/test_{t}.py" for t in XFORMERS_TESTS)
                + "\n",
                "the sdist ships tests/test_*.py but not the helpers 13 of them import "
                "(tests/utils.py, tests/multiprocessing_utils.py): those fail at collection; "
                "the smoke runs 12 of the 14 that import nothing else (see XFORMERS_TESTS)",
            ),
        ),
        cuda_edits=(
            (
                "  smoke_requires:",
                '  build_env: {XFORMERS_DISABLE_FLASH_ATTN: "1"}\n  smoke_requires:',
                "flash-attention not built: by default setup.py adds FlashAttention-3's 451 "
                "Hopper kernel instantiations (hours on 2 cores); without them the CUDA build "
                "is xformers' own 18 .cu files, and at run time xformers uses the "
                "FlashAttention and CUTLASS attention kernels inside torch",
            ),
            (
                '      - {torch: "2.11.0", accelerator: cu130, python: "3.12"}\n',
                '      - {torch: "2.11.0", accelerator: cu130, python: "3.11"}\n'
                '      - {torch: "2.11.0", accelerator: cu130, python: "3.12"}\n',
                "a second Python in the pr profile's CUDA cell: the abi3 job is built with the "
                "oldest (3.11) and smoke-tested on a 3.12 GPU runner",
            ),
        ),
        cuda_cells=("torch2.11.0-cu130-cp311", "torch2.11.0-cu130-cp312"),
    ),
    Extension(
        name="torch-harmonics",
        version="0.8.0",
        sdist="torch_harmonics-0.8.0.tar.gz",
        sha256="b44340184416283a3636640a9050c2187515d6bd9858fa0421b048b66465f773",
        style="pyproject.toml (setuptools backend, requires setuptools-scm: a build requirement "
        "with a dependency of its own, vcs-versioning) + setup.py; a CppExtension always, two "
        "CUDAExtensions (7 .cu, -O3, ninja) when torch.cuda.is_available() or "
        "FORCE_CUDA_EXTENSION; top-level extension modules whose ImportError the package "
        "swallows",
        module="torch_harmonics",
        edits=(
            (
                "--import-mode=importlib tests\n",
                "--import-mode=importlib tests/test_convolution.py tests/test_sht.py\n",
                "the test files its own tests/run_tests.sh runs without -d (the distributed "
                "ones need a process group of several ranks)",
            ),
        ),
    ),
    Extension(
        name="torch-linear-assignment",
        version="0.1.0",
        sdist="torch_linear_assignment-0.1.0.tar.gz",
        sha256="317566b2781a31a1253141a94d9a7cb8ece05be131741f582634ebbd791435d4",
        style="pyproject.toml (setuptools backend), sources under src/, a CUDA-only "
        "extension behind TLA_BUILD_LEGACY_CUDA=1",
        module="torch_linear_assignment",
        pure="0.1.0 builds its extension only with TLA_BUILD_LEGACY_CUDA=1 (CUDA only, a "
        "benchmark); by default the wheel is pure Python",
        cuda=False,
    ),
)
