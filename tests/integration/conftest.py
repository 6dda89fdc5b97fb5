"""Fixtures the integration tests share: the expensive inputs, made once per session.

- `integration_log`: one log file for the commands the fixtures run (pytest's basetemp, logs/);
- `torch213`: the cached venv with torch 2.13.0 (CPU) for Python 3.11 (tests/fixtures/envs.py);
- `fixture_wheel(name)`: a tests/fixtures extension built against `torch213` (cached);
- `example_wheelhouse`: `buildtools build` of the repository's matrix.yaml (default profile:
  the example's CPU wheel for this Python), shared read-only: copy it before changing it.

Helpers that are not fixtures live beside the inputs they make: tests/fixtures/envs.py
(`fresh_venv`, `cache_dir`) and tests/fixtures/cli.py (`buildtools`, `REPO`, `HOST`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from fixtures.cli import buildtools
from fixtures.envs import TorchEnv, build_fixture_wheel, torch_env

from buildtools.process import SubprocessRunner


@pytest.fixture(scope="session")
def integration_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IO[str]]:
    with (tmp_path_factory.mktemp("logs") / "integration.log").open("w") as fh:
        yield fh


@pytest.fixture(scope="session")
def torch213(integration_log: IO[str]) -> TorchEnv:
    """torch 2.13.0 (CPU) in a venv of Python 3.11, created on first use and then reused."""
    return torch_env(
        SubprocessRunner(), torch_version="2.13.0", python="python3.11", log=integration_log
    )


@pytest.fixture(scope="session")
def fixture_wheel(torch213: TorchEnv, integration_log: IO[str]) -> Callable[[str], Path]:
    """`fixture_wheel("ext_ok")`: that fixture extension's wheel, built in `torch213`."""

    def build(name: str) -> Path:
        return build_fixture_wheel(name, torch213, SubprocessRunner(), log=integration_log)

    return build


@pytest.fixture(scope="session")
def example_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheelhouse of `buildtools build` with the repository's matrix.yaml and defaults."""
    wheelhouse = tmp_path_factory.mktemp("example-wheelhouse")
    proc = buildtools("build", "--wheelhouse", str(wheelhouse), "--no-live")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return wheelhouse
