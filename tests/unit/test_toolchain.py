"""Toolchain creation, reuse and verification against a fake ProcessRunner (no process starts)."""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from fixtures.factories import make_job, replace_job
from fixtures.fakes import Call, FakeRunner
from fixtures.probe import imported_report, is_probe, probe_output, static_report

from buildtools.context import RunContext
from buildtools.errors import ToolchainError, ToolMissingError
from buildtools.model import BuildJob, Toolkit
from buildtools.probe.hostenv import parse_snapshot
from buildtools.process import CommandResult
from buildtools.toolchain.cuda import (
    cuda_toolkit_requirements,
    locate_cuda_wheels,
    parse_nvcc_version,
)
from buildtools.toolchain.envs import (
    BUILD_REQUIREMENTS,
    MARKER,
    build_requirements_for,
    toolchain_key,
)
from buildtools.toolchain.prepare import prepare_toolchain
from buildtools.toolchain.verify import check_torch
from buildtools.torchinstall import TorchInstall

NVCC_13 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
NVCC_12 = "Cuda compilation tools, release 12.8, V12.8.93\n"
TORCH_211_REQUIRES = [
    "filelock",
    "setuptools<82",
    "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]"
    '==13.0.2; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.19.0.56; platform_system == "Linux"',
    'optree>=0.13.0; extra == "optree"',
]
TORCH_28_REQUIRES = [
    'nvidia-cuda-nvrtc-cu12==12.8.93; platform_system == "Linux"',
    'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"',
    'nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux"',
]


def job211(accelerator: str = "cu130", **kw: Any) -> BuildJob:
    """This file's jobs: torch 2.11.0 (on PyPI, a CUDA 13.0 build) unless said otherwise."""
    return make_job(accelerator=accelerator, **{"torch": "2.11.0", **kw})


@dataclass
class FakeWorld(FakeRunner):
    """The fake ProcessRunner playing python/venv/pip/nvcc on a temporary file system."""

    tmp: Path
    torch_version: str = "2.11.0+cu130"
    cuda: str | None = "13.0"
    hip: str | None = None
    cxx11_abi: bool = True
    requires: list[str] = field(default_factory=lambda: list(TORCH_211_REQUIRES))
    nvcc_output: str = NVCC_13
    wheels_have_nvcc: bool = True
    nvvm: str | None = None
    pip_fails: bool = False
    index_reachable: bool = True
    dists: dict[str, str] = field(default_factory=dict)
    on_call: Callable[[list[str]], None] | None = None

    def respond(self, call: Call) -> CommandResult:
        args = list(call.argv)
        if self.on_call:
            self.on_call(args)
        out = ""
        rc = 0
        if args[1:3] == ["-m", "venv"]:
            root = Path(args[3])
            (root / "bin").mkdir(parents=True)
            (root / "bin" / "python").write_text("")
            (root / "pyvenv.cfg").write_text("")
        elif args[1:4] == ["-m", "pip", "install"]:
            rc = 1 if self.pip_fails else 0
            if any(a.startswith(("cuda-toolkit", "nvidia-cuda-nvcc")) for a in args):
                self._install_toolkit(Path(args[0]).parents[1])
        elif args[1] == "-c" and "urlopen" in args[2]:
            rc = 0 if self.index_reachable else 1
            out = (
                "" if self.index_reachable else "unreachable: [Errno -2] Name or service not known"
            )
        elif args[1:3] == ["-I", "-c"]:
            out = self._probe(Path(args[0]), imported="--import-torch" in args)
        elif args[0].endswith("/nvcc"):
            out = self.nvcc_output
        return CommandResult(argv=tuple(args), returncode=rc, output=out)

    def site(self, root: Path) -> Path:
        return root / "lib" / "python3.12" / "site-packages"

    def _install_toolkit(self, root: Path) -> None:
        cu = self.site(root) / "nvidia" / "cu13"
        (cu / "bin").mkdir(parents=True, exist_ok=True)
        (cu / "include").mkdir(exist_ok=True)
        (cu / "lib").mkdir(exist_ok=True)
        (cu / "lib" / "libcudart.so.13").write_text("")
        (cu / "lib" / "libcublas.so.13").write_text("")
        if self.wheels_have_nvcc:
            (cu / "bin" / "nvcc").write_text("")
        self.dists["nvidia-cuda-nvcc"] = f"{self.cuda}.88"
        self.dists["nvidia-nvvm"] = self.nvvm or f"{self.cuda}.88"

    def _probe(self, python: Path, *, imported: bool) -> str:
        site = self.site(python.parents[1])
        reports = [
            static_report(
                python,
                purelib=site,
                dists=self.dists,
                torch_version=self.torch_version,
                cuda=self.cuda,
                hip=self.hip,
                requires=self.requires,
            )
        ]
        if imported:
            reports.append(
                imported_report(
                    site / "torch",
                    version=self.torch_version,
                    cuda=self.cuda,
                    hip=self.hip,
                    cxx11_abi=self.cxx11_abi,
                )
            )
        return probe_output(*reports)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    py = tmp_path / "home" / ".pyenv" / "versions" / "3.12.1" / "bin" / "python3.12"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    return tmp_path / "home"


