"""The smoke report: versioned JSON, JUnit XML, GitHub annotations and step summary.

The JSON is what the publish gate reads: per wheel exactly `wheel` (file name),
`sha256` and `status` (`passed` is the only status that lets a wheel through).
"""

from __future__ import annotations

__all__ = [
    "SMOKE_REPORT_SCHEMA",
    "ReportPaths",
    "RunnerInfo",
    "SmokeReport",
    "SmokeResult",
    "SmokeStatus",
    "github_annotations",
    "junit_xml",
    "publish",
    "step_summary",
]

import html
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .. import __version__
from ..files import write_atomic
from ..torchinstall import GpuInfo
from ..untrusted import markdown, markdown_code, printable
from .cases import CasesReport
from .modules import ModuleOutcome
from .outcome import SmokeStatus

SMOKE_REPORT_SCHEMA = "torch-buildtools/smoke-report/v1"


@dataclass(frozen=True, kw_only=True)
class RunnerInfo:
    """The machine the smoke tests ran on."""

    accelerator: str  # cpu | cuda | rocm
    gpu: str | None
    driver: str | None
    torch: str | None
    torch_cuda: str | None
    python: str
    date: str
    host: str
    # every GPU the runner's torch sees (name, compute capability or gfx arch)
    gpus: tuple[GpuInfo, ...] = ()
    driver_cuda: str | None = None  # the CUDA version the driver supports ("13.0")
    device_check: str | None = None  # what the device check of a GPU runner found
    device_ok: bool | None = None  # its verdict (None: a CPU runner, not checked)

    @property
    def gpu_text(self) -> str:
        """'NVIDIA H100 80GB HBM3 (sm_90, compute capability 9.0)', or 'no GPU'."""
        if not self.gpus:
            return self.gpu or "no GPU"
        parts = []
        for g in self.gpus:
            cap = (
                f", compute capability {g.capability[0]}.{g.capability[1]}" if g.capability else ""
            )
            parts.append(f"{g.name} ({g.arch}{cap})")
        return "; ".join(parts)

    @property
    def driver_text(self) -> str:
        cuda = f" (supports CUDA {self.driver_cuda})" if self.driver_cuda else ""
        return f"{self.driver or '-'}{cuda}"

    def to_json(self) -> dict[str, Any]:
        return {
            "accelerator": self.accelerator,
            "gpu": self.gpu,
            "driver": self.driver,
            "torch": self.torch,
            "torch_cuda": self.torch_cuda,
            "python": self.python,
            "date": self.date,
            "host": self.host,
            "gpus": [
                {**g.to_json(), "arch": g.arch if g.capability or g.gcn_arch else None}
                for g in self.gpus
            ],
            "driver_cuda": self.driver_cuda,
            "device_check": self.device_check,
            "device_ok": self.device_ok,
        }


@dataclass(frozen=True, kw_only=True)
class SmokeResult:
    """One wheel: where it came from, what happened, and the output that shows it."""

    wheel: str  # file name
    sha256: str
    cell: str | None
    status: SmokeStatus
    diagnosis: str | None = None
    output: str = ""  # tail of the failing (or last) stage's output
    duration: float = 0.0
    stage: str | None = None  # env | install | import | smoke: where it ended
    source: str | None = None  # path or URL of the wheel
    torch_source: str | None = None  # system | index
    torch: str | None = None  # torch.__version__ of the environment it ran in ("2.14.1+cu130")
    findings: tuple[str, ...] = ()
    log: str | None = None
    # every cell the wheel serves (abi3: several Pythons, stable: several torches); `cell`
    # is the one this runner actually tested
    covers: tuple[str, ...] = ()
    # each compiled module (and other shared object) and what loading it did
    modules: tuple[ModuleOutcome, ...] = ()
    device_code: str | None = None  # GPU runners: which device code runs on the GPU, how
    cases: CasesReport | None = None  # what the smoke command said it ran
    cases_note: str | None = None  # why there is no `cases` (not written, unreadable)

    @property
    def cell_label(self) -> str:
        """The tested cell, and how many the wheel covers when it is more than one."""
        if self.cell is None:
            return "-"
        if len(self.covers) > 1:
            return f"{self.cell} (of {len(self.covers)} covered)"
        return self.cell

    def to_json(self) -> dict[str, Any]:
        return {
            "wheel": self.wheel,
            "sha256": self.sha256,
            "cell": self.cell,
            "status": self.status.value,
            "diagnosis": self.diagnosis,
            "output": self.output,
            "duration": round(self.duration, 3),
            "stage": self.stage,
            "source": self.source,
            "torch_source": self.torch_source,
            "torch": self.torch,
            "findings": list(self.findings),
            "log": self.log,
            "covers": list(self.covers),
            "modules": [m.to_json() for m in self.modules],
            "device_code": self.device_code,
            "cases": self.cases.to_json() if self.cases else None,
            "cases_note": self.cases_note,
        }


