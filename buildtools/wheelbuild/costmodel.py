"""What a plan costs: each job's expected build time, the run's wall time, CI's minutes (pure).

`buildtools plan --estimate` prints it. Per job, the time comes from the job's last build
on this machine (`timings.json`) when there is one, else from `CostModel`, a model of a
torch extension's build measured on the example (docs/performance.md):

    job = environment (unless cached) + fixed + compile
    compile = max(longest translation unit, all compile work / MAX_JOBS)

where a C++ file costs `cpp_tu_s`, a `.cu` file `cu_host_s` plus `cu_target_s` per arch
target (`scheduler.device_targets`), its targets compiled `nvcc --threads` at a time.
When the job's compiler cache holds entries here (`HereFacts.cache_warm`: a build of the
job ran with this cache directory), every unit is taken as a hit: with ccache
`ccache_hit_s` each (its direct mode does not preprocess); with sccache a C++ file costs
`cpp_hit_s` (preprocessing torch's headers, the lookup), a `.cu` file `cu_hit_s` plus
`cu_hit_target_s` per arch target (sccache preprocesses the source once per target), and a recorded build's compile is replaced by
that (its other stages, measured here, are kept; a recorded build that was itself warm is
kept whole).
Locally, jobs run as `buildtools build` runs them (`scheduler.plan_slots`); in CI each job
has a runner of its own (the workflow's matrix fans out), starts cold (its environment is
created, `ci_job_s` of checkout, setup and upload around it) and is billed by the started
minute, as GitHub Actions bills; the plan and index jobs add one control job each. The
smoke jobs (GPU runners, billed apart) are not counted.
"""

from __future__ import annotations

__all__ = [
    "HOSTED_RUNNER",
    "CostModel",
    "HereFacts",
    "JobEstimate",
    "PlanEstimate",
    "ProjectShape",
    "estimate_plan",
    "project_shape",
]

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..model import BuildJob
from .scheduler import HostResources, Slots, device_targets, nvcc_threads, plan_slots
from .timings import JobTiming

# A standard GitHub-hosted Linux runner of a public repository: 4 CPUs, 16 GB (GitHub's
# "About GitHub-hosted runners": private repositories get 2 CPUs, 8 GB).
HOSTED_RUNNER = HostResources(cores=4, memory_gb=16.0)
_CPP_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")