def prepare(world: FakeWorld, job: BuildJob, home: Path, **kw: Any) -> tuple[Any, str]:
    log = io.StringIO()
    env = {"HOME": str(home), "PATH": "/usr/bin", **kw.pop("env", {})}
    tc = prepare_toolchain(
        job,
        "3.12",
        cache_dir=home / "cache",
        ctx=RunContext(processes=world, env=env, log=log),
        **kw,
    )
    return tc, log.getvalue()


# ----------------------------------------------------------------------------- pure parts


def test_parse_nvcc_version() -> None:
    assert parse_nvcc_version(NVCC_13) == "13.0"
    assert parse_nvcc_version("garbage") is None


def test_cuda13_pins_follow_torch_cuda_toolkit() -> None:
    reqs = cuda_toolkit_requirements(TORCH_211_REQUIRES, cuda_version="13.0")
    assert reqs == ("cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]==13.0.2",)


def test_cuda12_pins_follow_torch_runtime() -> None:
    reqs = cuda_toolkit_requirements(TORCH_28_REQUIRES, cuda_version="12.8")
    assert reqs == (
        "nvidia-cuda-nvcc-cu12==12.8.*",
        "nvidia-cuda-runtime-cu12==12.8.90",
        "nvidia-cuda-cccl-cu12==12.8.*",
    )


def test_no_cuda_dependency_is_an_error() -> None:
    with pytest.raises(ToolchainError, match="CUDA_HOME"):
        cuda_toolkit_requirements(["filelock"], cuda_version="13.0")


def test_probe_parse_ignores_surrounding_noise() -> None:
    python = Path("/e/bin/python")
    text = probe_output(
        static_report(python, torch_version="2.13.0+cpu"),
        imported_report(Path("/e/lib/python3.12/site-packages/torch"), version="2.13.0+cpu"),
        noise="warning\n",
    )
    snap = parse_snapshot(text + "more noise\n")
    assert snap.torch is not None
    assert snap.torch.version == "2.13.0+cpu"
    assert snap.torch.cuda is None and snap.torch.imported and snap.torch.cxx11_abi
    assert snap.site_packages == Path("/e/lib/python3.12/site-packages")
    with pytest.raises(ValueError):
        parse_snapshot("no tag here")


