"""A CUDA job's compiles behind `toolchain.devicewrap`, and what the wrapper did.

The wrapper replaces the project's arch flags with the cell's when the matrix says
`accelerators.<name>.arch_flags: enforce`, and reuses a device unit another Python's cell of
the same torch × CUDA × platform compiled (a store under the cache directory, keyed by
content). It is put where torch's ninja build looks for nvcc (`PYTORCH_NVCC`), in front of
whatever was there (the compiler cache's or a cluster's launcher). Each call appends a JSON
line to the job's wrapper log; `WrapSummary` is that log read back for the job log, the
build record (`arch_flags_replaced`) and the run report (`units`).

`BUILDTOOLS_UNIT_REUSE=0` turns the reuse off (the arch flags are still enforced);
`BUILDTOOLS_UNITS_DIR` names another store (a benchmark's cold one).
"""

from __future__ import annotations

__all__ = [
    "UNITS_DIR_VAR",
    "UNIT_REUSE_VAR",
    "WrapSummary",
    "container_wrap_env",
    "read_wrap_log",
    "rewrap",
    "unit_store",
    "wrap_env",
]

import json
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.base import JOB_UNITS_VAR, JOB_WRAP_LOG_VAR
from ..jsonfields import decode_json
from ..model import BuildJob
from ..toolchain import devicewrap
from ..toolchain.archopts import cuda_arch_flags
from ..toolchain.envs import Toolchain
from .options import BuildOptions

UNIT_REUSE_VAR = "BUILDTOOLS_UNIT_REUSE"
UNITS_DIR_VAR = "BUILDTOOLS_UNITS_DIR"
_WRAPPER = Path(devicewrap.__file__).resolve()
_LOG_LINES = 100_000  # lines of a wrapper log read (a unit is one line)


def unit_store(cache_dir: Path, env: Mapping[str, str]) -> Path:
    """Where reusable device units live: $BUILDTOOLS_UNITS_DIR, else <cache dir>/units (one
    store for every toolchain: the key names the compilers)."""
    return Path(env[UNITS_DIR_VAR]) if env.get(UNITS_DIR_VAR) else cache_dir / "units"


def wrap_env(
    job: BuildJob,
    toolchain: Toolchain,
    env: Mapping[str, str],
    *,
    staging: Path,
    opts: BuildOptions,
    tree: Path,
) -> dict[str, str]:
    """PYTORCH_NVCC through the wrapper for a CUDA job ({} for any other, or without nvcc).

    Its config is written in the job's build tree `tree`, whose path stays the same from one
    build to the next: ninja compiles a unit again when its command line changes, and the
    config's path is part of it. The log goes to `staging` (this build's)."""
    toolkit = job.toolkit
    if toolkit is None or toolkit.kind != "cuda" or toolchain.cuda_home is None:
        return {}
    nvcc = toolchain.cuda_home / "bin" / "nvcc"
    downstream = shlex.split(env["PYTORCH_NVCC"]) if env.get("PYTORCH_NVCC") else [str(nvcc)]
    reuse = env.get(UNIT_REUSE_VAR, "1") != "0"
    enforce = toolkit.arch_flags == "enforce"
    if not reuse and not enforce:
        return {}
    # a path is a placeholder in the store's keys only where the build maps it out of the
    # objects (wheelbuild.environment.reproducible_env); else it stays, and keys differ
    nvcc_flags = env.get("NVCC_APPEND_FLAGS", "")
    # as the compiler sees them (a linked cache's spelling; the wrapper adds the resolved one)
    site = toolchain.site_packages.absolute()
    project = opts.project_dir.absolute()
    config = devicewrap.WrapConfig(
        downstream=tuple(downstream),
        compiler=str(nvcc),
        arch_flags=tuple(cuda_arch_flags(toolkit.arch_list)) if enforce else None,
        store=str(unit_store(opts.cache_dir, env)) if reuse else None,
        job=job.id,
        site_packages=str(site) if f"-ffile-prefix-map={site}=" in nvcc_flags else None,
        project=str(project) if f"-ffile-prefix-map={project}=" in nvcc_flags else None,
        log=str(staging / "devicewrap.jsonl"),
        host_compiler=env.get("NVCC_CCBIN"),
    )
    path = tree / "devicewrap.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config.to_json(), indent=1) + "\n", encoding="utf-8")
    # the job's own Python runs it: its include directory is the one a unit must not use
    argv = [str(toolchain.python), "-I", str(_WRAPPER), str(path)]
    return {"PYTORCH_NVCC": shlex.join(argv), devicewrap.DOWNSTREAM_VAR: shlex.join(downstream)}


