"""What the build report and the progress lines print is text, never rich markup: a failure
reason, a path or a finding's code in brackets is printed as it is (a "[/x]" in a project's
error once ended the build with rich's MarkupError; "[platform-tag]" vanished)."""

from __future__ import annotations

import io

from buildtools.model import Finding, Severity
from buildtools.wheelbuild.build_report import CellResult, RunReport, Status
from buildtools.wheelbuild.progress import Progress

HOSTILE = "setup.py said: [/x] [bold]no[/bold] [build-system]"


def test_the_build_report_prints_reasons_codes_and_notes_as_they_are() -> None:
    report = RunReport(matrix="matrix.yaml", profile=None, backend="local")
    report.notes.append(f"note with {HOSTILE}")
    report.cells.append(
        CellResult(
            cell="torch2.13.0-cpu-cp311",
            job="torch2.13.0-cpu-cp311",
            status=Status.FAILED,
            reason=HOSTILE,
            log="/tmp/[/logs]/x.log",
            findings=[Finding(code="platform-tag", severity=Severity.WARNING, message=HOSTILE)],
        )
    )
    out = io.StringIO()
    report.print_table(out)
    text = out.getvalue()
    assert "warning [platform-tag] setup.py said: [/x] [bold]no[/bold] [build-system]" in text
    assert f"failed: {HOSTILE} (log: /tmp/[/logs]/x.log)" in text
    assert f"note: note with {HOSTILE}" in text
    assert "[/x]" in text.split("note:")[0]  # the table's reason column too


def test_progress_lines_print_paths_as_they_are() -> None:
    out = io.StringIO()
    progress = Progress(["torch2.13.0-cpu-cp311"], out=out, live=False)
    progress.stage("torch2.13.0-cpu-cp311", "build")
    progress.finish("torch2.13.0-cpu-cp311", "FAILED (log: /tmp/[/w]/x.log)")
    assert "FAILED (log: /tmp/[/w]/x.log)" in out.getvalue()