def test_key_changes_with_every_input() -> None:
    job = job211()
    key, _ = toolchain_key(job, python_version="3.12.1", system_cuda=None)
    variants = [
        toolchain_key(job, python_version="3.12.2", system_cuda=None),
        toolchain_key(
            replace(job, torch_requirement="torch==2.11.1"),
            python_version="3.12.1",
            system_cuda=None,
        ),
        toolchain_key(
            replace(job, torch_index="https://x/whl/cu130"),
            python_version="3.12.1",
            system_cuda=None,
        ),
        toolchain_key(
            replace_job(job, accelerator="cu128"),
            python_version="3.12.1",
            system_cuda=None,
        ),
        toolchain_key(replace(job, toolkit=None), python_version="3.12.1", system_cuda=None),
        toolchain_key(job, python_version="3.12.1", system_cuda=None, with_toolkit=False),
    ]
    assert len({key, *(k for k, _ in variants)}) == len(variants) + 1
    # ... but not with things that do not change the env's content (the arch list).
    assert job.toolkit is not None
    same = replace(job, toolkit=replace(job.toolkit, arch_list="9.0"))
    assert toolchain_key(same, python_version="3.12.1", system_cuda=None)[0] == key


def probe_of(
    version: str, cuda: str | None = None, hip: str | None = None, abi: bool = True
) -> TorchInstall:
    return TorchInstall(
        version=version,
        package_dir=Path("/x/torch"),
        cuda=cuda,
        hip=hip,
        cxx11_abi=abi,
        python_version="3.12.1",
    )


def test_cpu_cell_with_cuda_torch_says_what_and_how() -> None:
    job = job211("cpu")
    with pytest.raises(ToolchainError) as err:
        check_torch(job, probe_of("2.11.0+cu130", cuda="13.0"), env_root=Path("/e"))
    msg = str(err.value)
    assert "torch 2.11.0+cu130 (CUDA 13.0)" in msg
    assert "'cpu' needs a CPU-only torch" in msg
    assert "https://download.pytorch.org/whl/cpu" in msg
    assert "torch2.11.0-cpu-cp312" in msg


def test_cuda_cell_with_other_cuda_torch() -> None:
    job = job211("cu130", torch_index="https://mirror/whl/cu128")
    with pytest.raises(ToolchainError) as err:
        check_torch(job, probe_of("2.11.0+cu128", cuda="12.8"), env_root=Path("/e"))
    msg = str(err.value)
    assert "torch 2.11.0+cu128 (CUDA 12.8)" in msg
    assert "the index https://mirror/whl/cu128" in msg
    assert "needs torch built for CUDA 13.0" in msg
    assert "https://download.pytorch.org/whl/cu130" in msg
    with pytest.raises(ToolchainError, match="CPU only"):
        check_torch(job211("cu130"), probe_of("2.11.0+cpu"), env_root=Path("/e"))


def test_rocm_and_version_and_abi_checks() -> None:
    check_torch(job211("rocm6.4"), probe_of("2.11.0+rocm6.4", hip="6.4.43482"), env_root=Path("/e"))
    with pytest.raises(ToolchainError, match=re.escape("ROCm 6.4")):
        check_torch(job211("rocm6.4"), probe_of("2.11.0+rocm6.3", hip="6.3.1"), env_root=Path("/e"))
    with pytest.raises(ToolchainError, match=re.escape("need torch==2.11.0")):
        check_torch(job211("cpu"), probe_of("2.12.0+cpu"), env_root=Path("/e"))
    with pytest.raises(ToolchainError, match="_GLIBCXX_USE_CXX11_ABI=0"):
        check_torch(job211("cpu"), probe_of("2.11.0+cpu", abi=False), env_root=Path("/e"))
    check_torch(job211("cpu"), probe_of("2.11.0+cpu"), env_root=Path("/e"))