def _env_defaults() -> dict[str, float]:
    # creating a job's environment on an empty machine: torch (CPU ~200 MB; CUDA ~5 GB with
    # its nvidia-* libraries and the toolkit wheels; ROCm ~8 GB), measured here for cpu and
    # cu130 (uv, local mirror; 280 s for cu130); ROCm by size
    return {"cpu": 45.0, "cuda": 280.0, "rocm": 450.0}


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Seconds of the parts of a build, on one core of a quiet 2-core x86-64 machine.

    Fitted to the example's cold builds in two `nox -s bench` runs of 2026-11-26 on the
    2-core build machine, one under load and one quiet (docs/performance.md): the CPU cell
    15.2 s and 14.1 s; the CUDA cell alone (MAX_JOBS=2, `nvcc --threads 2`) 60.3 s and
    53.8 s; the `pr` profile's two cells at once, each on one core (the CUDA job's .cu
    compiling its seven targets one after another) 101.9 s and 86.9 s. The constants sit
    between the two runs (16, 58 and 95 s by the model). The earlier fit (cpp 20 s, cu host
    20 s, 10.5 s a target: 2026-11-23, under heavier load) estimated 119.5 s for the last.
    """

    env_s: Mapping[str, float] = field(default_factory=_env_defaults)
    env_reused_s: float = 1.0  # an environment that exists: probe and reuse it
    cpp_tu_s: float = 10.0  # one C++ file including torch/extension.h
    cu_host_s: float = 16.0  # a .cu file's host side: cudafe, the host compile of torch headers
    cu_target_s: float = 9.0  # one arch target of a .cu file (cicc + ptxas, or one gfx arch)
    # served from a warm compiler cache (sccache or ccache; docs/performance.md, measured on
    # the example's warm rebuilds: build tree removed, compiler cache kept)
    # measured 2026-11-26 (load ~1.5): the CPU cell's warm build 5.5 s (build stage 4.5 s),
    # the CUDA cell's 33.9 s (build stage 32.2 s: sccache preprocesses the .cu once for the
    # host and once per arch target, each with torch's headers, before its lookups)
    cpp_hit_s: float = 2.0  # preprocessing torch/extension.h, hashing, the lookup
    cu_hit_s: float = 3.0  # a .cu file's host side: preprocessing, the lookup
    cu_hit_target_s: float = 3.5  # one arch target of a .cu file: its preprocessing, lookup
    # ccache's direct mode: a hit hashes the source and the include files it recorded, no
    # preprocessing (measured: the CUDA cell's warm build 7.9 s, the CPU cell's 5.5 s)
    ccache_hit_s: float = 0.5
    # setup.py importing torch, the link, repair, relabel, checks: 5 s fitted the CPU cell
    # cold (~26 s) and warm (5.5 s, one ccache hit) alike (it was 8 s, fitted to cold builds
    # only); 1.9 s less since the local backend skips `python -m build`'s dependency check,
    # which ran setup.py a second time (a forced rebuild of the CUDA cell 6.8 s → 4.9 s; the
    # pr pair's warm build 7.29 s → 5.19 s in the full bench runs before and after)
    fixed_s: float = 3.1
    # of that, what the build stage holds besides compiles (setup.py importing torch, the
    # link): kept when a recorded cold compile is replaced by hits (3.0 s before the change)
    build_overhead_s: float = 1.1
    # the run around its jobs (imports, the plan, fingerprints, the report): a no-op run
    # measures 0.9-1.1 s. fixed_s was fitted to whole runs, so the model has it; a recorded
    # timing is one job's, start to end, and the run adds it once
    run_s: float = 1.0
    ci_job_s: float = 60.0  # a CI job around its build: runner start, checkout, nox, upload
    control_job_s: float = 60.0  # the plan job, the index job (each)
    ci_concurrency: int = 20  # jobs GitHub runs at once (GitHub Free; Team: 60)


@dataclass(frozen=True, kw_only=True)
class ProjectShape:
    """What the model needs of the sources: how many files of each kind compile."""

    cpp_sources: int
    cu_sources: int


def project_shape(files: Sequence[Path]) -> ProjectShape:
    """C/C++ and CUDA translation units among the project's source files."""
    return ProjectShape(
        cpp_sources=sum(1 for f in files if f.suffix in _CPP_SUFFIXES),
        cu_sources=sum(1 for f in files if f.suffix == ".cu"),
    )


@dataclass(frozen=True, kw_only=True)
class HereFacts:
    """This machine as the estimate sees it: its resources, recorded timings, cached envs."""

    host: HostResources
    timings: Mapping[str, JobTiming]
    env_cached: Callable[[BuildJob], bool]  # whether the job's environment exists here
    # whether the job's compiler cache holds entries here (a build of it ran before)
    cache_warm: Callable[[BuildJob], bool] = field(default=lambda job: False)


@dataclass(frozen=True, kw_only=True)
class JobEstimate:
    job: str
    seconds: float  # this machine, as `buildtools build` would run it now
    ci_seconds: float  # its own CI runner, from cold, with the job's own steps
    source: str  # "recorded" (timings.json) or "model"
    env_cached: bool
    max_jobs: int
    nvcc_threads: int
    cache_warm: bool = False  # compiles taken as compiler-cache hits

    @property
    def ci_minutes(self) -> int:
        """Billed minutes: every started minute counts."""
        return max(1, math.ceil(self.ci_seconds / 60))


