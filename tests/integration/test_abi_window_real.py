"""The ABI window proven for real: a stable-ABI wheel (tests/fixtures/ext_stable, written
against torch/csrc/stable only, window torch >=2.10) built once here with torch 2.13.0+cpu
for its 2.10 floor, then smoke-tested by one command on every torch release it claims
(2.10.0 … 2.15.0), each in a fresh environment, each report entry naming the torch it ran on
and the operator's result checked by its smoke script. And the other side: a wheel whose
build pinned TORCH_TARGET_VERSION to 2.13 (tests/fixtures/ext_stable_newshim) fails on the
2.10.0 it claims, as the stable-ABI check predicted, and passes on 2.13.0.

Only 2.13.0 has a CPU build here; PyPI serves the other releases as CUDA builds, which carry
the same CPU libraries, so they prove the CPU wheel's window releases (the report says which
build ran): opt-in, it fills uv's cache with ~24 GB (five CUDA torch releases).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from fixtures.cli import buildtools
from fixtures.envs import FIXTURES, cache_dir

pytestmark = [pytest.mark.integration, pytest.mark.abi_window]

PYPI = "https://pypi.org/simple"
WINDOW = ("2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")


def _built(tmp_path: Path, fixture: str) -> tuple[Path, Path]:
    project = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, project, ignore=shutil.ignore_patterns("build"))
    wheelhouse = tmp_path / "wheelhouse"
    buildtools("build", "--wheelhouse", str(wheelhouse), "--no-live", cwd=project)
    (wheel,) = [*wheelhouse.glob(f"{fixture}-*.whl"), *wheelhouse.glob(f"rejected/{fixture}-*.whl")]
    return project, wheel


def _smoke(project: Path, wheel: Path, out: Path) -> tuple[int, dict[str, tuple[str, str]], str]:
    # a machine-wide pip constraint (this one caps torch at 2.14.1) would make the wheel's
    # install put a capped torch over the release under test: smoke reports that as failed
    # (the torch that ran is not the one under test), so the test lifts it
    env = {**os.environ, "BUILDTOOLS_CACHE_DIR": str(cache_dir()), "PIP_CONSTRAINT": os.devnull}
    run = buildtools(
        "smoke", str(wheel), "--torch-index", PYPI, "--out", str(out), cwd=project, env=env
    )
    results = json.loads((out / "report.json").read_text())["results"]
    logs = "".join(Path(r["log"]).read_text() for r in results)
    ran = {
        r["cell"].split("-")[0].removeprefix("torch"): (r["status"], r["torch"]) for r in results
    }
    return run.returncode, ran, logs


def test_one_stable_wheel_is_proven_on_every_release_of_its_window(tmp_path: Path) -> None:
    project, wheel = _built(tmp_path, "ext_stable")
    assert "-cp311-abi3-" in wheel.name and "rejected" not in str(wheel)
    code, ran, logs = _smoke(project, wheel, tmp_path / "smoke")
    assert code == 0, ran
    assert sorted(ran) == list(WINDOW)
    assert ran["2.13.0"] == ("passed", "2.13.0+cpu")  # the build's own torch, exactly
    for release in WINDOW:
        status, torch = ran[release]
        assert status == "passed" and torch.split("+")[0] == release, ran
        # the operator really ran there: the smoke script prints the torch it computed with
        assert f"ext_stable: OK on torch {torch}" in logs


def test_a_too_new_shim_fails_on_the_floor_as_the_check_said(tmp_path: Path) -> None:
    project, wheel = _built(tmp_path, "ext_stable_newshim")
    assert "rejected" in str(wheel)  # the check refused it (shim-too-new)
    code, ran, logs = _smoke(project, wheel, tmp_path / "smoke")
    assert code != 0
    assert ran["2.10.0"][0] == "import-error" and ran["2.13.0"] == ("passed", "2.13.0+cpu")
    assert "undefined symbol: torch_" in logs  # a shim of 2.11 or 2.13, as the check named
