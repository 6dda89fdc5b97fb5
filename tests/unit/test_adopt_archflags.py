"""`buildtools init` and the arch flags a project hard-codes: found with their place and
condition, evaluated per CUDA version, and written into the matrix as the archs built.

The fixtures are written here in the shapes of real setup.py files (causal-conv1d and
mamba-ssm: `-gencode` pairs appended under `bare_metal_version >= Version(...)`;
flash-attn: conditions on its own arch variable), not copied from them.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from buildtools.adopt import inspect_project
from buildtools.adopt.archflags import arch_version, built_for, describe_flags
from buildtools.adopt.archscan import scan_cmake, scan_script, scan_setup_py
from buildtools.cli import main as cli

KERNEL_SETUP = """\
import os
import torch
from packaging.version import Version, parse
from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension, BuildExtension, CUDA_HOME

SKIP_CUDA_BUILD = os.getenv("KERNEL_SKIP_CUDA_BUILD", "FALSE") == "TRUE"
HIP_BUILD = bool(torch.version.hip)
ext_modules = []
if not SKIP_CUDA_BUILD:
    cc_flag = []
    if HIP_BUILD:
        cc_flag.append(f"--offload-arch={os.getenv('HIP_ARCHITECTURES', 'native')}")
    else:
        _, bare_metal_version = get_cuda_bare_metal_version(CUDA_HOME)
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_75,code=sm_75")
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_80,code=sm_80")
        if bare_metal_version >= Version("11.8"):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_90,code=sm_90")
        if bare_metal_version >= Version("12.8"):
            cc_flag += ["-gencode", "arch=compute_100,code=sm_100"]
            cc_flag += ["-gencode", "arch=compute_120,code=sm_120"]
        if bare_metal_version >= Version("13.0"):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_121,code=sm_121")
    ext_modules.append(
        CUDAExtension(
            name="kernel_cuda",
            sources=["csrc/kernel.cpp", "csrc/kernel_fwd.cu"],
            extra_compile_args={"cxx": ["-O3", "-march=native"], "nvcc": ["-O3"] + cc_flag},
        )
    )
setup(name="kernel-ops", ext_modules=ext_modules, cmdclass={"build_ext": BuildExtension})
"""


def _flags(text: str) -> dict[int, tuple[str, ...]]:
    return {f.line: f.targets for f in scan_setup_py(text)}


def test_the_gencode_pairs_are_found_with_their_line_and_condition() -> None:
    flags = scan_setup_py(KERNEL_SETUP)
    cuda = [f for f in flags if f.kind == "cuda"]
    assert [(f.line, f.targets) for f in cuda] == [
        (17, ("sm_75",)),
        (19, ("sm_80",)),
        (22, ("sm_90",)),
        (24, ("sm_100",)),
        (25, ("sm_120",)),
        (28, ("sm_121",)),
    ]
    assert cuda[0].text == "-gencode arch=compute_75,code=sm_75" and cuda[0].where == "setup.py:17"
    assert cuda[2].condition == (
        'not SKIP_CUDA_BUILD and not (HIP_BUILD) and bare_metal_version >= Version("11.8")'
    )
    (rocm,) = [f for f in flags if f.kind == "rocm"]
    assert rocm.targets == ("{os.getenv('HIP_ARCHITECTURES', 'native')}",) and rocm.line == 13
    # -march=native is the host compiler's, not an arch flag
    assert not any("march" in f.text for f in flags)


def test_what_each_cuda_version_builds() -> None:
    flags = tuple(scan_setup_py(KERNEL_SETUP))
    built = {cuda: built_for(flags, cuda) for cuda in ("11.8", "12.6", "12.8", "13.0")}
    assert {c: b.arch_list() for c, b in built.items() if b} == {
        "11.8": "7.5;8.0;9.0",
        "12.6": "7.5;8.0;9.0",
        "12.8": "7.5;8.0;9.0;10.0;12.0",
        "13.0": "7.5;8.0;9.0;10.0;12.0;12.1",
    }
    assert not any(b.assumed for b in built.values() if b)  # every condition evaluated
    assert built_for(flags, "11.7") is not None
    assert built_for(flags, "11.7").arch_list() == "7.5;8.0"  # type: ignore[union-attr]


def test_forms_of_nvcc_flags_and_ptx() -> None:
    text = """\
