"""The run report: versioned JSON plus a human table; written atomically."""

from __future__ import annotations

__all__ = ["REPORT_SCHEMA", "CellResult", "RunReport", "Status"]

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .. import __version__
from ..files import write_atomic
from ..model import Finding, Severity

REPORT_SCHEMA = "torch-buildtools/run-report/v1"


class Status(str, enum.Enum):
    BUILT = "built"
    SKIPPED_UNCHANGED = "skipped-unchanged"
    FAILED = "failed"
    EXCLUDED_BY_COMPAT = "excluded-by-compat"


@dataclass(kw_only=True)
class CellResult:
    """The outcome of one cell (a job's wheel covers each of its cells)."""

    cell: str
    job: str
    status: Status
    wheel: str | None = None
    sha256: str | None = None
    size: int | None = None
    # the wheel's mtime when it was hashed: `buildtools index` reuses `sha256` while the
    # file keeps this size and mtime
    mtime_ns: int | None = None
    log: str | None = None
    reason: str | None = None
    failure: str | None = None
    durations: dict[str, float] = field(default_factory=dict)
    # the job's wall time, from taking its lock to its result, failed stages included (the
    # durations hold the stages that finished)
    elapsed: float | None = None
    findings: list[Finding] = field(default_factory=list)
    # with --distribute: where the job's compile units ran (dist.client.UnitCounts.to_json)
    compiles: dict[str, Any] | None = None
    # CUDA jobs: what the nvcc wrapper did (deviceunits.WrapSummary.to_json): units reused
    # from another Python's cell, and from which, the arch flags it replaced
    units: dict[str, Any] | None = None
    # the job's slowest compile units, (name, seconds), at most ten: ninja's .ninja_log
    # (every unit it ran), else the nvcc wrapper's timings
    slowest_units: list[tuple[str, float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "job": self.job,
            "status": self.status.value,
            "wheel": self.wheel,
            "sha256": self.sha256,
            "size": self.size,
            **({"mtime_ns": self.mtime_ns} if self.mtime_ns is not None else {}),
            "log": self.log,
            "reason": self.reason,
            "failure": self.failure,
            "durations": {k: round(v, 3) for k, v in sorted(self.durations.items())},
            **({"elapsed": round(self.elapsed, 3)} if self.elapsed is not None else {}),
            **({"compiles": self.compiles} if self.compiles is not None else {}),
            **({"units": self.units} if self.units is not None else {}),
            **(
                {
                    "slowest_units": [
                        {"unit": u, "seconds": round(s, 1)} for u, s in self.slowest_units
                    ]
                }
                if self.slowest_units
                else {}
            ),
            "findings": [
                {
                    "code": f.code,
                    "severity": f.severity.value,
                    "message": f.message,
                    "path": f.path,
                    "details": list(f.details),
                }
                for f in self.findings
            ],
        }


def _seconds(cell: CellResult) -> str:
    """The time column: the job's wall time, else the sum of its stages."""
    if cell.elapsed is not None:
        return f"{cell.elapsed:.1f} s"
    return f"{sum(cell.durations.values()):.1f} s" if cell.durations else "-"


@dataclass(kw_only=True)
class RunReport:
    matrix: str
    profile: str | None
    backend: str
    cells: list[CellResult] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    reproduce: str = ""
    notes: list[str] = field(default_factory=list)  # run-wide remarks (scheduler, ccache)

    @property
    def failed(self) -> list[CellResult]:
        return [c for c in self.cells if c.status is Status.FAILED]

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for c in self.cells:
            counts[c.status.value] = counts.get(c.status.value, 0) + 1
        return {
            "schema": REPORT_SCHEMA,
            "buildtools": __version__,
            "matrix": self.matrix,
            "profile": self.profile,
            "backend": self.backend,
            "started": round(self.started, 3),
            "finished": round(self.finished, 3),
            "reproduce": self.reproduce,
            "summary": dict(sorted(counts.items())),
            "notes": list(self.notes),
            "cells": [c.to_json() for c in self.cells],
        }

    def write(self, path: Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), indent=2) + "\n")

    def print_table(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # every value is text, never rich markup: a reason or a path may hold "[/…]"
        console = Console(file=out, width=160, highlight=False)
        table = Table(title="build report")
        for col in ("cell", "status", "wheel", "size", "time", "findings"):
            table.add_column(col, overflow="fold")
        for c in self.cells:
            errors = sum(1 for f in c.findings if f.severity is Severity.ERROR)
            warnings = sum(1 for f in c.findings if f.severity is Severity.WARNING)
            table.add_row(
                *map(
                    Text,
                    (
                        c.cell,
                        c.status.value,
                        Path(c.wheel).name if c.wheel else (c.reason or "-"),
                        f"{c.size / 1e6:.2f} MB" if c.size else "-",
                        _seconds(c),
                        f"{errors} error(s), {warnings} warning(s)" if c.findings else "-",
                    ),
                )
            )
        console.print(table)
        for note in self.notes:
            console.print(f"  note: {note}", markup=False)
        for c in self.cells:
            for f in c.findings:
                if f.severity is not Severity.INFO:
                    console.print(
                        f"  {c.cell}: {f.severity.value} [{f.code}] {f.message}", markup=False
                    )
            if c.status is Status.FAILED and c.log:
                console.print(f"  {c.cell}: failed: {c.reason or ''} (log: {c.log})", markup=False)
        for job in dict.fromkeys(c.job for c in self.cells if c.slowest_units):
            units = next(c.slowest_units for c in self.cells if c.job == job)
            slowest = ", ".join(f"{u} {s:.1f} s" for u, s in units)
            console.print(f"  {job}: slowest units: {slowest}", markup=False)
