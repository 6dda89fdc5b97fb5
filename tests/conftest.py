"""Test tiers: tests/unit must not start processes or touch the network (tripwire)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

UNIT_DIR = Path(__file__).parent / "unit"


class TripwireError(AssertionError):
    """A unit test tried to start a process or open a socket."""


def _tripwire(*args: object, **kwargs: object) -> None:
    raise TripwireError(
        "unit tests must not start processes or open sockets; inject a fake ProcessRunner "
        "or move the test to tests/integration"
    )


@pytest.fixture(autouse=True)
def _unit_tripwire(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if UNIT_DIR not in Path(str(request.fspath)).parents:
        return
    monkeypatch.setattr(subprocess.Popen, "__init__", _tripwire)
    monkeypatch.setattr(socket.socket, "connect", _tripwire)
    # commands that would ask the package index (torch ranges, init) resolve offline here,
    # whatever a cache on this machine holds; tests that want an answer pass a FakeHttp
    monkeypatch.setenv("BUILDTOOLS_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the real-world corpus is opt-in: `-m realworld` or BUILDTOOLS_TEST_REALWORLD=1
    realworld = "realworld" in (config.getoption("markexpr") or "") or (
        os.environ.get("BUILDTOOLS_TEST_REALWORLD") == "1"
    )
    skip = pytest.mark.skip(reason="real-world corpus: opt in with -m realworld (nox -s realworld)")
    # the workflows run by act (tests/integration/test_act.py, tens of minutes): opt-in too
    act = "act" in (config.getoption("markexpr") or "") or (
        os.environ.get("BUILDTOOLS_TEST_ACT") == "1"
    )
    skip_act = pytest.mark.skip(reason="workflows under act: opt in with -m act (nox -s ci-run)")
    for item in items:
        if item.get_closest_marker("act") is not None and not act:
            item.add_marker(skip_act)
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)
        if item.get_closest_marker("realworld") is not None and not realworld:
            item.add_marker(skip)


def _docker_running() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    proc = subprocess.run([docker, "info"], capture_output=True, check=False, timeout=30)
    return proc.returncode == 0


def _aarch64_runs() -> bool:
    from buildtools.probe.emulation import emulation_for

    return emulation_for("aarch64", host_machine=platform.machine()).ok


def _gpu_present() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/dev/kfd").exists()


# marker -> (is the capability here?, why a test with it is skipped otherwise)
CAPABILITIES: dict[str, tuple[Callable[[], bool], str]] = {
    "abi_window": (
        lambda: os.environ.get("BUILDTOOLS_TEST_WINDOW") == "1",
        "smoke-tests a stable-ABI wheel on every torch 2.10.0 … 2.15.0 (PyPI's CUDA builds, "
        "~24 GB in uv's cache; ~10 min once cached): run with BUILDTOOLS_TEST_WINDOW=1",
    ),
    "cuda_toolchain": (
        lambda: os.environ.get("BUILDTOOLS_TEST_CUDA") == "1",
        "builds a CUDA cell: downloads torch 2.11.0+cu130 and the CUDA 13.0 toolkit wheels "
        "(~2.7 GB) and compiles for 6 archs; run with BUILDTOOLS_TEST_CUDA=1",
    ),
    "docker": (_docker_running, "no running Docker engine (`docker info` failed)"),
    "emulation": (
        lambda: os.environ.get("BUILDTOOLS_TEST_EMULATION") == "1" and _aarch64_runs(),
        "builds and runs an aarch64 cell under QEMU (15-35 min on 2 cores, outside the default "
        "run's budget): run with BUILDTOOLS_TEST_EMULATION=1 where a QEMU binfmt handler for "
        "aarch64 is registered (as root: apt-get install -y qemu-user-static binfmt-support)",
    ),
    "gpu": (_gpu_present, "no GPU on this machine"),
    "live_index": (
        lambda: os.environ.get("BUILDTOOLS_TEST_INDEX") == "1",
        "asks the real package index (PyPI) about torch: run with BUILDTOOLS_TEST_INDEX=1",
    ),
}
_seen: dict[str, bool] = {}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip where the machine lacks a capability; fail where BUILDTOOLS_REQUIRE demands it."""
    required = {r.strip() for r in os.environ.get("BUILDTOOLS_REQUIRE", "").split(",") if r.strip()}
    for name, (available, reason) in CAPABILITIES.items():
        if item.get_closest_marker(name) is None:
            continue
        if name not in _seen:
            _seen[name] = available()
        if _seen[name]:
            continue
        if name in required:
            pytest.fail(f"BUILDTOOLS_REQUIRE={name}, but: {reason}")
        pytest.skip(reason)
