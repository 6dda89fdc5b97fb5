"""The archs a cell promises are the archs its wheel carries, on a real CUDA build.

tests/fixtures/cuda/ext_own_archs passes its own `-gencode` pairs (sm_75, sm_80, no PTX),
as causal-conv1d does; torch's cpp_extension then adds none from TORCH_CUDA_ARCH_LIST. A
cu130 cell promising '8.0;9.0+PTX' builds, and the device check rejects the wheel: sm_90
and the PTX are missing, sm_75 is there unpromised. `buildtools check` with the list the
project really builds passes it; with `arch_flags: enforce` the cell builds the promise.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fixtures.cli import REPO, buildtools

from buildtools.wheel.elf import inspect_elf

PROJECT = REPO / "tests" / "fixtures" / "cuda" / "ext_own_archs"
CELL = "torch2.11.0-cu130-cp312"
SO = "ext_own_archs.cpython-312-x86_64-linux-gnu.so"


def _build(tmp_path: Path, arch_flags: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The cu130 cp312 cell of ext_own_archs promising '8.0;9.0+PTX'; its wheelhouse."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {PROJECT}}}
        axes:
          torch: ["2.11.0"]
          accelerator: [cu130]
          python: ["3.12"]
        accelerators:
          cuda: {{torch_index: "https://download.pytorch.org/whl/{{accelerator}}"}}
          cu130:
            arch_list: "8.0;9.0+PTX"
            arch_flags: {arch_flags}
        """)
    )
    wheelhouse = tmp_path / "wh"
    proc = buildtools(
        "build", "--matrix", str(matrix), "--wheelhouse", str(wheelhouse), "--no-live"
    )
    return wheelhouse, proc


def _device_findings(wheelhouse: Path) -> dict[str, dict[str, Any]]:
    report = json.loads((wheelhouse / "report.json").read_text())
    (cell,) = [c for c in report["cells"] if c["cell"] == CELL]
    return {f["code"]: f for f in cell["findings"] if "device-code" in f["code"]}


@pytest.mark.cuda_toolchain
def test_a_project_with_its_own_arch_flags_is_caught_both_ways(tmp_path: Path) -> None:
    wheelhouse, proc = _build(tmp_path, "keep")
    assert proc.returncode == 9, proc.stdout + proc.stderr  # checks failed
    log = (wheelhouse / "logs" / f"{CELL}.log").read_text()
    assert "-gencode arch=compute_75,code=sm_75" in log
    assert "arch=compute_90" not in log  # torch added no arch flag of the cell's list
    device = _device_findings(wheelhouse)
    missing, extra = device["no-device-code"], device["extra-device-code"]
    assert missing["severity"] == "error"
    assert (
        f"{SO} lacks cubin sm_90, PTX compute_90 (it carries cubin sm_75 sm_80, no PTX)"
        in (missing["message"])
    )
    assert "accelerators.cu130.arch_flags: enforce" in missing["message"]
    assert extra["severity"] == "warning"
    [line] = extra["details"]
    assert line.startswith(f"{SO}: sm_75 ") and line.endswith(" bytes")
    assert int(line.split()[-2]) > 64  # a fatbin entry header and its cubin
    (rejected,) = (wheelhouse / "rejected").glob("ext_own_archs-0.1.0+pt211cu130-*.whl")
    # the truth about this project: its own two archs, which pass
    check = buildtools("check", str(rejected), "--arch-list", "7.5;8.0", "--json")
    findings = json.loads(check.stdout)[rejected.name]
    assert not [f for f in findings if "device-code" in f["code"]], findings


@pytest.mark.cuda_toolchain
def test_with_arch_flags_enforce_the_wheel_carries_the_promise(tmp_path: Path) -> None:
    """The compiler wrapper replaces the project's pairs with the cell's list: the check,
    the same as above, finds exactly what was promised."""
    wheelhouse, proc = _build(tmp_path, "enforce")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _device_findings(wheelhouse) == {}
    (wheel,) = wheelhouse.glob("ext_own_archs-0.1.0+pt211cu130-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (so,) = [n for n in zf.namelist() if n.endswith(".so")]
        zf.extract(so, tmp_path / "unpacked")
    cuda = inspect_elf(tmp_path / "unpacked" / so).cuda
    assert cuda is not None and cuda.archs == {"sm_80", "sm_90", "compute_90"}
