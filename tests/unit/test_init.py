"""`buildtools init`: an existing extension's repository in, matrix.yaml and noxfile.py out."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from buildtools.adopt import find_risks, inspect_project
from buildtools.cli import main as cli

SETUP = """\
import os
import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

ext = CUDAExtension if torch.cuda.is_available() else CppExtension
setup(
    name="fancy-ops",
    ext_modules=[ext("fancy_ops._C", ["csrc/ops.cpp", "csrc/ops_cuda.cu"],
                     py_limited_api=True)],
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
    cmdclass={"build_ext": BuildExtension},
    extra=os.environ.get("FANCY_FAST_MATH"),
)
"""
KERNEL = """\
// __ldg here would be a risk under HIP; in a comment it is not
template <typename scalar_t>
__global__ void k(const scalar_t* x, scalar_t* y) { y[0] = __ldg(&x[0]); }
void run(at::Tensor t) {
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(t.scalar_type(), "k", [&] {
    k<scalar_t><<<1, 1>>>(t.const_data_ptr<scalar_t>(), t.data_ptr<scalar_t>());
  });
}
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "fancy"
    (root / "csrc").mkdir(parents=True)
    (root / "fancy_ops").mkdir()
    (root / "tests").mkdir()
    (root / "setup.py").write_text(SETUP)
    (root / "csrc" / "ops.cpp").write_text("#include <torch/extension.h>\n")
    (root / "csrc" / "ops_cuda.cu").write_text(KERNEL)
    (root / "fancy_ops" / "__init__.py").write_text("")
    (root / "tests" / "test_ops.py").write_text("def test_x():\n    pass\n")
    return root


def test_inspection_reads_the_build(repo: Path) -> None:
    found = inspect_project(repo)
    assert found.name == "fancy-ops" and found.module == "fancy_ops"
    assert found.cuda_sources == ("csrc/ops_cuda.cu",) and found.cpp_sources == ("csrc/ops.cpp",)
    assert found.limited_api == "cp39" and found.abi == "abi3"
    assert found.cuda_gate == "torch.cuda.is_available() at build time"
    assert found.env_vars == ("FANCY_FAST_MATH",) and found.tests_dir == "tests"
    assert not found.downloads and found.force_build is None
    assert found.describe() == "setuptools, 1 .cu file(s), 1 C++ file(s), py_limited_api (cp39)"


def test_risks_with_their_remedies(repo: Path) -> None:
    risks = find_risks(inspect_project(repo), oldest_torch="2.0.0", rocm=True, cpu=True)
    assert [r.code for r in risks] == [
        "build-time-cuda-detection",
        "api-newer-than-torch",
        "hip-incompatible",
    ]
    assert "const_data_ptr exists from torch 2.1" in risks[1].message
    assert risks[1].where == ("csrc/ops_cuda.cu",) and "data_ptr<T>()" in risks[1].remedy
    assert "HIP has no __ldg overload for c10::Half" in risks[2].remedy
    # a matrix whose oldest torch has the API: no API risk
    newer = find_risks(inspect_project(repo), oldest_torch="2.11.0", rocm=False, cpu=True)
    assert "api-newer-than-torch" not in [r.code for r in newer]


def test_init_writes_a_matrix_that_plans_and_never_overwrites(repo: Path) -> None:
    out = io.StringIO()
    assert cli.main(["init", str(repo), "--torch", "2.9.0", "--torch", "2.11.0"], out=out) == 0
    text = out.getvalue()
    matrix = (repo / "matrix.yaml").read_text()
    assert (
        "abi: abi3" in matrix
        and "smoke: python -m pytest -q -p no:cacheprovider --import-mode=importlib tests" in matrix
    )
    assert "smoke_requires: [pytest]" in matrix
    assert "# setup.py reads FANCY_FAST_MATH" in matrix
    assert "accelerator: [cpu, cu126, cu130]" in matrix
    assert "def build(session" in (repo / "noxfile.py").read_text()
    assert "risk   build-time-cuda-detection" in text and "remedy:" in text
    assert text.rstrip().endswith(
        "nox -s smoke                       # install that wheel and run project.smoke"
    )
    for profile in ("release", "pr", "local"):
        ids = io.StringIO()
        argv = ["plan", "--matrix", str(repo / "matrix.yaml"), "--profile", profile]
        assert cli.main([*argv, "--format", "ids"], out=ids) == 0
        assert ids.getvalue().split()
    # a second run keeps both files as they are
    (repo / "matrix.yaml").write_text(matrix + "# edited\n")
    again = io.StringIO()
    assert cli.main(["init", str(repo)], out=again) == 0
    assert (repo / "matrix.yaml").read_text().endswith("# edited\n")
    assert "matrix.yaml exists: kept" in again.getvalue()
    assert "noxfile.py exists and has every session" in again.getvalue()


