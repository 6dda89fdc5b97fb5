"""A project's own [build-system] requirements, installed with their dependencies beside the
job's environment (never into it), and refused where they would replace the cell's torch.

Needs https://pypi.org (pip resolves the requirements there): skipped when it cannot be reached.
"""

from __future__ import annotations

import re
import secrets
import shutil
from pathlib import Path

import pytest
from fixtures.cli import HOST_CELL, REPO, buildtools
from fixtures.network import require_pypi


@pytest.fixture(scope="module", autouse=True)
def _pypi() -> None:
    require_pypi("pip resolves there")


def _example(tmp_path: Path, requires: str) -> Path:
    # a path of its own each run: the job's build tree (and the installed requirements' stamp
    # in it) is keyed by the project's path, in a cache directory runs share
    project = tmp_path / f"ext-{secrets.token_hex(4)}"
    shutil.copytree(
        REPO / "examples" / "scatter", project, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    assert 'requires = ["setuptools>=64", "wheel", "torch"]' in text
    pyproject.write_text(text.replace('"torch"]', f'"torch", {requires}]'))
    return project


def test_a_build_requirement_comes_with_its_own_dependencies(tmp_path: Path) -> None:
    # setuptools-scm 9+ imports vcs-versioning, a dependency of its own; setuptools loads every
    # installed plugin, so without it the build fails before it compiles anything
    project = _example(tmp_path, '"setuptools-scm>=9"')
    wheelhouse = tmp_path / "wh"
    proc = buildtools(
        "build", "--project", str(project), "--wheelhouse", str(wheelhouse), "--no-live"
    )
    log = (wheelhouse / "logs" / f"{HOST_CELL}.log").read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr + log
    # installed at pip's resolved versions, the dependency included
    installed = re.search(r"--no-deps --upgrade --target \S+ (.*)", log)
    assert installed, log
    names = {pin.split("==")[0].lower() for pin in installed[1].split()}
    assert {"setuptools-scm", "vcs-versioning"} <= names, installed[1]
    assert len(list(wheelhouse.glob("*.whl"))) == 1


def test_a_build_requirement_that_would_replace_torch_is_refused(tmp_path: Path) -> None:
    # torchvision 0.26.0 pins torch 2.11.0; the cell's torch is 2.13.0 (pip reads the wheels'
    # metadata only: nothing of torch 2.11 is downloaded)
    project = _example(tmp_path, '"torchvision==0.26.0"')
    wheelhouse = tmp_path / "wh"
    proc = buildtools(
        "build", "--project", str(project), "--wheelhouse", str(wheelhouse), "--no-live"
    )
    assert proc.returncode == 8, proc.stdout + proc.stderr
    assert "would replace the job's own torch" in proc.stdout + proc.stderr
    assert not list(wheelhouse.glob("*.whl"))