flags = [
    "-gencode=arch=compute_80,code=[sm_80,compute_80]",
    "--generate-code=arch=compute_90a,code=sm_90a",
    '-gencode=arch=compute_86,code=\\\\"sm_86,compute_86\\\\"',
    "-gencode arch=compute_70,code=compute_70",
    "-arch=sm_89",
    "--gpu-architecture=compute_75",
    "-arch", "sm_72",
]
"""
    assert _flags(text) == {
        2: ("sm_80", "compute_80"),
        3: ("sm_90a",),
        4: ("sm_86", "compute_86"),
        5: ("compute_70",),
        6: ("sm_89", "compute_89"),  # -arch=sm_XX alone: device code and PTX (nvcc --dryrun)
        7: ("compute_75",),
        8: ("sm_72", "compute_72"),
    }
    built = built_for(tuple(scan_setup_py(text)), "13.0")
    assert built is not None
    # +PTX only where PTX is emitted with device code; PTX alone cannot be an arch list entry
    assert built.arch_list() == "7.2+PTX;8.0+PTX;8.6+PTX;8.9+PTX;9.0a"
    assert built.ptx_only() == ("7.0", "7.5")
    assert "PTX only for 7.0, 7.5" in built.describe()


def test_native_and_all_are_not_a_list() -> None:
    built = built_for(tuple(scan_setup_py('nvcc = ["-O3", "-arch=native"]\n')), "13.0")
    assert built is not None and built.arch_list() is None and built.special == ("native",)
    assert "decided when it builds" in built.describe()
    built = built_for(tuple(scan_setup_py("x = ['-arch=all-major']\n")), "13.0")
    assert built is not None and built.special == ("all-major",)


def test_conditions_init_cannot_evaluate_are_assumed_and_said() -> None:
    text = """\
def archs():
    return os.getenv("OPS_ARCHS", "80;90").split(";")
cc = []
if "80" in archs():
    cc += ["-gencode", "arch=compute_80,code=sm_80"]
if CUDA_HOME is not None:
    if bare_metal_version >= Version("12.8") and "90" in archs():
        cc += ["-gencode", "arch=compute_90,code=sm_90"]
    elif (12, 4) <= torch.version.cuda:
        cc += ["-gencode", "arch=compute_86,code=sm_86"]
"""
    flags = tuple(scan_setup_py(text))
    new = built_for(flags, "13.0")
    assert new is not None and new.arch_list() == "8.0;9.0"
    assert new.assumed == ('"80" in archs()', '"90" in archs()')
    old = built_for(flags, "12.6")  # the elif: not (>= 12.8 and …) is unknown, (12, 4) <= 12.6
    assert old is not None and old.arch_list() == "8.0;8.6"


def test_torch_cuda_arch_list_set_by_setup_py() -> None:
    text = """\
import os
os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;9.0+PTX"
os.environ.setdefault("PYTORCH_ROCM_ARCH", "gfx942")
"""
    flags = tuple(scan_setup_py(text))
    assert [(f.form, f.targets, f.overrides) for f in flags] == [
        ("TORCH_CUDA_ARCH_LIST", ("8.0", "9.0+PTX"), True),
        ("PYTORCH_ROCM_ARCH", ("gfx942",), False),
    ]
    built = built_for(flags, "13.0")
    assert built is not None and built.arch_list() == "8.0;9.0+PTX"
    # nvcc flags win over the variable: cpp_extension ignores it when they are there
    both = tuple(scan_setup_py(text + 'f = ["-gencode", "arch=compute_75,code=sm_75"]\n'))
    assert built_for(both, "13.0").arch_list() == "7.5"  # type: ignore[union-attr]
    # setdefault keeps the cell's value: it decides nothing
    only_default = tuple(scan_setup_py('os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0")\n'))
    assert built_for(only_default, "13.0") is None


def test_flags_computed_from_torch_cuda_arch_list_follow_the_cell() -> None:
    """xformers' shape: setup.py reads TORCH_CUDA_ARCH_LIST and builds its -gencode flags
    from it, so the cell's list is what it compiles (as far as setup.py keeps it)."""
    text = """\
archs = os.environ.get("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
flags = []
for arch in archs.split(";"):
    num = arch.replace(".", "")
    flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
"""
    flags = tuple(scan_setup_py(text))
    assert [(f.line, f.targets, f.follows_list) for f in flags] == [(5, ("{num}",), True)]
    assert built_for(flags, "13.0") is None
    lines = describe_flags(flags, ("13.0",))
    assert lines[-1].startswith("  CUDA 13.0: computed when it builds (setup.py:5) from ")
    # without the variable read, a computed value is not a list init can write
    alone = tuple(scan_setup_py(text.replace("TORCH_CUDA_ARCH_LIST", "OPS_ARCHS")))
    built = built_for(alone, "13.0")
    assert built is not None and built.arch_list() is None and built.special == ("{num}",)


