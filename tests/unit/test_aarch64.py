"""linux_aarch64 (Grace Hopper / Grace Blackwell): runners, emulation, the foreign torch, smoke."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fixtures.fakes import Call, FakeRunner

from buildtools.context import RunContext
from buildtools.errors import ConfigError, ToolchainError, ToolMissingError
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import MatrixFile, parse_matrix
from buildtools.matrix.yamlsource import SourceMap
from buildtools.model import BuildJob
from buildtools.planner import plan
from buildtools.probe.emulation import emulation_for, setup_commands
from buildtools.process import CommandResult
from buildtools.smoke.smoke_report import SmokeResult, SmokeStatus
from buildtools.smoke.wheelsources import SmokeTarget, WheelSource, plan_targets
from buildtools.toolchain.foreign import _pip_platforms, is_foreign, prepare_foreign_toolchain

from .test_dockerbackend import backend
from .test_smoke import _record, _wheel

KB = load_knowledge()


def matrix(runners: dict[str, Any] | None = None) -> MatrixFile:
    data: dict[str, Any] = {
        "project": {"path": "."},
        "axes": {
            "torch": ["2.11.0"],
            "accelerator": ["cpu", "cu130"],
            "python": ["3.12"],
            "platform": ["linux_x86_64", "linux_aarch64"],
        },
    }
    if runners is not None:
        data["runners"] = runners
    return parse_matrix(data, SourceMap(path=Path("matrix.yaml"), lines={(): 1}), knowledge=KB)


def jobs(runners: dict[str, Any] | None = None) -> dict[str, BuildJob]:
    return {j.id: j for j in plan(matrix(runners), KB, host_python="3.12").jobs}


# --------------------------------------------------------------------------- plan


def test_aarch64_jobs_build_on_native_arm_runners_by_default() -> None:
    planned = jobs()
    assert planned["torch2.11.0-cpu-cp312-aarch64"].runner == "ubuntu-24.04-arm"
    assert planned["torch2.11.0-cu130-cp312-aarch64"].runner == "ubuntu-24.04-arm"
    assert planned["torch2.11.0-cpu-cp312"].runner == "ubuntu-24.04"
    # no smoke runner named: built, never published
    assert all(j.smoke_runner is None for j in planned.values())


def test_aarch64_job_promises_torchs_aarch64_tag_and_toolkit() -> None:
    job = jobs()["torch2.11.0-cu130-cp312-aarch64"]
    assert job.platform == "linux_aarch64"
    assert job.platform_tag == "manylinux_2_28_aarch64"
    assert job.image == "pytorch/manylinuxaarch64-builder:cuda13.0"
    assert job.toolkit is not None
    # NVIDIA's toolkit wheels pinned to torch's CUDA: pip resolves their sbsa (aarch64) builds
    assert job.toolkit.pip_packages == ("cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]==13.0.2",)
    archs = job.toolkit.arch_list.split(";")
    assert "9.0" in archs and any(a.startswith("10.0") for a in archs)  # GH200, GB200
    assert archs[-1].endswith("+PTX")


def test_arm_runners_per_family_smoke_and_emulation() -> None:
    planned = jobs(
        {
            "build": {"cpu": "ubuntu-22.04", "cuda": ["self-hosted", "linux", "x64", "big"]},
            "smoke": {"cpu": "ubuntu-22.04"},
            "linux_aarch64": {
                "build": {"cuda": ["self-hosted", "linux", "arm64", "builder"]},
                "smoke": {"cpu": "ubuntu-24.04-arm", "cuda": ["self-hosted", "linux", "gh200"]},
                "emulate": ["cpu"],
            },
        }
    )
    cpu_arm = planned["torch2.11.0-cpu-cp312-aarch64"]
    cuda_arm = planned["torch2.11.0-cu130-cp312-aarch64"]
    # an emulated family builds on its x86 runner
    assert cpu_arm.runner == "ubuntu-22.04"
    assert cpu_arm.smoke_runner == "ubuntu-24.04-arm"
    assert cuda_arm.runner == ("self-hosted", "linux", "arm64", "builder")
    assert cuda_arm.smoke_runner == ("self-hosted", "linux", "gh200")
    assert planned["torch2.11.0-cu130-cp312"].smoke_runner is None
    runners = matrix({"linux_aarch64": {"emulate": ["cpu"]}}).matrix.runners
    assert runners.emulated("cpu", "linux_aarch64")
    assert not runners.emulated("cpu", "linux_x86_64")
    assert not runners.emulated("cuda", "linux_aarch64")


@pytest.mark.parametrize(
    ("runners", "problem"),
    [
        ({"linux_aarch64": {"emulate": ["cpu", "cpu"]}}, "cpu listed twice"),
        ({"linux_aarch64": {"emulate": ["tpu"]}}, "tpu"),
        ({"linux_aarch64": {"build": {"cpu": "bad label"}}}, "is not a runner label"),
        ({"linux_aarch64": {"smok": {}}}, "smok"),
    ],
)
def test_arm_runner_mistakes(runners: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        matrix(runners)


# --------------------------------------------------------------------------- emulation


def binfmt(tmp_path: Path, handler: str | None = None) -> Path:
    root = tmp_path / "binfmt_misc"
    root.mkdir()
    (root / "register").write_text("")
    if handler is not None:
        (root / "qemu-aarch64").write_text(handler)
    return root


QEMU_OK = (
    "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\noffset 0\n"
    "magic 7f454c460201010000000000000000000200b700\n"
)


def test_emulation_detected_from_the_binfmt_handler(tmp_path: Path) -> None:
    found = emulation_for("aarch64", host_machine="x86_64", binfmt_dir=binfmt(tmp_path, QEMU_OK))
    assert found.ok and not found.native and found.reason == "qemu-aarch64 (flags: PF)"
    native = emulation_for("aarch64", host_machine="aarch64", binfmt_dir=tmp_path / "none")
    assert native.ok and native.native


@pytest.mark.parametrize(
    ("handler", "mounted", "reason"),
    [
        (None, False, "binfmt_misc is not mounted at"),
        (None, True, "no binfmt handler for aarch64"),
        ("disabled\nflags: PF\n", True, "is registered but disabled"),
        ("enabled\nflags: P\n", True, "lacks the F flag (flags: P)"),
    ],
)
def test_emulation_missing_says_how_to_register_it(
    tmp_path: Path, handler: str | None, mounted: bool, reason: str
) -> None:
    root = binfmt(tmp_path, handler) if mounted else tmp_path / "unmounted"
    found = emulation_for("aarch64", host_machine="x86_64", binfmt_dir=root)
    assert not found.ok and reason in found.reason
    assert "apt-get install -y qemu-user-static binfmt-support" in found.remedy
    assert "update-binfmts --enable qemu-aarch64" in found.remedy
    assert "--setup-emulation" in found.remedy


def test_setup_commands_mount_binfmt_only_where_missing(tmp_path: Path) -> None:
    unmounted = setup_commands("aarch64", binfmt_dir=tmp_path / "x")
    assert unmounted[0][:2] == ["apt-get", "install"] and "qemu-user-static" in unmounted[0]
    assert unmounted[1] == ["mount", "-t", "binfmt_misc", "binfmt_misc", str(tmp_path / "x")]
    assert unmounted[-1] == ["update-binfmts", "--enable", "qemu-aarch64"]
    assert len(setup_commands("aarch64", binfmt_dir=binfmt(tmp_path))) == 2


class WorldRunner(FakeRunner):
    """A FakeRunner whose answers come from a function of the argv (None: the default)."""

    def __init__(self, respond: Callable[[tuple[str, ...]], CommandResult | None]) -> None:
        super().__init__()
        self._world = respond

    def respond(self, call: Call) -> CommandResult:
        return self._world(call.argv) or super().respond(call)


def test_docker_backend_refuses_an_aarch64_job_without_qemu(tmp_path: Path) -> None:
    job = jobs()["torch2.11.0-cpu-cp312-aarch64"]
    b = backend(tmp_path, host_machine="x86_64", binfmt_dir=tmp_path / "unmounted")
    runner = FakeRunner()
    with pytest.raises(ToolMissingError, match=r"under QEMU user emulation, which is not set up"):
        b.ensure_image(job, runner=runner, log=io.StringIO())
    assert runner.calls == []  # nothing ran: no image built for a machine that cannot run it


def test_docker_backend_sets_up_qemu_when_allowed(tmp_path: Path) -> None:
    job = jobs()["torch2.11.0-cpu-cp312-aarch64"]
    root = binfmt(tmp_path)

    def respond(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[0] == "update-binfmts":
            (root / "qemu-aarch64").write_text(QEMU_OK)
        if argv[:3] == ("docker", "image", "inspect"):
            return CommandResult(argv=argv, returncode=1)
        return None

    runner = WorldRunner(respond)
    b = backend(tmp_path, host_machine="x86_64", binfmt_dir=root, setup_emulation=True)
    log = io.StringIO()
    b.ensure_image(job, runner=runner, log=log)
    argvs = [c.argv for c in runner.calls]
    assert argvs[0][:2] == ("apt-get", "install")
    assert argvs[1] == ("update-binfmts", "--enable", "qemu-aarch64")
    (build,) = [a for a in argvs if a[:2] == ("docker", "build")]
    assert "--platform=linux/arm64" in build  # FROM the arm64 base, emulated
    assert "--setup-emulation: qemu-aarch64 (flags: PF) registered" in log.getvalue()


def test_x86_image_build_is_unchanged_by_emulation(tmp_path: Path) -> None:
    job = jobs()["torch2.11.0-cpu-cp312"]
    runner = WorldRunner(
        lambda a: CommandResult(argv=a, returncode=1) if a[1:3] == ("image", "inspect") else None
    )
    backend(tmp_path, host_machine="x86_64", binfmt_dir=tmp_path / "none").ensure_image(
        job, runner=runner, log=io.StringIO()
    )
    (build,) = [c.argv for c in runner.calls if c.argv[:2] == ("docker", "build")]
    assert not any(a.startswith("--platform") for a in build)


# --------------------------------------------------------------------------- foreign torch


def test_foreign_jobs_and_pip_platforms() -> None:
    job = jobs()["torch2.11.0-cpu-cp312-aarch64"]
    assert is_foreign(job, "x86_64") and not is_foreign(job, "aarch64")
    platforms = _pip_platforms("manylinux_2_28_aarch64")
    assert platforms[0] == "manylinux_2_28_aarch64" and "manylinux_2_17_aarch64" in platforms
    assert "manylinux2014_aarch64" in platforms


def test_foreign_torch_is_unpacked_not_imported(tmp_path: Path) -> None:
    job = jobs()["torch2.11.0-cpu-cp312-aarch64"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3.12"  # found on PATH; the fake runner never runs it
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    env = {"HOME": str(tmp_path), "PATH": str(bin_dir)}

    def respond(argv: tuple[str, ...]) -> CommandResult | None:
        if "--target" in argv:
            site = Path(argv[argv.index("--target") + 1])
            (site / "torch").mkdir(parents=True)
            (site / "torch" / "version.py").write_text(
                "__version__ = '2.11.0'\ncuda: str | None = None\n"
            )
        return None

    runner = WorldRunner(respond)
    kw: dict[str, Any] = {"cache_dir": tmp_path}

    def ctx() -> RunContext:
        return RunContext(processes=runner, env=env, log=io.StringIO())

    tc = prepare_foreign_toolchain(job, "3.12", ctx=ctx(), with_toolkit=False, **kw)
    again = prepare_foreign_toolchain(job, "3.12", ctx=ctx(), with_toolkit=False, **kw)
    with pytest.raises(ToolchainError, match="cannot build with this"):
        prepare_foreign_toolchain(job, "3.12", ctx=ctx(), **kw)
    (pip,) = [c.argv for c in runner.calls if "--target" in c.argv]
    assert pip[:4] == (str(python), "-m", "pip", "install")
    assert "--no-deps" in pip and pip[7:9] == ("--platform", "manylinux_2_28_aarch64")
    assert pip[-1] == "torch==2.11.0"
    assert tc.torch.version == "2.11.0" and tc.torch.cuda is None and not tc.torch.imported
    assert not tc.reused and again.reused


# --------------------------------------------------------------------------- smoke


def test_smoke_picks_the_wheels_of_the_runners_architecture(tmp_path: Path) -> None:
    arm = _wheel(
        tmp_path,
        "bt_scatter-0.1.0+pt211cpu-cp312-cp312-manylinux_2_28_aarch64.whl",
        {**_record("cpu", "2.11.0"), "cells": ["torch2.11.0-cpu-cp312-aarch64"]},
    )
    x86 = _wheel(
        tmp_path,
        "bt_scatter-0.1.0+pt211cpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        _record("cpu", "2.11.0+cpu"),
    )
    sources = [WheelSource(path=p, origin=str(p)) for p in (arm, x86)]
    on_x86 = plan_targets(sources, runner_accelerator="cpu", runner_machine="x86_64")
    assert isinstance(on_x86[0], SmokeResult) and on_x86[0].status is SmokeStatus.SKIPPED
    assert on_x86[0].diagnosis == (
        "built for aarch64; this runner is x86_64 (test it on a aarch64 runner: "
        "runners.linux_aarch64.smoke, or under emulation)"
    )
    assert on_x86[0].cell == "torch2.11.0-cpu-cp312-aarch64"
    assert isinstance(on_x86[1], SmokeTarget)
    on_arm = plan_targets(sources, runner_accelerator="cpu", runner_machine="aarch64")
    assert isinstance(on_arm[0], SmokeTarget) and on_arm[0].cell == "torch2.11.0-cpu-cp312-aarch64"
    assert isinstance(on_arm[1], SmokeResult) and "built for x86_64" in (on_arm[1].diagnosis or "")