@dataclass(frozen=True, kw_only=True)
class SmokeReport:
    runner: RunnerInfo
    results: tuple[SmokeResult, ...]
    command: str = ""
    smoke_command: str | None = None

    @property
    def failed(self) -> list[SmokeResult]:
        return [r for r in self.results if r.status.is_failure]

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        return {
            "schema": SMOKE_REPORT_SCHEMA,
            "buildtools": __version__,
            "command": self.command,
            "smoke_command": self.smoke_command,
            "runner": self.runner.to_json(),
            "summary": dict(sorted(counts.items())),
            "results": [r.to_json() for r in self.results],
        }

    def write(self, path: Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), indent=2) + "\n")

    def print_table(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # every field but the status and the time is text from the wheel, the machine or
        # the child's output: printable (no ESC, no bidi, no workflow command in a CI log)
        console = Console(file=out, width=160, highlight=False)
        r = self.runner
        console.print(
            printable(
                f"runner: {r.accelerator}, {r.gpu_text}, driver {r.driver_text}, "
                f"torch {r.torch or '-'}, Python {r.python}",
                newlines=False,
            ),
            markup=False,
        )
        if r.device_check:
            console.print(printable(r.device_check), markup=False)
        table = Table(title="smoke report")
        for col in ("wheel", "cell", "status", "time", "diagnosis"):
            table.add_column(col, overflow="fold")
        for res in self.results:
            table.add_row(
                *(
                    Text(printable(text, newlines=False))
                    for text in (
                        res.wheel,
                        res.cell_label,
                        res.status.value,
                        f"{res.duration:.1f} s",
                        res.diagnosis or "-",
                    )
                )
            )
        console.print(table)
        for res in self.results:
            for line in _details(res):
                console.print(printable(f"  {res.wheel}: {line}", newlines=False), markup=False)
        for res in self.failed:
            if res.output.strip():
                console.print(
                    printable(
                        f"--- {res.wheel}: {res.status.value} ({res.stage}); output tail:",
                        newlines=False,
                    ),
                    markup=False,
                )
                console.print(printable(_last_lines(res.output, 15)), markup=False)


def _details(res: SmokeResult) -> list[str]:
    """The lines under the table: modules that did not simply load, device code, cases."""
    out = []
    for m in res.modules:
        if m.outcome != "loaded":
            mapped = ""
            if m.mapped is not None:
                mapped = " [mapped by the import]" if m.mapped else " [not mapped by the import]"
            out.append(f"{m.outcome}: {m.label}: {m.detail or ''}{mapped}")
    loaded = [m.label for m in res.modules if m.outcome == "loaded"]
    if loaded:
        out.append(f"loaded by name: {', '.join(loaded)}")
    if res.device_code:
        out.append(f"device code: {res.device_code}")
    if res.cases is not None:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(res.cases.counts.items()))
        out.append(f"cases: {counts or 'none'}; device: {res.cases.device or 'none'}")
    elif res.cases_note:
        out.append(f"cases: {res.cases_note}")
    return out


