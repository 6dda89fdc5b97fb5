"""`buildtools plan --estimate`: the host facts the estimate needs, and its table.

The estimate itself is pure (`buildtools.wheelbuild.costmodel`); this gathers what it is given:
this machine's cores and memory, the recorded timings of the cache directory, which
environments exist there, the project's sources, and each job's CI runner.
"""

from __future__ import annotations

__all__ = ["cache_warm_in", "env_cached_in", "estimate_for", "nvcc_threads_of", "print_estimate"]

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from ..cachedir import default_cache_dir
from ..ciplan.labels import is_hosted
from ..model import BuildJob
from ..planner import Plan
from ..toolchain.envs import MARKER
from ..wheelbuild.compilercache import cache_holds_entries, cache_root
from ..wheelbuild.costmodel import (
    HOSTED_RUNNER,
    HereFacts,
    PlanEstimate,
    estimate_plan,
    project_shape,
)
from ..wheelbuild.fingerprint import scan_sources
from ..wheelbuild.scheduler import (
    HostResources,
    device_sources,
    host_resources,
    nvcc_threads,
    plan_slots,
)
from ..wheelbuild.timings import read_timings
from ..workflows.pins import load_pins


def env_cached_in(cache_dir: Path) -> Callable[[BuildJob], bool]:
    """Whether a job's toolchain environment exists in `cache_dir` (named by its Python,
    torch and accelerator name; complete when its marker is there)."""
    toolchains = cache_dir / "envs" / "toolchains"

    def cached(job: BuildJob) -> bool:
        # the environment's directory is named py<X.Y.Z>-torch<version>-<accelerator>-<key>
        pattern = f"py{job.build_python}.*-torch{job.torch}-{job.accelerator.name}-*"
        return any((d / MARKER).is_file() for d in toolchains.glob(pattern))

    return cached


def cache_warm_in(cache_dir: Path, env: Mapping[str, str]) -> Callable[[BuildJob], bool]:
    """Whether a job's compiler cache (its tool's, under `cache_dir` or
    BUILDTOOLS_CCACHE_DIR) holds entries: a build of the job ran with it."""

    def warm(job: BuildJob) -> bool:
        tool = job.compiler_cache
        return tool is not None and cache_holds_entries(cache_root(cache_dir, env, tool) / job.id)

    return warm


def estimate_for(
    plan: Plan,
    project_dir: Path,
    *,
    cache_dir: Path | None = None,
    host: HostResources | None = None,
) -> PlanEstimate:
    """The plan's estimate on this machine (or `host`) with this cache directory's facts."""
    cache = cache_dir or default_cache_dir(os.environ)
    here = host or host_resources()
    cached = env_cached_in(cache)
    warm = cache_warm_in(cache, os.environ)

    hosted = load_pins().hosted_runners.labels

    def ci_machine(job: BuildJob) -> HostResources:
        return HOSTED_RUNNER if is_hosted(job.runner, hosted) else here

    return estimate_plan(
        plan.jobs,
        cells=len(plan.cells),
        shape=project_shape(scan_sources(project_dir).files),
        here=HereFacts(
            host=here,
            timings=read_timings(cache, project=project_dir),
            env_cached=cached,
            cache_warm=warm,
        ),
        ci_machine=ci_machine,
    )


def nvcc_threads_of(
    plan: Plan, project_dir: Path, host: HostResources | None = None
) -> dict[str, int]:
    """job id → the `nvcc --threads` `buildtools build` of the plan would give it here."""
    slots = plan_slots(plan.jobs, host or host_resources())
    cu = device_sources(scan_sources(project_dir).files)
    return {j.id: nvcc_threads(j, slots, device_sources=cu) for j in plan.jobs}


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def print_estimate(estimate: PlanEstimate, out: TextIO) -> None:
    """The estimate as a table and a summary a maintainer reads."""
    width = max([len(j.job) for j in estimate.jobs] + [3])
    out.write(f"{'job'.ljust(width)}  {'here':>12}  {'CI job':>12}  {'billed':>6}  from\n")
    for j in estimate.jobs:
        threads = f", nvcc --threads {j.nvcc_threads}" if j.nvcc_threads > 1 else ""
        env = "env cached" if j.env_cached else "env created"
        out.write(
            f"{j.job.ljust(width)}  {_duration(j.seconds):>12}  {_duration(j.ci_seconds):>12}  "
            f"{j.ci_minutes:>4} m  {j.source} ({env}, MAX_JOBS={j.max_jobs}{threads})\n"
        )
    out.write(
        f"here: {_duration(estimate.local_s)} for {len(estimate.jobs)} job(s), "
        f"{estimate.concurrent} at once\n"
        f"CI: {_duration(estimate.ci_wall_s)} wall (plan → {len(estimate.jobs)} build job(s) "
        f"in parallel → index; smoke jobs not counted), {estimate.ci_minutes} runner-minute(s) "
        "billed\n"
        f"the ABI mode builds {estimate.cells} cell(s) in {len(estimate.jobs)} job(s) "
        f"({estimate.builds_saved} build(s) saved, {estimate.minutes_saved_by_abi} "
        "runner-minute(s)); a release with every wheel already published (skip-unchanged): "
        f"{estimate.unchanged_minutes} runner-minute(s)\n"
    )
