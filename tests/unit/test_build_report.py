"""The run report lists each job's slowest compile units, with seconds (JSON and table)."""

from __future__ import annotations

import io

from buildtools.wheelbuild.build_report import CellResult, RunReport, Status

SLOWEST = [("csrc/binding.cpp", 117.833), ("csrc/shift.cpp", 11.264)]


def test_the_slowest_units_go_to_the_json_and_once_per_job_to_the_table() -> None:
    report = RunReport(matrix="matrix.yaml", profile=None, backend="local")
    for cell in ("torch2.13.0-cpu-cp311", "torch2.13.0-cpu-cp312"):  # one abi3 job, two cells
        report.cells.append(
            CellResult(
                cell=cell, job="torch2.13.0-cpu-abi3", status=Status.BUILT, slowest_units=SLOWEST
            )
        )
    report.cells.append(CellResult(cell="other", job="other", status=Status.BUILT))
    cells = report.to_json()["cells"]
    assert cells[0]["slowest_units"] == [
        {"unit": "csrc/binding.cpp", "seconds": 117.8},
        {"unit": "csrc/shift.cpp", "seconds": 11.3},
    ]
    assert "slowest_units" not in cells[2]  # nothing compiled, or nothing seen
    out = io.StringIO()
    report.print_table(out)
    lines = [ln for ln in out.getvalue().splitlines() if "slowest units" in ln]
    assert lines == [
        "  torch2.13.0-cpu-abi3: slowest units: csrc/binding.cpp 117.8 s, csrc/shift.cpp 11.3 s"
    ]
