"""The smoke gate of `buildtools index --require-smoke`: which wheels may be published.

A wheel goes out only when a smoke report (`buildtools smoke`, schema
`torch-buildtools/smoke-report/v1`) has a `passed` result for its exact sha256, and no
failing result for it: a wheel that passed on one GPU and crashed on another stays back.
The sha256, not the file name, identifies the wheel, so a rebuilt wheel of the same name
is never let through on an older wheel's report.
"""

from __future__ import annotations

__all__ = ["SMOKE_SCHEMA", "SmokeGate"]

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import PublishError
from ..files import read_regular
from ..jsonfields import decode_json
from .smokelog import SmokeRun, passing_runs

REPORT_BYTES = 64 << 20  # a smoke report of thousands of wheels is a few MB

SMOKE_SCHEMA = "torch-buildtools/smoke-report/v1"
# Every status but these is a failure: one a newer `buildtools smoke` adds (no-device,
# not-covered) holds a wheel back rather than being ignored.
_NOT_FAILING = frozenset({"passed", "skipped"})


@dataclass(frozen=True, kw_only=True)
class SmokeGate:
    """Which wheels a smoke report (`buildtools smoke`) proved: sha256 → statuses seen,
    and the passing runs (where and when), which the site keeps for its coverage map."""

    statuses: Mapping[str, tuple[str, ...]]
    runs: tuple[SmokeRun, ...] = ()

    @classmethod
    def load(cls, reports: Sequence[Path]) -> SmokeGate:
        seen: dict[str, list[str]] = defaultdict(list)
        runs: set[SmokeRun] = set()
        for path in reports:
            try:
                raw = read_regular(path, max_bytes=REPORT_BYTES)
                data = decode_json(raw, what="the smoke report", max_bytes=REPORT_BYTES)
            except OSError as exc:
                why = exc.strerror or str(exc)
                raise PublishError(f"{path}: cannot read the smoke report: {why}") from exc
            except ValueError as exc:
                raise PublishError(f"{path}: cannot read the smoke report: {exc}") from exc
            schema = data.get("schema") if isinstance(data, dict) else None
            if schema != SMOKE_SCHEMA:
                raise PublishError(
                    f"{path}: schema is {schema!r}, expected {SMOKE_SCHEMA!r} "
                    "(a report written by `buildtools smoke`)"
                )
            results = data.get("results")
            if not isinstance(results, list):
                raise PublishError(f"{path}: results: expected a list")
            for i, result in enumerate(results):
                if not isinstance(result, dict):
                    raise PublishError(f"{path}: results[{i}]: expected an object")
                sha, status = result.get("sha256"), result.get("status")
                if sha is None:
                    continue  # a wheel that was never read cannot vouch for any file
                if not isinstance(sha, str) or not isinstance(status, str):
                    raise PublishError(
                        f"{path}: results[{i}]: needs a string sha256 and a string status"
                    )
                seen[sha.lower()].append(status)
            try:
                runs.update(passing_runs(data, str(path)))
            except ValueError as exc:
                raise PublishError(
                    f"{exc} (a report written by `buildtools smoke` has it)"
                ) from None
        return cls(
            statuses={sha: tuple(v) for sha, v in seen.items()},
            runs=tuple(sorted(runs, key=SmokeRun.key)),
        )

    def verdict(self, sha256: str) -> str | None:
        """None when the wheel may be published, else why not.

        It needs a `passed` result for its exact sha256 and no failing one (a wheel that
        passed on one GPU and crashed on another does not go out).
        """
        statuses = self.statuses.get(sha256, ())
        bad = sorted({s for s in statuses if s not in _NOT_FAILING})
        if bad:
            return "smoke " + ", ".join(bad)
        if "passed" not in statuses:
            return "smoke " + (", ".join(sorted(set(statuses))) if statuses else "not run")
        return None