def test_locate_cuda12_layout(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for part in ("cuda_nvcc/bin", "cuda_nvcc/include", "cuda_runtime/include", "cuda_runtime/lib"):
        (site / "nvidia" / part).mkdir(parents=True)
    assert locate_cuda_wheels(site, cuda_version="12.8") is None  # ptxas only, no nvcc
    (site / "nvidia" / "cuda_nvcc" / "bin" / "nvcc").write_text("")
    tk = locate_cuda_wheels(site, cuda_version="12.8")
    assert tk is not None
    assert tk.home == site / "nvidia" / "cuda_nvcc"
    assert tk.include_dirs == (
        site / "nvidia/cuda_nvcc/include",
        site / "nvidia/cuda_runtime/include",
    )
    assert tk.lib_dirs == (site / "nvidia/cuda_runtime/lib",)


# ------------------------------------------------------------------- prepare_toolchain


def test_cpu_env_created_then_reused(home: Path) -> None:
    world = FakeWorld(home, torch_version="2.13.0+cpu", cuda=None, requires=[])
    job = job211("cpu", torch="2.13.0")
    tc, log = prepare(world, job, home)
    assert not tc.reused
    assert tc.torch.version == "2.13.0+cpu"
    assert tc.cuda_home is None
    assert tc.python == tc.root / "bin" / "python"
    assert tc.root.parent == home / "cache" / "toolchains"
    assert tc.root.name.startswith("py3.12.1-torch2.13.0-cpu-")
    pip = [c for c in world.argvs if c[1:4] == ["-m", "pip", "install"]]
    assert pip == [
        [
            str(tc.python),
            "-m",
            "pip",
            "install",
            "torch==2.13.0",
            "setuptools",
            "wheel",
            "ninja",
            "build",
        ]
    ]
    assert dict(tc.build_env) == {"PATH": str(tc.root / "bin"), "VIRTUAL_ENV": str(tc.root)}
    marker = json.loads((tc.root / MARKER).read_text())
    assert marker["key"] == tc.key
    assert "creating" in log

    world.calls.clear()
    again, log = prepare(world, job, home)
    assert again.reused
    assert again.root == tc.root
    assert again.key == tc.key
    # Reuse runs the base interpreter probe and the env's probe, nothing else.
    assert [c[1:3] for c in world.argvs] == [["-I", "-c"], ["-I", "-c"]]
    assert "reusing" in log


def test_child_env_is_sanitised(home: Path) -> None:
    world = FakeWorld(home, torch_version="2.13.0+cpu", cuda=None, requires=[])
    prepare(
        world,
        job211("cpu", torch="2.13.0"),
        home,
        env={"PYTHONPATH": "/evil", "PIP_FIND_LINKS": "/w"},
    )
    for env in (c.env for c in world.calls):
        assert env is not None
        assert "PYTHONPATH" not in env
        assert env["PIP_FIND_LINKS"] == "/w"
        assert env["PIP_DISABLE_PIP_VERSION_CHECK"] == "1"


def test_torch_index_is_passed_to_pip(home: Path) -> None:
    world = FakeWorld(home, torch_version="2.11.0+cpu", cuda=None, requires=[])
    job = job211("cpu", torch_index="https://download.pytorch.org/whl/cpu")
    prepare(world, job, home)
    (pip,) = [c for c in world.argvs if c[1:4] == ["-m", "pip", "install"]]
    assert pip[4:6] == ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]


def test_unreachable_torch_index_is_skipped_with_a_note(home: Path) -> None:
    world = FakeWorld(
        home, torch_version="2.11.0+cpu", cuda=None, requires=[], index_reachable=False
    )
    job = job211("cpu", torch_index="https://download.pytorch.org/whl/cpu")
    _, log = prepare(world, job, home)
    (pip,) = [c for c in world.argvs if c[1:4] == ["-m", "pip", "install"]]
    assert "--extra-index-url" not in pip
    probes = [c for c in world.argvs if c[1] == "-c" and "urlopen" in c[2]]
    assert probes[0][3] == "https://download.pytorch.org/whl/cpu/torch/"
    assert "the torch index https://download.pytorch.org/whl/cpu is unreachable" in log


def test_half_created_env_is_rebuilt(home: Path) -> None:
    world = FakeWorld(home, torch_version="2.13.0+cpu", cuda=None, requires=[])
    job = job211("cpu", torch="2.13.0")
    tc, _ = prepare(world, job, home)
    (tc.root / MARKER).unlink()
    (tc.root / "leftover").write_text("partial download")
    tc2, log = prepare(world, job, home)
    assert not tc2.reused
    assert "no marker" in log
    assert not (tc2.root / "leftover").exists()


