"""The ABI window proven, not assumed: a stable wheel claims the torches its smoke tests."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from fixtures.factories import make_toolchain
from fixtures.fakes import FakeRunner

from buildtools.context import RunContext
from buildtools.errors import ToolchainError
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import parse_matrix
from buildtools.matrix.yamlsource import SourceMap
from buildtools.model import BuildJob
from buildtools.planner import abi_window, build_candidates, cuda_split, plan
from buildtools.smoke.smokeenvs import torch_matches
from buildtools.smoke.wheelsources import SmokeTarget, WheelSource, plan_targets
from buildtools.toolchain.envs import Toolchain
from buildtools.torchinstall import TorchInstall
from buildtools.wheelbuild.options import BuildOptions
from buildtools.wheelbuild.window import build_toolchain

KB = load_knowledge()


def _plan(smoke: dict[str, object]) -> dict[str, object]:
    data = {
        "project": {"path": ".", "abi": "stable"},
        "axes": {
            "torch": ["2.13.0", "2.14.1"],
            "accelerator": ["cpu", "cu130"],
            "python": ["3.11"],
        },
        "runners": {"smoke": smoke},
    }
    mf = parse_matrix(data, SourceMap(path=Path("matrix.yaml"), lines={(): 1}), knowledge=KB)
    result = plan(mf, KB, host_python="3.11")
    return {job.accelerator.name: job for job in result.jobs}


def test_a_stable_wheel_requires_exactly_the_torches_its_job_claims() -> None:
    jobs = _plan({"cpu": "ubuntu-24.04", "cuda": ["self-hosted", "gpu"]})
    cpu = jobs["cpu"]
    assert cpu.torch_versions == ("2.13.0", "2.14.1")  # type: ignore[attr-defined]
    assert cpu.requires_dist == "torch>=2.13,<2.15"  # type: ignore[attr-defined]
    window = dict(abi_window(cpu))  # type: ignore[arg-type]
    assert window == {
        "2.13.0": "smoke on ubuntu-24.04, a fresh environment with torch 2.13.0",
        "2.14.1": "smoke on ubuntu-24.04, a fresh environment with torch 2.14.1",
    }
    gpu = dict(abi_window(jobs["cu130"]))  # type: ignore[arg-type]
    assert gpu["2.14.1"].startswith("smoke on self-hosted, gpu where it can install torch 2.14.1")
    unproven = dict(abi_window(_plan({"cpu": "ubuntu-24.04"})["cu130"]))  # type: ignore[arg-type]
    assert unproven["2.13.0"].startswith("not proven: no smoke runner")


def _stable_wheel(tmp_path: Path) -> Path:
    path = tmp_path / "bt_stable-0.1.0+pt213cpu-cp311-abi3-manylinux_2_28_x86_64.whl"
    record = {
        "schema": 1,
        "torch": "2.13.0+cpu",
        "accelerator": "cpu",
        "cxx11_abi": True,
        "python": "3.11.7",
        "abi": "stable",
        "torch_requirement": "torch>=2.13,<2.15",
        "cells": [
            "torch2.13.0-cpu-cp311",
            "torch2.13.0-cpu-cp312",
            "torch2.14.1-cpu-cp311",
            "torch2.14.1-cpu-cp312",
        ],
    }
    dist = "bt_stable-0.1.0+pt213cpu.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("bt_stable/__init__.py", "")
        zf.writestr(f"{dist}/METADATA", "Name: bt-stable\nVersion: 0.1.0+pt213cpu\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr(f"{dist}/buildtools.json", json.dumps(record))
        zf.writestr(f"{dist}/RECORD", "")
    return path


def test_a_cpu_runner_tests_a_stable_wheel_on_every_torch_it_claims(tmp_path: Path) -> None:
    src = WheelSource(path=_stable_wheel(tmp_path), origin="wheelhouse")
    targets = plan_targets([src], runner_accelerator="cpu", runner_python="3.11")
    assert all(isinstance(t, SmokeTarget) for t in targets)
    cells = [(t.cell, t.torch) for t in targets if isinstance(t, SmokeTarget)]
    assert cells == [
        ("torch2.13.0-cpu-cp311", "2.13.0+cpu"),
        ("torch2.14.1-cpu-cp311", "2.14.1+cpu"),
    ]
    # a GPU runner tests the torch it has (or the build's), once
    on_gpu = plan_targets(
        [src], runner_accelerator="cuda", runner_python="3.11", runner_torch="2.14.1+cu130"
    )
    assert len(on_gpu) == 1


def _torch(version: str, cuda: str | None = None) -> TorchInstall:
    return TorchInstall(version=version, package_dir=Path("/t/torch"), cuda=cuda)


def test_a_window_release_of_a_cpu_wheel_may_be_any_build_of_it(tmp_path: Path) -> None:
    """The wheel's own torch must be its build; another release it claims is proven on any
    build of that release (PyPI serves CUDA builds), never on another release."""
    src = WheelSource(path=_stable_wheel(tmp_path), origin="wheelhouse")
    own, other = (
        t
        for t in plan_targets([src], runner_accelerator="cpu", runner_python="3.11")
        if isinstance(t, SmokeTarget)
    )
    assert (own.window, other.window) == (False, True)
    assert torch_matches(own, _torch("2.13.0+cpu"))
    assert not torch_matches(own, _torch("2.13.0+cu130", cuda="13.0"))
    assert torch_matches(other, _torch("2.14.1+cpu"))
    assert torch_matches(other, _torch("2.14.1+cu130", cuda="13.0"))
    assert not torch_matches(other, _torch("2.14.0+cu130", cuda="13.0"))
    assert not torch_matches(other, None)


# --- built once: the newest release of the window whose build for the accelerator installs ---


def _window_job(accelerator: str, torches: list[str]) -> BuildJob:
    data = {
        "project": {"path": ".", "abi": "stable"},
        "axes": {"torch": torches, "accelerator": [accelerator], "python": ["3.11"]},
    }
    mf = parse_matrix(data, SourceMap(path=Path("matrix.yaml"), lines={(): 1}), knowledge=KB)
    (job,) = plan(mf, KB, host_python="3.11").jobs
    return job


def test_a_stable_window_targets_its_floor_and_may_build_with_any_release() -> None:
    job = _window_job("cpu", ["2.10.0", "2.13.0", "2.15.0"])
    assert job.env_dict["BUILDTOOLS_TORCH_TARGET_VERSION"] == "0x020a000000000000"
    assert job.requires_dist == "torch>=2.10,<2.16"
    assert build_candidates(job, KB) == (
        ("2.15.0", "torch==2.15.0+cpu"),
        ("2.13.0", "torch==2.13.0+cpu"),
        ("2.10.0", "torch==2.10.0+cpu"),
    )
    # a CUDA window: PyPI's default build where its CUDA is the accelerator's, else +cuXYZ
    cuda = build_candidates(_window_job("cu130", ["2.10.0", "2.13.0"]), KB)
    assert cuda == (("2.13.0", "torch==2.13.0"), ("2.10.0", "torch==2.10.0+cu130"))
    single = _window_job("cpu", ["2.13.0"])
    assert build_candidates(single, KB) == (("2.13.0", single.torch_requirement),)


def test_the_build_takes_the_first_candidate_that_installs(tmp_path: Path) -> None:
    job = _window_job("cpu", ["2.10.0", "2.13.0", "2.15.0"])
    tried: list[str] = []

    def prepare(built: BuildJob, python: str, **_: object) -> Toolchain:
        tried.append(built.torch_requirement)
        if built.torch != "2.13.0":
            raise ToolchainError(f"pip could not install {built.torch_requirement}\nmore")
        return make_toolchain(tmp_path / "env", torch_version="2.13.0+cpu")

    log = io.StringIO()
    opts = BuildOptions(
        project_dir=tmp_path, wheelhouse=tmp_path / "wh", cache_dir=tmp_path, env={}
    )
    ctx = RunContext(processes=FakeRunner(), env={}, log=log)
    built, toolchain = build_toolchain(job, KB, opts, with_toolkit=True, ctx=ctx, prepare=prepare)
    assert toolchain.torch.version == "2.13.0+cpu"
    assert tried == ["torch==2.15.0+cpu", "torch==2.13.0+cpu"]
    assert (built.torch, built.torch_requirement) == ("2.13.0", "torch==2.13.0+cpu")
    assert (built.id, built.requires_dist, built.env) == (job.id, job.requires_dist, job.env)
    assert "built once with torch==2.13.0+cpu" in log.getvalue()

    def never(built: BuildJob, python: str, **_: object) -> Toolchain:
        raise ToolchainError(f"pip could not install {built.torch_requirement}")

    with pytest.raises(ToolchainError, match=r"no release of its window has a cpu build") as err:
        build_toolchain(job, KB, opts, with_toolkit=True, ctx=ctx, prepare=never)
    assert "torch==2.10.0+cpu: pip could not install torch==2.10.0+cpu" in str(err.value)


# --- the CUDA-major split ------------------------------------------------------------------


def test_the_plan_splits_stable_cuda_wheels_per_major_and_says_why() -> None:
    data = {
        "project": {"path": ".", "abi": "stable"},
        "axes": {
            "torch": ["2.10.0", "2.11.0", "2.13.0"],
            "accelerator": ["cpu", "cu126", "cu128", "cu130"],
            "python": ["3.11"],
        },
    }
    mf = parse_matrix(data, SourceMap(path=Path("matrix.yaml"), lines={(): 1}), knowledge=KB)
    result = plan(mf, KB, host_python="3.11")
    lines = cuda_split(result.jobs, result.removed, KB)
    text = "\n".join(lines)
    cu12 = text.split("  CUDA 13, linux_x86_64:")[0]
    cu13 = text.split("  CUDA 13, linux_x86_64:")[1]
    assert "torch2.10.0-2.13.0-cu126-stable (cu126) serves torch 2.10.0, 2.11.0, 2.13.0" in cu12
    assert "torch2.10.0-2.11.0-cu128-stable (cu128) serves torch 2.10.0, 2.11.0" in cu12
    # a release of the window a wheel leaves out, with the knowledge base's reason
    assert "left out torch 2.13.0: torch 2.13.0 was not built for CUDA 12.8" in cu12
    # PyPI's default CUDA moved to 13 at 2.11: which major serves `pip install torch` users
    assert "from PyPI: 2.10.0 is a CUDA 12 build, served here" in cu12
    assert "from PyPI: 2.11.0, 2.13.0 are CUDA 13.0 builds: their users need another" in cu12
    assert "2 wheels of one CUDA major: cu126's serves the releases of the others too" in cu12
    assert "from PyPI: 2.11.0, 2.13.0 are CUDA 13 builds, served here" in cu13
    assert "2 wheels of one CUDA major" not in cu13
    cpu_only = _window_job("cpu", ["2.10.0", "2.13.0"])
    assert cuda_split([cpu_only], (), KB) == []


def test_release_day_smoke_targets_a_release_inside_the_range_only(tmp_path: Path) -> None:
    """`smoke --window-torch`: the published wheel on a release its record does not name.
    Inside its range (2.14.0 under <2.15): a target, any build of it; outside: skipped."""
    src = WheelSource(path=_stable_wheel(tmp_path), origin="wheelhouse")
    got = plan_targets(
        [src],
        runner_accelerator="cpu",
        runner_python="3.11",
        window_torches=("2.14.0", "2.14.1", "2.15.0"),
    )
    targets = [(t.cell, t.torch, t.window) for t in got if isinstance(t, SmokeTarget)]
    assert targets == [
        ("torch2.13.0-cpu-cp311", "2.13.0+cpu", False),
        ("torch2.14.1-cpu-cp311", "2.14.1+cpu", True),  # the record's (2.14.1 asked again: once)
        ("torch2.14.0-cpu-cp311", "2.14.0+cpu", True),
    ]
    (skipped,) = [t for t in got if not isinstance(t, SmokeTarget)]
    assert skipped.cell == "torch2.15.0-cpu-cp311"
    assert skipped.diagnosis == (
        "--window-torch 2.15.0: outside the wheel's range (torch>=2.13,<2.15): a release "
        "outside it needs a new build, not a smoke run"
    )
