"""python-coverage: the Pythons the wheel's tag really covers against the cells it serves.

A project may set `py_limited_api` itself (cp39) and ignore the floor the plan passes in
`BUILDTOOLS_PY_LIMITED_API` (the oldest matrix Python), or build a per-Python wheel where
the plan promised abi3: the tag is what pip believes, so it is what the promise is judged
by. A promised cell the tag does not cover is an error (pip never installs the wheel
there); a tag that reaches below the oldest promised Python is a note (it installs on
Pythons no cell builds or tests).
"""

from __future__ import annotations

__all__ = ["CHECK", "PYTHON_COVERAGE", "covered_pythons"]

import re
from collections.abc import Iterable

from packaging.utils import parse_wheel_filename

from ...model import Finding, Severity
from .spec import Code, WheelCheck, WheelSubject, finding

PYTHON_COVERAGE = Code(
    name="python-coverage",
    summary="a promised cell's Python that the wheel's tag does not cover",
)

_CP = re.compile(r"^cp(\d)(\d+)$")
_CELL_PY = re.compile(r"-cp(\d)(\d+)(?:-|$)")


def _version(tag: str) -> tuple[int, int] | None:
    m = _CP.match(tag)
    return (int(m[1]), int(m[2])) if m else None


def covered_pythons(wheel_name: str) -> tuple[tuple[int, int] | None, set[tuple[int, int]]]:
    """(abi3 floor or None, exact Pythons) that the wheel's tags install on.

    `py3-none-…` covers every Python 3: floor (3, 0).
    """
    _, _, _, tags = parse_wheel_filename(wheel_name)
    floor: tuple[int, int] | None = None
    exact: set[tuple[int, int]] = set()
    for tag in tags:
        version = _version(tag.interpreter)
        if tag.abi == "abi3" and version is not None:
            floor = version if floor is None else min(floor, version)
        elif tag.abi == "none" and tag.interpreter in ("py3", "py30"):
            floor = (3, 0)
        elif version is not None:
            exact.add(version)
    return floor, exact


def _promised(cells: Iterable[str]) -> dict[tuple[int, int], list[str]]:
    out: dict[tuple[int, int], list[str]] = {}
    for cell in cells:
        m = _CELL_PY.search(cell)
        if m:
            out.setdefault((int(m[1]), int(m[2])), []).append(cell)
    return out


def _dotted(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _check(subject: WheelSubject) -> list[Finding]:
    wheel, expect = subject.wheel, subject.expect
    promised = _promised(expect.cells)
    if not promised:
        return []
    floor, exact = covered_pythons(wheel.name)
    tag = "-".join(wheel.name.removesuffix(".whl").split("-")[-3:-1])

    def covers(version: tuple[int, int]) -> bool:
        return version in exact or (floor is not None and version >= floor)

    reach = ", ".join(
        ([f"Python {_dotted(floor)} and newer"] if floor else [])
        + [f"Python {_dotted(v)}" for v in sorted(exact)]
    )
    findings: list[Finding] = []
    missing = sorted(v for v in promised if not covers(v))
    if missing:
        cells = [c for v in missing for c in promised[v]]
        findings.append(
            finding(
                PYTHON_COVERAGE,
                f"{wheel.name} is tagged {tag} ({reach or 'no CPython'}), but its cells promise "
                f"Python {', '.join(_dotted(v) for v in missing)}: pip never installs it there. "
                + (
                    "The plan builds one abi3 wheel for these cells; build with "
                    "py_limited_api set from BUILDTOOLS_PY_LIMITED_API (or a floor at or below "
                    "the oldest matrix Python), or set `project.abi: per-python` in matrix.yaml."
                    if expect.abi == "abi3"
                    else "Build one wheel per Python (`project.abi: per-python`)."
                ),
                path=wheel.name,
                details=tuple(f"not covered: {c}" for c in cells),
            )
        )
    oldest = min(promised)
    below = sorted(v for v in exact if v < oldest)
    if floor is not None and floor < oldest:
        findings.append(
            finding(
                PYTHON_COVERAGE,
                f"{wheel.name} is tagged {tag}: it installs on Python {_dotted(floor)} and newer, "
                f"below the oldest Python its cells promise ({_dotted(oldest)}); no cell builds "
                "or tests it there. The project sets its own py_limited_api floor instead of "
                "BUILDTOOLS_PY_LIMITED_API; harmless if it really supports those Pythons.",
                path=wheel.name,
                severity=Severity.INFO,
                details=(f"tag: {tag}", f"oldest promised: Python {_dotted(oldest)}"),
            )
        )
    elif below:
        findings.append(
            finding(
                PYTHON_COVERAGE,
                f"{wheel.name} is tagged {tag}: it also covers Python "
                f"{', '.join(_dotted(v) for v in below)}, which no cell promises.",
                path=wheel.name,
                severity=Severity.INFO,
            )
        )
    return findings


CHECK = WheelCheck(name="pythons", codes=(PYTHON_COVERAGE,), run=_check)