def test_mismatched_marker_is_rebuilt(home: Path) -> None:
    world = FakeWorld(home, torch_version="2.13.0+cpu", cuda=None, requires=[])
    job = job211("cpu", torch="2.13.0")
    tc, _ = prepare(world, job, home)
    marker = json.loads((tc.root / MARKER).read_text())
    marker["fields"]["torch_requirement"] = "torch==2.12.0"
    (tc.root / MARKER).write_text(json.dumps(marker))
    tc2, log = prepare(world, job, home)
    assert not tc2.reused
    assert "stale" in log


def test_changed_torch_in_env_is_rebuilt(home: Path) -> None:
    world = FakeWorld(home, torch_version="2.13.0+cpu", cuda=None, requires=[])
    job = job211("cpu", torch="2.13.0")
    prepare(world, job, home)
    world.torch_version = "2.13.1+cpu"  # someone pip-installed into the cached env
    with pytest.raises(ToolchainError, match=re.escape("need torch==2.13.0")):
        prepare(world, job, home)


def test_a_failed_environment_is_removed_not_left_under_the_cells_name(home: Path) -> None:
    world = FakeWorld(home)  # PyPI's torch: CUDA 13.0
    job = job211("cpu")
    with pytest.raises(ToolchainError, match="CPU-only") as err:
        prepare(world, job, home)
    assert "pip's configured indexes (no torch index is set for these cells)" in str(err.value)
    assert "set the torch index of these cells to https://download.pytorch.org/whl/cpu" in str(
        err.value
    )
    assert not list((home / "cache" / "toolchains").glob("py*"))


def test_an_index_that_did_not_answer_is_named_as_not_used(home: Path) -> None:
    world = FakeWorld(home)
    world.index_reachable = False
    job = job211("cpu", torch_index="https://download.pytorch.org/whl/cpu")
    with pytest.raises(ToolchainError) as err:
        prepare(world, job, home)
    msg = str(err.value)
    assert err.value.exit_code == 7
    assert (
        "from pip's configured indexes (the cells' torch index "
        "https://download.pytorch.org/whl/cpu did not answer, so it was not used)"
    ) in msg
    assert "did not answer from this machine: check the URL, the network" in msg
    assert "set the torch index" not in msg  # it is set: saying so again would contradict
    assert not list((home / "cache" / "toolchains").glob("py*"))


def test_pip_failure(home: Path) -> None:
    world = FakeWorld(home, pip_fails=True)
    with pytest.raises(ToolchainError, match=re.escape("pip could not install torch==2.11.0")):
        prepare(world, job211(), home)


def test_missing_python(home: Path) -> None:
    world = FakeWorld(home)
    with pytest.raises(ToolMissingError, match=re.escape("pyenv install 3.9")):
        prepare_toolchain(
            job211(python="3.9"),
            "3.9",
            cache_dir=home / "cache",
            ctx=RunContext(processes=world, env={"HOME": str(home), "PATH": ""}, log=io.StringIO()),
        )


def test_cuda_from_pypi_wheels(home: Path) -> None:
    world = FakeWorld(home)
    tc, log = prepare(world, job211(), home, env={"LIBRARY_PATH": "/opt/lib", "CPATH": "/opt/inc"})
    cu = world.site(tc.root) / "nvidia" / "cu13"
    assert tc.cuda_home == cu
    assert tc.torch.cuda == "13.0"
    pips = [c for c in world.argvs if c[1:4] == ["-m", "pip", "install"]]
    assert pips[1][4:] == ["torch==2.11.0", "cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]==13.0.2"]
    env = dict(tc.build_env)
    assert env["CUDA_HOME"] == str(cu)
    assert env["PATH"] == f"{cu / 'bin'}{os.pathsep}{tc.root / 'bin'}"
    link_dir = Path(env["LIBRARY_PATH"].split(os.pathsep)[0])
    assert env["LIBRARY_PATH"].endswith(f"{os.pathsep}/opt/lib")
    assert (link_dir / "libcudart.so").resolve() == (cu / "lib" / "libcudart.so.13").resolve()
    assert (link_dir / "libcublas.so").is_symlink()
    assert env["CPATH"] == f"{cu / 'include'}{os.pathsep}/opt/inc"
    assert "cuda-toolkit[nvcc" in log

    world.calls.clear()
    again, _ = prepare(world, job211(), home)
    assert again.reused
    assert again.cuda_home == cu
    assert dict(again.build_env)["CUDA_HOME"] == str(cu)


