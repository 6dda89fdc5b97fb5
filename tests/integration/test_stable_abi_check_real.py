"""The stable-ABI check on real builds: three fixtures compiled here with torch 2.13.0+cpu.

ext_stable (torch/csrc/stable only, a >=2.10 window built for the floor) passes;
ext_stable_c10 (c10's TORCH_CHECK) fails with one unstable-symbol naming
c10::detail::torchCheckFail; ext_stable_newshim (TORCH_TARGET_VERSION pinned to 2.13 in a
>=2.10 window) fails with shim-too-new naming each shim and the first release that has it.
The check reads data/stable_abi.json only: no other torch is installed.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import buildtools
from fixtures.envs import FIXTURES

from buildtools.errors import ExitCode

pytestmark = [pytest.mark.integration]


def _build(tmp_path: Path, fixture: str) -> tuple[int, list[dict[str, object]], Path]:
    project = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, project, ignore=shutil.ignore_patterns("build"))
    wheelhouse = tmp_path / "wheelhouse"
    run = buildtools("build", "--wheelhouse", str(wheelhouse), "--no-live", cwd=project)
    report = json.loads((wheelhouse / "report.json").read_text())
    findings = [
        f
        for result in report["cells"]
        for f in result.get("findings", [])
        if f["code"] in ("unstable-symbol", "shim-too-new")
    ]
    unique = {(f["code"], f["message"]): f for f in findings}  # one job, a result per cell
    return run.returncode, list(unique.values()), wheelhouse


def test_a_stable_window_builds_for_its_floor_and_passes(tmp_path: Path) -> None:
    code, findings, wheelhouse = _build(tmp_path, "ext_stable")
    assert code == 0 and findings == []
    (wheel,) = wheelhouse.glob("ext_stable-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        record = next(n for n in zf.namelist() if n.endswith(".dist-info/buildtools.json"))
        requires = [
            line for line in zf.read(meta).decode().splitlines() if line.startswith("Requires-Dist")
        ]
        built_with = json.loads(zf.read(record))["torch"]
    assert requires == ["Requires-Dist: torch<2.16,>=2.10"]
    assert built_with == "2.13.0+cpu"  # the one CPU build here serves the 2.10 floor
    log = (wheelhouse / "logs" / "torch2.10.0-2.15.0-cpu-stable.log").read_text()
    assert "TORCH_TARGET_VERSION=0x020a000000000000" in log
    assert "[window] torch2.10.0-2.15.0-cpu-stable: built once with torch==2.13.0+cpu" in log


def test_a_c10_call_is_one_unstable_symbol(tmp_path: Path) -> None:
    code, findings, wheelhouse = _build(tmp_path, "ext_stable_c10")
    assert code == ExitCode.CHECK_FAILED
    (f,) = findings
    assert f["code"] == "unstable-symbol"
    assert str(f["message"]).startswith(
        "ext_stable_c10/_C.abi3.so imports c10::detail::torchCheckFail(char const*, char const*, "
        "unsigned int, char const*): C++ API of c10::"
    )
    assert list(wheelhouse.glob("rejected/ext_stable_c10-*.whl"))


def test_a_shim_newer_than_the_floor_names_its_first_release(tmp_path: Path) -> None:
    code, findings, _ = _build(tmp_path, "ext_stable_newshim")
    assert code == ExitCode.CHECK_FAILED
    assert {f["code"] for f in findings} == {"shim-too-new"}
    first = {
        str(f["message"]).split(" imports ")[1].split(",")[0]: str(f["message"]).split(
            "first in torch "
        )[1][:6]
        for f in findings
    }
    # what the 2.13 inline API calls that 2.10 lacks, each with the release that added it
    assert first["torch_exception_get_what"] == "2.13.0"
    assert first["torch_dtype_float8_e8m0fnu"] == "2.11.0"
    assert all("allows torch 2.10.0" in str(f["message"]) for f in findings)
