"""What the smoke reports proved about published wheels: the runs `index.json` keeps.

A smoke report (`buildtools smoke`) says which runner tested which wheel (by sha256) in
which cell, and whether it passed. The gate (`gate`) decides from it what may be published;
this module keeps the passing runs of published wheels, so the coverage map can say "smoke
tested on an NVIDIA H100, driver 580.159.04, on 2026-11-25" long after the report is gone.

Everything here comes from files someone else wrote (a report uploaded by a runner, a
manifest served back by a site): each field is checked for its type and shape, and kept
short; pages escape it when they show it.
"""

from __future__ import annotations

__all__ = ["SmokeRun", "passing_runs"]

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..untrusted import unprintable

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
# ASCII digits only (\d would take other scripts' digits), and a real calendar date
_DATE_RE = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})(?:[T ][0-9:.+\-Z]*)?", re.ASCII)
_RUNNERS = ("cpu", "cuda", "rocm")
_MAX = 200  # characters of a free-text field (a GPU name, a driver version)


def _text(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    """A free-text field: at most _MAX characters, none that `untrusted.printable` would
    have to escape (C0 and C1 controls, bidi overrides such as U+202E, separators)."""
    value = raw.get(key)
    if value is None:
        return None
    bad = unprintable(value) if isinstance(value, str) else None
    if not isinstance(value, str) or len(value) > _MAX or bad is not None:
        said = f" ({bad} is not)" if bad else ""
        raise ValueError(
            f"{where}: {key}: expected a string of at most {_MAX} printable characters or "
            f"null{said}"
        )
    return value or None


def _date(value: Any, where: str) -> str:
    """The YYYY-MM-DD of an ISO date or timestamp that names a real day."""
    found = _DATE_RE.fullmatch(value) if isinstance(value, str) else None
    try:
        if found is None:
            raise ValueError
        datetime.date.fromisoformat(found.group(1))
    except ValueError:
        raise ValueError(
            f"{where}: date: expected an ISO date (YYYY-MM-DD…, ASCII digits, a real day)"
        ) from None
    return found.group(1)


@dataclass(frozen=True, kw_only=True, order=True)
class SmokeRun:
    """One passing smoke test of one wheel: where it ran and when."""

    sha256: str
    cell: str | None  # the cell the runner tested (Cell.id); None: the report did not say
    runner: str  # what the runner offered: cpu | cuda | rocm
    gpu: str | None
    driver: str | None
    date: str  # YYYY-MM-DD
    python: str | None
    torch: str | None

    def key(self) -> tuple[str, ...]:
        """An order for runs whose optional fields are None in some and set in others (a
        run of an older report names no torch): `sorted(runs, key=SmokeRun.key)`."""
        return tuple(
            v or ""
            for v in (
                self.sha256,
                self.cell,
                self.runner,
                self.gpu,
                self.driver,
                self.date,
                self.python,
                self.torch,
            )
        )

    @property
    def device(self) -> str:
        """'NVIDIA H100 80GB HBM3, driver 580.159.04', or 'CPU runner (no GPU)'."""
        if not self.gpu:
            return f"{self.runner.upper()} runner (no GPU)"
        return f"{self.gpu}, driver {self.driver}" if self.driver else self.gpu

    def to_json(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "cell": self.cell,
            "runner": self.runner,
            "gpu": self.gpu,
            "driver": self.driver,
            "date": self.date,
            "python": self.python,
            "torch": self.torch,
        }

    @classmethod
    def from_json(cls, raw: Any, where: str = "smoke entry") -> SmokeRun:
        """A run as `to_json` wrote it; ValueError naming `where` and the key otherwise."""
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: expected an object")
        return cls._checked(raw, raw.get("runner"), raw.get("date"), where)

    @classmethod
    def _checked(cls, raw: Mapping[str, Any], runner: Any, date: Any, where: str) -> SmokeRun:
        sha = raw.get("sha256")
        if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha.lower()):
            raise ValueError(f"{where}: sha256: expected 64 hexadecimal digits")
        if runner not in _RUNNERS:
            raise ValueError(f"{where}: runner: expected one of {', '.join(_RUNNERS)}")
        day = _date(date, where)
        return cls(
            sha256=sha.lower(),
            cell=_text(raw, "cell", where),
            runner=runner,
            gpu=_text(raw, "gpu", where),
            driver=_text(raw, "driver", where),
            date=day,
            python=_text(raw, "python", where),
            torch=_text(raw, "torch", where),
        )


def passing_runs(report: Mapping[str, Any], where: str) -> list[SmokeRun]:
    """The passing results of one smoke report (schema checked by the caller) as runs;
    ValueError naming `where` and the field when the report is not one `buildtools smoke`
    could have written. A report that does not say where it ran gives none (the gate still
    reads its statuses), and so does a result that names no wheel by its sha256."""
    runner = report.get("runner")
    if runner is None:
        return []
    if not isinstance(runner, dict):
        raise ValueError(f"{where}: runner: expected an object (the machine that ran the tests)")
    fields = {k: runner.get(k) for k in ("gpu", "driver", "python", "torch")}
    runs: list[SmokeRun] = []
    for i, result in enumerate(report.get("results") or []):
        if not isinstance(result, dict) or result.get("status") != "passed":
            continue
        sha = result.get("sha256")
        if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha.lower()):
            continue  # a wheel that was never read (or no wheel's hash) vouches for no file
        raw = {**fields, "sha256": result.get("sha256"), "cell": result.get("cell")}
        if result.get("torch") is not None:  # the torch this entry ran on (a stable wheel's
            raw["torch"] = result.get("torch")  # window: another release than the runner's)
        runs.append(
            SmokeRun._checked(
                raw, runner.get("accelerator"), runner.get("date"), f"{where}: results[{i}]"
            )
        )
    return runs