@dataclass(frozen=True, kw_only=True)
class PlanEstimate:
    jobs: tuple[JobEstimate, ...]
    local_s: float  # wall time of `buildtools build` of the plan here
    concurrent: int  # jobs compiling at once here
    ci_wall_s: float  # plan job → build jobs (fanned out) → index job
    ci_minutes: int  # runner-minutes billed: build jobs + plan + index
    cells: int
    builds_saved: int  # cells built by another cell's job (the ABI mode)
    minutes_saved_by_abi: int  # runner-minutes those cells would cost as jobs of their own
    unchanged_minutes: int  # a release where every job's wheel is published: skip-unchanged

    def to_json(self) -> dict[str, object]:
        return {
            "local_s": round(self.local_s, 1),
            "concurrent": self.concurrent,
            "ci_wall_s": round(self.ci_wall_s, 1),
            "ci_runner_minutes": self.ci_minutes,
            "cells": self.cells,
            "builds_saved_by_abi": self.builds_saved,
            "runner_minutes_saved_by_abi": self.minutes_saved_by_abi,
            "unchanged_release_runner_minutes": self.unchanged_minutes,
            "jobs": {
                j.job: {
                    "seconds": round(j.seconds, 1),
                    "ci_seconds": round(j.ci_seconds, 1),
                    "source": j.source,
                    "max_jobs": j.max_jobs,
                    "nvcc_threads": j.nvcc_threads,
                    "cache_warm": j.cache_warm,
                }
                for j in self.jobs
            },
        }


def _compile_s(
    job: BuildJob, shape: ProjectShape, model: CostModel, *, max_jobs: int, threads: int
) -> float:
    """Wall time of the job's compiles with `max_jobs` processes (the model)."""
    kind = job.accelerator.kind
    cpp = shape.cpp_sources * model.cpp_tu_s
    longest = model.cpp_tu_s if shape.cpp_sources else 0.0
    work = cpp
    if kind != "cpu" and job.toolkit is not None and shape.cu_sources:
        targets = device_targets(job.toolkit.arch_list)
        work += shape.cu_sources * (model.cu_host_s + targets * model.cu_target_s)
        per_cu = model.cu_host_s + math.ceil(targets / max(1, threads)) * model.cu_target_s
        longest = max(longest, per_cu)
    return max(longest, work / max(1, max_jobs))


def _warm_compile_s(
    job: BuildJob, shape: ProjectShape, model: CostModel, *, max_jobs: int
) -> float:
    """Wall time of the job's compiles when every unit hits the compiler cache (its tool's
    hits: ccache's direct mode, or sccache's preprocessing per target)."""
    device = job.accelerator.kind != "cpu" and job.toolkit is not None
    if job.compiler_cache == "ccache":
        units = shape.cpp_sources + (shape.cu_sources if device else 0)
        hits = [model.ccache_hit_s] * units
    else:
        hits = [model.cpp_hit_s] * shape.cpp_sources
        if device and job.toolkit is not None:
            targets = device_targets(job.toolkit.arch_list)
            hits += [model.cu_hit_s + targets * model.cu_hit_target_s] * shape.cu_sources
    return max(max(hits, default=0.0), sum(hits) / max(1, max_jobs))


def _lanes(durations: Sequence[float], lanes: int) -> float:
    """Wall time of jobs started in order, each on the first free lane of `lanes`."""
    free = [0.0] * max(1, lanes)
    end = 0.0
    for d in durations:
        start = heapq.heappop(free)
        end = max(end, start + d)
        heapq.heappush(free, start + d)
    return end


def _one_job_slots(job: BuildJob, host: HostResources) -> Slots:
    return plan_slots([job], host)