def test_dry_run_prints_and_writes_nothing(repo: Path) -> None:
    out = io.StringIO()
    assert cli.main(["init", str(repo), "--dry-run"], out=out) == 0
    assert not (repo / "matrix.yaml").exists() and not (repo / "noxfile.py").exists()
    assert "--- would write" in out.getvalue() and "default_profile: local" in out.getvalue()


def test_not_a_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["init", str(tmp_path)]) == 3
    assert "no setup.py, pyproject.toml or CMakeLists.txt" in capsys.readouterr().err


def _cpu_build_repo(root: Path, header: str) -> Path:
    (root / "csrc" / "cuda").mkdir(parents=True)
    (root / "setup.py").write_text(SETUP)
    (root / "csrc" / "ops.cpp").write_text('#include <torch/extension.h>\n#include "utils.h"\n')
    (root / "csrc" / "utils.h").write_text(header)
    # device-side C++ files: compiled by CUDA builds only, never flagged
    (root / "csrc" / "cuda" / "launch.cpp").write_text("#include <cuda_runtime.h>\n")
    (root / "csrc" / "ops_cuda.cpp").write_text("#include <ATen/cuda/CUDAContext.h>\n")
    return root


@pytest.mark.parametrize(
    ("header", "flagged"),
    [
        ("#pragma once\n#include <cuda.h>\n", ("<cuda.h>",)),
        # an include guard is not a condition
        (
            "#ifndef UTILS_H\n#define UTILS_H\n#include <ATen/cuda/CUDAContext.h>\n"
            '#include "more.h"\n#endif\n',
            ("<ATen/cuda/CUDAContext.h>", "<cuda_fp16.h>"),
        ),
        ("#pragma once\n#ifdef WITH_CUDA\n#include <cuda_runtime.h>\n#endif\n", ()),
        ("#pragma once\n#if defined(USE_CUDA)\n#  include <cuda_runtime.h>\n#endif\n", ()),
        ("#pragma once\n// #include <cuda.h>\n/* #include <cublas_v2.h> */\n", ()),
        ("#pragma once\n#include <torch/extension.h>\n", ()),
    ],
)
def test_cuda_header_in_the_cpu_build(
    tmp_path: Path, header: str, flagged: tuple[str, ...]
) -> None:
    root = _cpu_build_repo(tmp_path / "proj", header)
    (root / "csrc" / "more.h").write_text("#pragma once\n#include <cuda_fp16.h>\n")
    risks = [
        r
        for r in find_risks(inspect_project(root), oldest_torch="2.11.0", rocm=False, cpu=True)
        if r.code == "cuda-header-in-cpu-build"
    ]
    if not flagged:
        assert risks == []
        return
    (risk,) = risks
    assert all(name in risk.message for name in flagged), risk.message
    assert "csrc/ops.cpp through csrc/utils.h" in risk.message
    assert risk.where[0] == "csrc/utils.h" and "#ifdef WITH_CUDA" in risk.remedy
    assert "csrc/cuda/launch.cpp" not in risk.where and "csrc/ops_cuda.cpp" not in risk.where
    # a matrix without CPU cells has no CPU build to break
    no_cpu = find_risks(inspect_project(root), oldest_torch="2.11.0", rocm=False, cpu=False)
    assert "cuda-header-in-cpu-build" not in [r.code for r in no_cpu]


def test_init_reports_a_cuda_header_in_the_cpu_build(tmp_path: Path) -> None:
    root = _cpu_build_repo(tmp_path / "proj", "#pragma once\n#include <cuda.h>\n")
    out = io.StringIO()
    assert cli.main(["init", str(root), "--dry-run"], out=out) == 0
    text = out.getvalue()
    assert "risk   cuda-header-in-cpu-build: <cuda.h> included outside any #if" in text, text
    assert "(csrc/utils.h)" in text