def test_explicit_toolkit_packages_win(home: Path) -> None:
    world = FakeWorld(home)
    job = job211(
        toolkit=Toolkit(
            kind="cuda",
            version="13.0",
            arch_list="9.0",
            pip_packages=("cuda-toolkit[nvcc]==13.0.2",),
        )
    )
    prepare(world, job, home)
    pips = [c for c in world.argvs if c[1:4] == ["-m", "pip", "install"]]
    assert pips[1][4:] == ["torch==2.11.0", "cuda-toolkit[nvcc]==13.0.2"]


def test_wheels_without_nvcc_say_so(home: Path) -> None:
    world = FakeWorld(
        home,
        torch_version="2.8.0+cu128",
        cuda="12.8",
        requires=TORCH_28_REQUIRES,
        wheels_have_nvcc=False,
    )
    with pytest.raises(ToolchainError) as err:
        prepare(world, job211("cu128", torch="2.8.0"), home)
    assert "contain no nvcc" in str(err.value)
    assert "CUDA_HOME" in str(err.value)


def test_compiler_wheels_of_another_minor_are_refused(home: Path) -> None:
    world = FakeWorld(home, nvvm="13.5.37")  # what an unpinned nvidia-nvvm resolves to
    with pytest.raises(ToolchainError, match=r"nvidia-nvvm==13\.5\.37"):
        prepare(world, job211(), home)


def test_nvcc_version_mismatch_in_wheels(home: Path) -> None:
    world = FakeWorld(home, nvcc_output=NVCC_12)
    with pytest.raises(ToolchainError, match=re.escape("reports CUDA 12.8")):
        prepare(world, job211(), home)


def system_cuda(tmp_path: Path) -> Path:
    cuda = tmp_path / "cuda-13.0"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("")
    return cuda


def test_matching_system_cuda_is_used(home: Path, tmp_path: Path) -> None:
    world = FakeWorld(home)
    cuda = system_cuda(tmp_path)
    tc, _ = prepare(world, job211(), home, env={"CUDA_HOME": str(cuda)})
    assert tc.cuda_home == cuda
    pips = [c for c in world.argvs if c[1:4] == ["-m", "pip", "install"]]
    assert len(pips) == 1  # no toolkit wheels
    env = dict(tc.build_env)
    assert env["CUDA_HOME"] == str(cuda)
    assert "LIBRARY_PATH" not in env
    # the option wins over the environment variable and gives the same env
    again, _ = prepare(world, job211(), home, cuda_home=cuda)
    assert again.reused


def test_mismatched_system_cuda_falls_back_to_wheels(home: Path, tmp_path: Path) -> None:
    world = FakeWorld(home, nvcc_output=NVCC_12)
    cuda = system_cuda(tmp_path)

    def wheels_nvcc_is_13(args: list[str]) -> None:
        world.nvcc_output = NVCC_13 if str(cuda) not in args[0] else NVCC_12

    world.on_call = wheels_nvcc_is_13
    tc, log = prepare(world, job211(), home, cuda_home=cuda)
    assert "ignoring CUDA_HOME" in log
    assert "nvcc is CUDA 12.8" in log
    assert tc.cuda_home == world.site(tc.root) / "nvidia" / "cu13"


def test_without_toolkit(home: Path) -> None:
    world = FakeWorld(home)
    tc, _ = prepare(world, job211(), home, with_toolkit=False)
    assert tc.cuda_home is None
    pips = [c for c in world.argvs if c[1:4] == ["-m", "pip", "install"]]
    assert pips == [[str(tc.python), "-m", "pip", "install", "torch==2.11.0"]]
    full, _ = prepare(world, job211(), home)
    assert full.root != tc.root