def estimate_plan(
    jobs: Sequence[BuildJob],
    *,
    cells: int,
    shape: ProjectShape,
    here: HereFacts,
    ci_machine: Callable[[BuildJob], HostResources],
    model: CostModel | None = None,
    max_jobs: int | None = None,
) -> PlanEstimate:
    """The plan's cost here and in CI (pure: the host, timings and caches are given).

    `ci_machine(job)` is the machine the job's CI runner is (`HOSTED_RUNNER` for a
    GitHub-hosted label).
    """
    host, timings, env_cached = here.host, here.timings, here.env_cached
    model = model or CostModel()
    slots = plan_slots(jobs, host, max_jobs=max_jobs)
    out: list[JobEstimate] = []
    for job in jobs:
        kind = job.accelerator.kind
        threads = nvcc_threads(job, slots, device_sources=shape.cu_sources)
        warm = here.cache_warm(job)
        here_s = (
            _warm_compile_s(job, shape, model, max_jobs=slots.max_jobs)
            if warm
            else _compile_s(job, shape, model, max_jobs=slots.max_jobs, threads=threads)
        )
        ci_slots = _one_job_slots(job, ci_machine(job))
        ci_threads = nvcc_threads(job, ci_slots, device_sources=shape.cu_sources)
        there = _compile_s(job, shape, model, max_jobs=ci_slots.max_jobs, threads=ci_threads)
        cached = env_cached(job)
        env_now = model.env_reused_s if cached else model.env_s[kind]
        recorded = timings.get(job.id)
        if recorded is not None:
            env_then = recorded.stages.get("env")
            built = recorded.stages.get("build")
            if env_then is None:
                seconds = recorded.seconds
            else:
                env_part = min(env_then, model.env_reused_s) if cached else max(env_then, env_now)
                seconds = recorded.seconds - env_then + env_part
            if warm and built is not None and not recorded.warm:
                # the recorded compile was cold: the model's hits replace it (not scaled by
                # how slow that compile was: the load it ran under says nothing of now)
                seconds = seconds - built + min(built, model.build_overhead_s + here_s)
            # CI: the recorded compile, scaled by what the model says the runner's share
            # changes; the rest as recorded; the environment from cold
            if built is not None and env_then is not None:
                then_jobs = recorded.max_jobs or slots.max_jobs
                then = _compile_s(
                    job,
                    shape,
                    model,
                    max_jobs=then_jobs,
                    threads=recorded.nvcc_threads or 1,
                )
                rest = max(0.0, recorded.seconds - env_then - built)
                ci = model.env_s[kind] + rest + built * (there / then if then else 1.0)
            else:
                ci = max(recorded.seconds, model.env_s[kind] + model.fixed_s + there)
            source = "recorded"
        else:
            seconds = env_now + model.fixed_s + here_s
            ci = model.env_s[kind] + model.fixed_s + there
            source = "model"
        out.append(
            JobEstimate(
                job=job.id,
                seconds=seconds,
                ci_seconds=ci + model.ci_job_s,
                source=source,
                env_cached=cached,
                max_jobs=slots.max_jobs,
                nvcc_threads=threads,
                cache_warm=warm,
            )
        )
    local = _lanes([j.seconds for j in out], slots.concurrent)
    if any(j.source == "recorded" for j in out):
        local += model.run_s
    build_wall = _lanes([j.ci_seconds for j in out], model.ci_concurrency)
    control = 2 * max(1, math.ceil(model.control_job_s / 60))
    by_id = {j.id: j for j in jobs}
    saved = sum(
        (len(by_id[e.job].cells) - 1) * e.ci_minutes for e in out if len(by_id[e.job].cells) > 1
    )
    return PlanEstimate(
        jobs=tuple(out),
        local_s=local,
        concurrent=slots.concurrent,
        ci_wall_s=model.control_job_s * 2 + build_wall if out else 0.0,
        ci_minutes=sum(j.ci_minutes for j in out) + (control if out else 0),
        cells=cells,
        builds_saved=max(0, cells - len(out)),
        minutes_saved_by_abi=saved,
        unchanged_minutes=len(out) * max(1, math.ceil(model.ci_job_s / 60))
        + (control if out else 0),
    )
