"""`<cache>/timings.json`: how long each job took the last time it was built on this machine.

The progress display's ETA and `buildtools plan --estimate` read it; `buildtools build`
writes it after every run (a job's entry is replaced when it is built again). Each entry
is the job's wall time and its stages (`env`, `build`, `repair`, `check`, from the run
report), with the share of the machine it had (MAX_JOBS, nvcc threads): an estimate for
another machine can take the environment out, or scale the compile. Files written before
stages were recorded hold a bare number of seconds; they are read as such.

Entries are per project (`job id@<hash of the project directory>`): two projects build jobs
of the same id (`torch2.11.0-cu130-cp312`), and one's timing is no ETA for the other's.
Entries written before that (a bare job id) are dropped at the next write.
"""

from __future__ import annotations

__all__ = ["TIMINGS_NAME", "JobTiming", "read_timings", "update_timings"]

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files import write_atomic
from ..jsonfields import decode_json
from ..locks import file_lock

TIMINGS_NAME = "timings.json"


@dataclass(frozen=True, kw_only=True)
class JobTiming:
    """One job's last build on this machine."""

    seconds: float
    stages: Mapping[str, float] = field(default_factory=dict)
    max_jobs: int | None = None
    nvcc_threads: int | None = None
    # whether its compiler cache held entries when it started (its compile was then mostly
    # hits); None: not known (no cache, or written before this was recorded)
    warm: bool | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "seconds": round(self.seconds, 1),
            "stages": {k: round(v, 1) for k, v in sorted(self.stages.items())},
        }
        if self.max_jobs is not None:
            data["max_jobs"] = self.max_jobs
        if self.nvcc_threads is not None:
            data["nvcc_threads"] = self.nvcc_threads
        if self.warm is not None:
            data["warm"] = self.warm
        return data

    @classmethod
    def from_json(cls, raw: Any) -> JobTiming | None:
        """The entry, or None when it is not one (a damaged file only loses that entry)."""
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return cls(seconds=float(raw)) if math.isfinite(raw) and raw >= 0 else None
        if not isinstance(raw, dict):
            return None
        seconds = raw.get("seconds")
        if (
            not isinstance(seconds, (int, float))
            or isinstance(seconds, bool)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            return None
        stages = raw.get("stages") or {}
        if not isinstance(stages, dict):
            return None
        clean = {
            str(k): float(v)
            for k, v in stages.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
        }

        def count(key: str) -> int | None:
            value = raw.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(
            seconds=float(seconds),
            stages=clean,
            max_jobs=count("max_jobs"),
            nvcc_threads=count("nvcc_threads"),
            warm=raw["warm"] if isinstance(raw.get("warm"), bool) else None,
        )


def _scope(project: Path) -> str:
    return "@" + hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:12]


def read_timings(cache_dir: Path, *, project: Path | None = None) -> dict[str, JobTiming]:
    """job id → its last timing for `project` (every entry as stored when None); empty when
    there is no (readable) file."""
    try:
        data = decode_json((cache_dir / TIMINGS_NAME).read_bytes(), what=TIMINGS_NAME)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    found = {str(k): JobTiming.from_json(v) for k, v in data.items()}
    if project is not None:
        scope = _scope(project)
        found = {k.removesuffix(scope): v for k, v in found.items() if k.endswith(scope)}
    return {k: v for k, v in found.items() if v is not None}


def update_timings(
    cache_dir: Path, built: Mapping[str, JobTiming], *, project: Path | None = None
) -> None:
    """Replace the entries of the jobs just built (of `project`), keeping every other one.

    The file is read again under a lock right before it is written: two runs sharing a
    cache directory each add their own jobs instead of the last one dropping the other's.
    """
    if not built:
        return
    with file_lock(cache_dir / f".{TIMINGS_NAME}.lock"):
        kept = read_timings(cache_dir)
        if project is not None:  # scoped: unscoped entries of an older version go
            scope = _scope(project)
            kept = {k: v for k, v in kept.items() if "@" in k}
            built = {f"{k}{scope}": v for k, v in built.items()}
        timings = {**kept, **built}
        data = {k: timings[k].to_json() for k in sorted(timings)}
        write_atomic(cache_dir / TIMINGS_NAME, json.dumps(data, indent=1, sort_keys=True) + "\n")
