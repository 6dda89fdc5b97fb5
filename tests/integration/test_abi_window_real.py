"""The ABI window proven for real: a stable-ABI wheel (tests/fixtures/ext_stable, written
against torch/csrc/stable only) built once against torch 2.13.0 and smoke-tested on each
torch release it claims, each in a fresh environment, its report naming the torch it ran on.

Torch 2.14.1's CPU build is only on download.pytorch.org; PyPI serves its CUDA build, which
carries the same CPU libraries, so it proves the CPU wheel's window release (and the report
says which build ran): opt-in, it downloads ~3 GB.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import buildtools
from fixtures.envs import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.abi_window]

PYPI = "https://pypi.org/simple"


def test_a_stable_wheel_is_proven_on_every_torch_it_claims(tmp_path: Path) -> None:
    project = tmp_path / "ext_stable"
    shutil.copytree(FIXTURES / "ext_stable", project)
    wheelhouse = tmp_path / "wheelhouse"
    built = buildtools("build", "--wheelhouse", str(wheelhouse), "--no-live", cwd=project)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = wheelhouse.glob("ext_stable-*.whl")
    assert "-cp311-abi3-" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [
            line for line in zf.read(meta).decode().splitlines() if line.startswith("Requires-Dist")
        ]
    assert requires == ["Requires-Dist: torch<2.15,>=2.13"]

    out = tmp_path / "smoke"
    smoked = buildtools("smoke", str(wheel), "--torch-index", PYPI, "--out", str(out), cwd=project)
    assert smoked.returncode == 0, smoked.stdout[-3000:] + smoked.stderr[-3000:]
    results = json.loads((out / "report.json").read_text())["results"]
    ran = {r["cell"]: (r["status"], r["torch"]) for r in results}
    assert ran["torch2.13.0-cpu-cp311"] == ("passed", "2.13.0+cpu")
    status, torch = ran["torch2.14.1-cpu-cp311"]
    assert status == "passed" and torch.split("+")[0] == "2.14.1", ran
    # the operator really ran on each: the smoke script prints the torch it computed with
    logs = "".join(Path(r["log"]).read_text() for r in results)
    assert "ext_stable: OK on torch 2.13.0+cpu" in logs
    assert f"ext_stable: OK on torch {torch}" in logs