def _last_lines(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _xml_text(text: str) -> str:
    """XML 1.0 forbids most control characters and lone surrogates; a crash dump or a
    record's field may hold them: made printable (visible escapes) first."""
    return printable(text)


# A crash is an "error" in JUnit's terms; a result the test itself rejected is a "failure".
_JUNIT_ERRORS = frozenset({SmokeStatus.ABORTED, SmokeStatus.SEGFAULT, SmokeStatus.TIMEOUT})


def junit_xml(report: SmokeReport) -> str:
    """One <testcase> per wheel (classname: the cell), crashes as <error>, others <failure>."""
    results = report.results
    suite = ET.Element(
        "testsuite",
        {
            "name": "buildtools smoke",
            "tests": str(len(results)),
            "failures": str(
                sum(1 for r in results if r.status.is_failure and r.status not in _JUNIT_ERRORS)
            ),
            "errors": str(sum(1 for r in results if r.status in _JUNIT_ERRORS)),
            "skipped": str(sum(1 for r in results if r.status is SmokeStatus.SKIPPED)),
            "time": f"{sum(r.duration for r in results):.3f}",
            "timestamp": _xml_text(report.runner.date),
            "hostname": _xml_text(report.runner.host),
        },
    )
    props = ET.SubElement(suite, "properties")
    for key, value in report.runner.to_json().items():
        ET.SubElement(props, "property", {"name": key, "value": _xml_text(str(value))})
    for r in results:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": _xml_text(f"smoke.{r.cell or 'unknown-cell'}"),
                "name": _xml_text(r.wheel),
                "time": f"{r.duration:.3f}",
            },
        )
        message = _xml_text(f"{r.status.value}: {r.diagnosis or ''}".strip().rstrip(":"))
        if r.status is SmokeStatus.SKIPPED:
            ET.SubElement(case, "skipped", {"message": message})
        elif r.status.is_failure:
            tag = "error" if r.status in _JUNIT_ERRORS else "failure"
            node = ET.SubElement(case, tag, {"type": r.status.value, "message": message})
            node.text = _xml_text(r.output)
        if r.output and not r.status.is_failure:
            ET.SubElement(case, "system-out").text = _xml_text(r.output)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _gh_data(text: str) -> str:
    return printable(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(report: SmokeReport) -> list[str]:
    """`::error` workflow commands, one per failed wheel (file= when the wheel is a local file)."""
    lines = []
    for r in report.failed:
        props = []
        if r.source and "://" not in r.source:
            props.append(f"file={_gh_property(r.source)}")
        props.append(f"title={_gh_property(f'smoke {r.status.value}: {r.wheel}')}")
        body = f"{r.cell or r.wheel}: {r.diagnosis or r.status.value}"
        tail = _last_lines(r.output, 8)
        if tail:
            body += "\n" + tail
        lines.append(f"::error {','.join(props)}::{_gh_data(body)}")
    return lines


def step_summary(report: SmokeReport) -> str:
    """Markdown for $GITHUB_STEP_SUMMARY: the runner, a table, and each failure's output tail."""
    r = report.runner
    lines = [
        "## buildtools smoke",
        "",
        markdown(
            f"runner: {r.accelerator}, {r.gpu_text}, driver {r.driver_text}, "
            f"torch {r.torch or '-'}, Python {r.python}, {r.date}"
        ),
        "",
        "| wheel | cell | status | time | diagnosis |",
        "| --- | --- | --- | --- | --- |",
    ]
    icons = {SmokeStatus.PASSED: "✅", SmokeStatus.SKIPPED: "⏭️"}
    for res in report.results:
        icon = icons.get(res.status, "❌")
        lines.append(
            f"| {markdown_code(res.wheel)} | {markdown(res.cell_label)} | {icon} "
            f"{res.status.value} | {res.duration:.1f} s | {markdown(res.diagnosis or '')} |"
        )
    details = [(res, line) for res in report.results for line in _details(res)]
    if details:
        lines.append("")
        lines += [f"- {markdown_code(res.wheel)}: {markdown(line)}" for res, line in details]
    for res in report.failed:
        tail = printable(_last_lines(res.output, 40))
        # a fence longer than any run of backticks in the output: nothing in it closes it
        fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", tail)), default=0))
        lines += [
            "",
            "<details><summary>"
            + html.escape(printable(f"{res.wheel}: {res.status.value}", newlines=False))
            + "</summary>",
            "",
            fence,
            tail,
            fence,
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, kw_only=True)
class ReportPaths:
    json: Path
    junit: Path | None = None


def publish(
    report: SmokeReport, *, paths: ReportPaths, env: Mapping[str, str], out: TextIO
) -> None:
    """Write the JSON and JUnit files; on GitHub Actions also annotate and add a step summary."""
    report.write(paths.json)
    if paths.junit is not None:
        write_atomic(paths.junit, junit_xml(report))
    if env.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(report):
            out.write(line + "\n")
        summary = env.get("GITHUB_STEP_SUMMARY")
        if summary:
            with Path(summary).open("a", encoding="utf-8") as fh:
                fh.write(step_summary(report))
