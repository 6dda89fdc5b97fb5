"""The archs a cell promises are the archs its wheel carries, on a real CUDA build.

tests/fixtures/cuda/ext_own_archs passes its own `-gencode` pairs (sm_75, sm_80, no PTX),
as causal-conv1d does; torch's cpp_extension then adds none from TORCH_CUDA_ARCH_LIST. A
cu130 cell promising '8.0;9.0+PTX' builds, and the device check rejects the wheel: sm_90
and the PTX are missing, sm_75 is there unpromised. `buildtools check` with the list the
project really builds passes it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from fixtures.cli import REPO, buildtools

PROJECT = REPO / "tests" / "fixtures" / "cuda" / "ext_own_archs"
CELL = "torch2.11.0-cu130-cp312"
SO = "ext_own_archs.cpython-312-x86_64-linux-gnu.so"


@pytest.mark.cuda_toolchain
def test_a_project_with_its_own_arch_flags_is_caught_both_ways(tmp_path: Path) -> None:
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
        """)
    )
    wheelhouse = tmp_path / "wh"
    proc = buildtools(
        "build", "--matrix", str(matrix), "--wheelhouse", str(wheelhouse), "--no-live"
    )
    assert proc.returncode == 9, proc.stdout + proc.stderr  # checks failed
    log = (wheelhouse / "logs" / f"{CELL}.log").read_text()
    assert "-gencode arch=compute_75,code=sm_75" in log
    assert "arch=compute_90" not in log  # torch added no arch flag of the cell's list
    report = json.loads((wheelhouse / "report.json").read_text())
    (cell,) = [c for c in report["cells"] if c["cell"] == CELL]
    device = {f["code"]: f for f in cell["findings"] if "device-code" in f["code"]}
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