def test_init_proposes_no_cpu_cell_for_a_cuda_only_project(tmp_path: Path) -> None:
    """CUDA headers outside any #if in the C++ sources beside .cu files: a CUDA-only
    project; the proposed matrix builds CUDA cells only, locally too, and every profile plans."""
    root = _cpu_build_repo(tmp_path / "proj", "#pragma once\n#include <c10/cuda/CUDAStream.h>\n")
    (root / "csrc" / "kernel.cu").write_text(KERNEL)
    out = io.StringIO()
    assert cli.main(["init", str(root)], out=out) == 0
    text = out.getvalue()
    assert "CUDA-only, so the proposed matrix has no CPU cell (accelerators: cu" in text, text
    assert "<c10/cuda/CUDAStream.h> included outside any #if" in text
    assert "risk   cuda-header-in-cpu-build" not in text  # said once, as what init did
    matrix = (root / "matrix.yaml").read_text()
    assert "accelerator: [cu126, cu130]   # CUDA-only sources: no cpu" in matrix, matrix
    for profile in ("local", "pr", "release"):
        ids = io.StringIO()
        argv = ["plan", "--matrix", str(root / "matrix.yaml"), "--profile", profile]
        assert cli.main([*argv, "--format", "ids"], out=ids) == 0
        cells = ids.getvalue().split()
        assert cells and not [c for c in cells if "-cpu-" in c], (profile, cells)


CACHED_WHEELS_SETUP = """\
import os, urllib.request
from setuptools import setup
from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

FORCE_BUILD = os.getenv("FANCY_FORCE_BUILD", "FALSE") == "TRUE"

class CachedWheelsCommand(_bdist_wheel):
    def run(self):
        if FORCE_BUILD:
            return super().run()
        urllib.request.urlretrieve("https://example.invalid/fancy.whl", "fancy.whl")

setup(name="fancy-ops", ext_modules=[CUDAExtension("fancy_ops._C", ["csrc/ops.cu"])],
      cmdclass={"bdist_wheel": CachedWheelsCommand, "build_ext": BuildExtension})
"""


def test_a_setup_py_that_downloads_its_wheel_is_made_to_compile(tmp_path: Path) -> None:
    """flash-attn's and causal-conv1d's pattern: a bdist_wheel that downloads a prebuilt wheel
    unless FORCE_BUILD says TRUE. init reports it and sets the switch in build_env."""
    root = tmp_path / "proj"
    (root / "csrc").mkdir(parents=True)
    (root / "setup.py").write_text(CACHED_WHEELS_SETUP)
    (root / "csrc" / "ops.cu").write_text(KERNEL)
    found = inspect_project(root)
    assert found.downloads and found.force_build == ("FANCY_FORCE_BUILD", "TRUE")
    out = io.StringIO()
    assert cli.main(["init", str(root)], out=out) == 0
    text = out.getvalue()
    assert "risk   downloads-while-building: setup.py fetches files over the network" in text
    assert "remedy: set FANCY_FORCE_BUILD=TRUE (setup.py's own switch)" in text
    matrix = (root / "matrix.yaml").read_text()
    assert '  build_env: {FANCY_FORCE_BUILD: "TRUE"}\n' in matrix, matrix
    ids = io.StringIO()
    assert (
        cli.main(["plan", "--matrix", str(root / "matrix.yaml"), "--format", "ids"], out=ids) == 0
    )
    # the switch is part of every job's build environment (and so of its fingerprint)
    plan = io.StringIO()
    argv = ["plan", "--matrix", str(root / "matrix.yaml"), "--profile", "pr", "--format", "json"]
    assert cli.main(argv, out=plan) == 0
    assert '"FANCY_FORCE_BUILD"' in plan.getvalue()


def test_init_proposes_the_newest_confirmed_releases_the_index_serves() -> None:
    from types import SimpleNamespace
    from typing import Any

    from buildtools.adopt.scaffold import choose_matrix
    from buildtools.knowledge import load_knowledge

    kb = load_knowledge()
    project: Any = SimpleNamespace(has_cuda=False)
    # offline: the knowledge base alone; 2.14 and 2.15 are unconfirmed rows, not proposed
    assert choose_matrix(project, kb).torch == ("2.11.0", "2.13.0")
    # the index serves 2.12.1 but not yet 2.13: the newest served patch of each minor
    served = frozenset({"2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.14.1"})
    assert choose_matrix(project, kb, served=served).torch == ("2.10.0", "2.12.1")
