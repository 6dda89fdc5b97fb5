"""build-record: the wheel's <dist-info>/buildtools.json is present and valid.

doctor and the index read the record to tell what a wheel was built for; without it they
can only guess from the version label.
"""

from __future__ import annotations

__all__ = ["BUILD_RECORD", "CHECK"]

from ...model import BuildRecordError, Finding
from ..meta import read_build_record
from .spec import Code, WheelCheck, WheelSubject, finding

BUILD_RECORD = Code(
    name="build-record",
    summary="the wheel's buildtools.json missing or invalid",
)


def _check(subject: WheelSubject) -> list[Finding]:
    wheel, expect = subject.wheel, subject.expect
    if not expect.build_record:
        return []
    name = wheel.name
    problems: list[str] = []
    try:
        record = read_build_record(wheel)
    except BuildRecordError as exc:
        record, problems = None, list(exc.problems)
    except ValueError as exc:
        return [
            finding(
                BUILD_RECORD,
                f"{name}: the build record is unreadable ({exc}); relabel the wheel to rewrite it.",
                path=name,
            )
        ]
    if record is None and not problems:
        return [
            finding(
                BUILD_RECORD,
                f"{name} has no build record (<dist-info>/buildtools.json): doctor and the "
                "index cannot tell what it was built for. Relabel it with buildtools' relabel step.",
                path=name,
            )
        ]
    if record is not None and record.accelerator.name != expect.accelerator:
        problems.append(
            f"accelerator: {record.accelerator.name!r}, but the cell is {expect.accelerator!r}"
        )
    if not problems:
        return []
    return [
        finding(
            BUILD_RECORD,
            f"{name}: the build record is invalid ({'; '.join(problems)}); rebuild or relabel "
            "the wheel.",
            path=name,
            details=tuple(problems),
        )
    ]


CHECK = WheelCheck(name="record", codes=(BUILD_RECORD,), run=_check)