CMAKE = """\
cmake_minimum_required(VERSION 3.26)
project(ops LANGUAGES CXX CUDA)
# set(CMAKE_CUDA_ARCHITECTURES 50)  a comment is not a setting
if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
  set(CMAKE_CUDA_ARCHITECTURES "80-real;90a-real;100-real;120")
else()
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
if(BUILD_EXTRA AND CUDAToolkit_VERSION VERSION_LESS "13.0")
  set_target_properties(ops PROPERTIES CUDA_ARCHITECTURES "86-virtual" POSITION_INDEPENDENT_CODE ON)
endif()
set(CMAKE_HIP_ARCHITECTURES gfx90a gfx942)
"""


def test_cmake_architectures_with_their_branches() -> None:
    flags = tuple(scan_cmake(CMAKE, "CMakeLists.txt", in_build=True))
    assert [(f.line, f.form, f.targets) for f in flags] == [
        (5, "CMAKE_CUDA_ARCHITECTURES", ("sm_80", "sm_90a", "sm_100", "sm_120", "compute_120")),
        (7, "CMAKE_CUDA_ARCHITECTURES", ("sm_80", "compute_80", "sm_90", "compute_90")),
        (10, "CUDA_ARCHITECTURES", ("compute_86",)),
        (12, "CMAKE_HIP_ARCHITECTURES", ("gfx90a", "gfx942")),
    ]
    assert flags[1].condition == "NOT (CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)"
    new = built_for(flags, "13.0")
    assert new is not None and new.arch_list() == "8.0;9.0a;10.0;12.0+PTX"
    old = built_for(flags, "12.6")
    assert old is not None and old.arch_list() == "8.0+PTX;9.0+PTX"
    assert old.ptx_only() == ("8.6",) and old.assumed == ("BUILD_EXTRA",)


def test_build_scripts_are_reported_not_counted() -> None:
    script = """\
#!/bin/sh
# nvcc -gencode arch=compute_50,code=sm_50   (a comment)
export TORCH_CUDA_ARCH_LIST="8.0;9.0"
cmake -B build -DCMAKE_CUDA_ARCHITECTURES=89 .
hipcc --offload-arch=gfx942 -c k.hip
"""
    flags = tuple(scan_script(script, "build.sh"))
    assert [(f.line, f.form, f.targets) for f in flags] == [
        (3, "TORCH_CUDA_ARCH_LIST", ("8.0", "9.0")),
        (4, "CMAKE_CUDA_ARCHITECTURES", ("sm_89", "compute_89")),
        (5, "--offload-arch", ("gfx942",)),
    ]
    assert not any(f.in_build for f in flags) and built_for(flags, "13.0") is None


def test_arch_version() -> None:
    assert [arch_version(n) for n in ("75", "90a", "100", "121", "100f")] == [
        "7.5",
        "9.0a",
        "10.0",
        "12.1",
        "10.0f",
    ]


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    root = tmp_path / "kernel"
    (root / "csrc").mkdir(parents=True)
    (root / "kernel_ops").mkdir()
    (root / "setup.py").write_text(KERNEL_SETUP)
    (root / "csrc" / "kernel.cpp").write_text("#include <torch/extension.h>\n")
    (root / "csrc" / "kernel_fwd.cu").write_text("__global__ void k() {}\n")
    (root / "kernel_ops" / "__init__.py").write_text("")
    return root