def test_rocm_needs_a_toolkit(home: Path) -> None:
    world = FakeWorld(home, torch_version="2.11.0+rocm6.4", cuda=None, hip="6.4.43482")
    job = job211("rocm6.4", toolkit=Toolkit(kind="rocm", version="6.4", arch_list="gfx942"))
    rocm = home / "rocm"
    tc, _ = prepare(world, job, home, env={"ROCM_HOME": str(rocm)})
    env = dict(tc.build_env)
    assert env["ROCM_HOME"] == str(rocm)
    assert env["PATH"].startswith(str(rocm / "bin"))
    if not Path("/opt/rocm/bin/hipcc").exists():
        with pytest.raises(ToolMissingError, match="ROCM_HOME"):
            prepare(world, replace(job, torch_requirement="torch==2.11.*"), home)


def test_torch_is_imported_once_per_identical_install(home: Path) -> None:
    world = FakeWorld(home, torch_version="2.13.0+cpu", cuda=None, requires=[], cxx11_abi=True)
    the_job = job211("cpu", torch="2.13.0")

    def torch_probes() -> list[bool]:
        """Each probe of a toolchain's torch: whether it imported torch."""
        probes = [
            "--import-torch" in c for c in world.argvs if is_probe(c) and "toolchains" in c[0]
        ]
        world.calls.clear()
        return probes

    created, _ = prepare(world, the_job, home)
    assert not created.reused
    assert torch_probes() == [False, True]  # a new install: read, then imported once
    reused, _ = prepare(world, the_job, home)
    assert reused.reused and reused.torch.cxx11_abi is True
    assert torch_probes() == [False]  # the ABI is the marker's
    # a second environment with the same torch (here: torch only, for checks) is not imported
    second, log = prepare(world, the_job, home, with_toolkit=False)
    assert not second.reused and second.root != created.root and second.torch.cxx11_abi is True
    assert torch_probes() == [False]
    assert "already imported here" in log


def test_a_window_check_environment_needs_the_release_not_the_build() -> None:
    """A CPU wheel's other ABI-window releases are checked against any build of the release
    (every build carries the CPU libraries it uses); a device wheel's need their own build,
    and the release itself is never relaxed."""
    cuda_build = probe_of("2.11.0+cu130", cuda="13.0")
    check_torch(job211("cpu"), cuda_build, env_root=Path("/e"), release_only=True)
    with pytest.raises(ToolchainError, match="CPU-only torch"):
        check_torch(job211("cpu"), cuda_build, env_root=Path("/e"))
    with pytest.raises(ToolchainError, match=re.escape("need torch==2.11.0")):
        check_torch(
            job211("cpu"),
            probe_of("2.12.0+cu130", cuda="13.0"),
            env_root=Path("/e"),
            release_only=True,
        )
    with pytest.raises(ToolchainError, match="CPU only"):
        check_torch(job211("cu130"), probe_of("2.11.0+cpu"), env_root=Path("/e"), release_only=True)


# torch 2.11.0's own Requires-Dist lines about the build requirements (its METADATA)
TORCH_211_BUILD_REQUIRES = (
    "filelock",
    'setuptools<82; python_version >= "3.12"',
    "sympy>=1.13.3",
    'triton==3.6.0; platform_system == "Linux"',
    "not a requirement (",
)


@pytest.mark.parametrize(
    ("python", "bound"),
    [("3.12.3", ("setuptools<82",)), ("3.11.7", ())],
)
def test_build_requirements_keep_the_running_torchs_bounds(
    python: str, bound: tuple[str, ...]
) -> None:
    # a torch: current venv gets its build tools from pip alone: without torch's bound the
    # newest setuptools came (84), and `python -m build --no-isolation` refused it
    torch = TorchInstall(
        version="2.11.0+cu130", package_dir=Path("/t/torch"), requires=TORCH_211_BUILD_REQUIRES
    )
    assert build_requirements_for(torch, python) == (*BUILD_REQUIREMENTS, *bound)
