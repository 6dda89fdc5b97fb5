"""What a check is: the finding codes it owns (with their default severity) and its function.

Each check module declares one `BinaryCheck` or `WheelCheck` named `CHECK`; the package lists
them in the order their findings are reported (`checks.CHECKS`), and `CHECK_CODES` is read from
there. A check reports only the codes it declared: a new code cannot go unregistered, and
the codes table in the package docstring is tested against the registry.
"""

from __future__ import annotations

__all__ = ["BinaryCheck", "Check", "Code", "Subject", "WheelCheck", "WheelSubject", "finding"]

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from ...knowledge import Knowledge
from ...model import Finding, Severity
from .elves import WheelElf
from .expect import Expectation
from .facts import TargetFacts


@dataclass(frozen=True, kw_only=True)
class Code:
    """One finding code: its name, what it catches, and the severity it has unless stated."""

    name: str
    summary: str
    severity: Severity = Severity.ERROR


@dataclass(frozen=True, kw_only=True)
class Subject:
    """What every check sees: the shared objects, each target torch, the knowledge base."""

    elves: tuple[WheelElf, ...]
    targets: tuple[TargetFacts, ...]
    knowledge: Knowledge


@dataclass(frozen=True, kw_only=True)
class WheelSubject(Subject):
    """A built wheel: its file (metadata, tags, build record) and what its job promised."""

    wheel: Path
    expect: Expectation


@dataclass(frozen=True, kw_only=True)
class BinaryCheck:
    """A check of shared objects alone: runs on wheels and on installed packages (doctor)."""

    name: str
    codes: tuple[Code, ...]
    run: Callable[[Subject], list[Finding]]


@dataclass(frozen=True, kw_only=True)
class WheelCheck:
    """A check that needs the wheel file or the job's promises: runs on built wheels only."""

    name: str
    codes: tuple[Code, ...]
    run: Callable[[WheelSubject], list[Finding]]


Check: TypeAlias = "BinaryCheck | WheelCheck"


def finding(
    code: Code,
    message: str,
    *,
    path: str | None,
    severity: Severity | None = None,
    details: Iterable[str] = (),
) -> Finding:
    """A finding of `code`, at the code's default severity unless `severity` says otherwise."""
    return Finding(
        code=code.name,
        severity=code.severity if severity is None else severity,
        message=message,
        path=path,
        details=tuple(details),
    )