def test_init_writes_the_archs_really_built_and_the_matrix_plans(kernel: Path) -> None:
    out = io.StringIO()
    assert cli.main(["init", str(kernel), "--torch", "2.9.1", "--torch", "2.11.0"], out=out) == 0
    text = out.getvalue()
    assert "setup.py:17: -gencode arch=compute_75,code=sm_75  -> sm_75" in text
    assert "CUDA 12.6 build compiles: 7.5;8.0;9.0" in text
    assert "CUDA 13.0 build compiles: 7.5;8.0;9.0;10.0;12.0;12.1" in text
    matrix = (kernel / "matrix.yaml").read_text()
    assert (
        '  cu126:\n    arch_list: "7.5;8.0;9.0"   # setup.py:17,19,22, under CUDA 12.6\n' in matrix
    )
    assert (
        '  cu130:\n    arch_list: "7.5;8.0;9.0;10.0;12.0;12.1"   # setup.py:17,19,22,24,25,28'
        in matrix
    )
    assert "    # arch_flags: enforce" in matrix
    plan = io.StringIO()
    argv = ["plan", "--matrix", str(kernel / "matrix.yaml"), "--profile", "release"]
    assert cli.main([*argv, "--format", "json"], out=plan) == 0
    assert '"7.5;8.0;9.0;10.0;12.0;12.1"' in plan.getvalue()
    assert '"7.5;8.0;9.0"' in plan.getvalue()
    # the offered line, taken up, is a valid matrix too
    enforced = kernel / "enforced.yaml"
    enforced.write_text(matrix.replace("    # arch_flags: enforce", "    arch_flags: enforce"))
    assert matrix.count("    # arch_flags: enforce") == 2
    assert cli.main(["plan", "--matrix", str(enforced), "--profile", "release"]) == 0


def test_an_arch_the_torch_rejects_is_not_written_and_the_matrix_still_plans(
    kernel: Path,
) -> None:
    setup = kernel / "setup.py"
    setup.write_text(
        setup.read_text().replace("compute_121,code=sm_121", "compute_101,code=sm_101")
    )
    out = io.StringIO()
    assert cli.main(["init", str(kernel), "--torch", "2.11.0"], out=out) == 0
    assert "cu130: arch_list not written: torch 2.11.0 does not accept 10.1" in out.getvalue()
    matrix = (kernel / "matrix.yaml").read_text()
    assert "  # cu130: arch_list left at the default" in matrix and "  cu126:\n" in matrix
    assert cli.main(["plan", "--matrix", str(kernel / "matrix.yaml"), "--profile", "release"]) == 0


def test_cmake_flags_count_for_a_cmake_build_only(tmp_path: Path) -> None:
    root = tmp_path / "cm"
    (root / "third_party" / "lib").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n'
        '[tool.scikit-build.cmake.define]\nCMAKE_CUDA_ARCHITECTURES = "89-real"\n'
    )
    (root / "CMakeLists.txt").write_text(CMAKE)
    (root / "third_party" / "lib" / "CMakeLists.txt").write_text(
        "set(CMAKE_CUDA_ARCHITECTURES 35)\n"
    )
    (root / "k.cu").write_text("")
    found = inspect_project(root)
    assert {f.file for f in found.arch_flags} == {"pyproject.toml", "CMakeLists.txt"}
    assert all(f.in_build for f in found.arch_flags)
    assert found.arch_flags[0].where == "pyproject.toml:5"
    (root / "CMakeLists.txt").rename(root / "ops.cmake")
    (root / "pyproject.toml").write_text("[project]\nname = 'cm'\n")
    (root / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    found = inspect_project(root)
    assert found.arch_flags and not any(f.in_build for f in found.arch_flags)
    # a root CMakeLists.txt beside a plain setuptools build (torch-scatter's shape) is not it
    (root / "ops.cmake").rename(root / "CMakeLists.txt")
    assert not any(f.in_build for f in inspect_project(root).arch_flags)
    # a setup.py that runs cmake builds with them
    (root / "setup.py").write_text(
        "import subprocess\nsubprocess.check_call(['cmake', '-S', '.', '-B', 'build'])\n"
    )
    found = inspect_project(root)
    assert {f.file for f in found.arch_flags if f.in_build} == {"CMakeLists.txt"}