def container_wrap_env(
    job: BuildJob, env: Mapping[str, str], *, staging: Path, opts: BuildOptions
) -> dict[str, str]:
    """What a container build of a CUDA job is told for its wrapper (the docker backend
    mounts both): the log file, and the unit store when units are reused; {} for no wrapper."""
    toolkit = job.toolkit
    if toolkit is None or toolkit.kind != "cuda":
        return {}
    reuse = env.get(UNIT_REUSE_VAR, "1") != "0"
    if not reuse and toolkit.arch_flags != "enforce":
        return {}
    out = {JOB_WRAP_LOG_VAR: str(staging / "devicewrap.jsonl")}
    if reuse:
        out[JOB_UNITS_VAR] = str(unit_store(opts.cache_dir, env))
    return out


def rewrap(env: Mapping[str, str], outer: Mapping[str, str]) -> dict[str, str]:
    """`env` (a backend's own, which set PYTORCH_NVCC to its launcher) with the wrapper of
    `outer` kept in front: the launcher becomes the wrapper's downstream command."""
    out = dict(env)
    wrapper = outer.get("PYTORCH_NVCC")
    if devicewrap.DOWNSTREAM_VAR in outer and wrapper and out.get("PYTORCH_NVCC") != wrapper:
        out[devicewrap.DOWNSTREAM_VAR] = out.get("PYTORCH_NVCC") or outer[devicewrap.DOWNSTREAM_VAR]
        out["PYTORCH_NVCC"] = wrapper
    return out


@dataclass(frozen=True, kw_only=True)
class WrapSummary:
    """What the wrapper did in one job: units by outcome, where reused ones came from, the
    arch flags it replaced, and its slowest units."""

    units: Mapping[str, int]  # reused, stored, python-dependent, not-reusable, failed, …
    sources: Mapping[str, int]  # job id → units reused from it
    replaced: tuple[str, ...] = ()
    slowest: tuple[tuple[str, float], ...] = ()

    @property
    def reused(self) -> int:
        return self.units.get("reused", 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "units": dict(sorted(self.units.items())),
            "reused_from": dict(sorted(self.sources.items())),
            "arch_flags_replaced": list(self.replaced),
            "slowest": [{"unit": u, "seconds": s} for u, s in self.slowest],
        }

    def lines(self) -> list[str]:
        """For the job's log: the arch flags replaced, then the units."""
        out = []
        if self.replaced:
            out.append(
                "arch_flags: enforce replaced the project's own arch flags: "
                + "; ".join(self.replaced)
            )
        return [*out, self.describe()]

    def describe(self) -> str:
        total = sum(self.units.values())
        parts = [f"{n} {what}" for what, n in sorted(self.units.items())]
        text = f"device units: {total} ({', '.join(parts) or 'none'})"
        if self.sources:
            text += "; reused from " + ", ".join(
                f"{j} ({n})" for j, n in sorted(self.sources.items())
            )
        return text


def read_wrap_log(path: Path) -> WrapSummary | None:
    """The wrapper's log of a job read back; None when the wrapper never ran. A line that is
    not the wrapper's JSON is skipped (the log is the job's own file, but read defensively)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            lines = [line for _, line in zip(range(_LOG_LINES), f, strict=False)]
    except OSError:
        return None
    units: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    replaced: dict[str, None] = {}
    timed: list[tuple[str, float]] = []
    for line in lines:
        try:
            record = decode_json(line, what="a devicewrap log line")
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        for flag in record.get("replaced") or ():
            if isinstance(flag, str):
                replaced[flag] = None
        unit = record.get("unit")
        if not isinstance(unit, str):
            continue
        outcome = record.get("reuse")
        units[outcome if isinstance(outcome, str) else "compiled"] += 1
        source = record.get("source_job")
        if outcome == "reused" and isinstance(source, str):
            sources[source] += 1
        seconds = record.get("seconds")
        if isinstance(seconds, (int, float)):
            timed.append((unit, float(seconds)))
    timed.sort(key=lambda t: -t[1])
    return WrapSummary(
        units=dict(units),
        sources=dict(sources),
        replaced=tuple(sorted(replaced)),
        slowest=tuple(timed[:10]),
    )
