"""`buildtools build --distribute URL` (matrix.yaml `build.distribute`): a cell's compile units
on an sccache-dist cluster, wired into the build as a wrapper of the local backend.

Before any job the scheduler is asked for its status with the client token (`dist.client`):
when it answers, the run's compile budget is this machine's cores and the cluster's slots
together (MAX_JOBS and `nvcc --threads` follow from it, `scheduler.plan_slots`), and each
job builds through its own sccache server (`DistributingBackend`); when it does not (down,
token refused), the run builds as it would without `--distribute` and a note says why. A
unit the cluster fails mid-build (a server killed) is compiled here by sccache itself; the
build completes and its counts say so. The build tree is the same as without distribution
(the compilers' names and flags are unchanged), so the wheel is the same bytes.

The job's sccache cache is `<cache>/dist-client/<job id>/cache` (hits across runs, like the
per-job ccache), or a throwaway one with `--no-ccache` (every unit compiles: a cold build).
"""

from __future__ import annotations

__all__ = ["DistPlan", "DistributingBackend", "plan_distribution"]

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..backends.base import Backend
from ..context import RunContext
from ..distcompile.client import (
    DistTarget,
    UnitCounts,
    distributed_job,
    probe,
    resolve_target,
)
from ..distcompile.cluster import default_state_dir, read_state
from ..distcompile.schedstatus import SchedulerStatus
from ..distcompile.tools import find_tool, version_of
from ..errors import ConfigError
from ..model import BuildJob
from ..process import ProcessRunner
from ..toolchain.envs import Toolchain
from .build_report import CellResult
from .compilercache import job_tool
from .deviceunits import rewrap
from .options import BuildOptions
from .scheduler import HostResources

# Units in flight per server core. Each unit spends part of its life on the client
# (preprocessing, the nvcc driver, sending and receiving), so one unit per server core leaves
# the servers idle meanwhile; sccache-dist's scheduler places up to two per core (0.16) and
# the client compiles any it refuses. Measured (docs/distributed.md): xformers through 2 × 1
# with a 2-CPU client, MAX_JOBS=2: 168.9 s, 0.649 of 1 × 1. The client's own cores come on
# top (`plan_slots`): a unit the cluster refuses compiles here, so a cluster smaller than
# the client never leaves the client's cores idle.
UNITS_PER_SERVER_CORE = 2


@dataclass(kw_only=True)
class DistPlan:
    """Where this run's units compile: the cluster (`target`, when it answers), else this
    machine, through sccache either way; and what each job's went where."""

    url: str
    sccache: Path
    target: DistTarget | None = None  # None: the cluster cannot be used (`why`)
    status: SchedulerStatus | None = None
    why: str = ""
    counts: dict[str, UnitCounts] = field(default_factory=dict)  # job id → counts
    problems: dict[str, str] = field(default_factory=dict)  # job id → why no counts
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sized(self, host: HostResources) -> HostResources:
        """This machine with the cluster's slots, UNITS_PER_SERVER_CORE units per core of its
        servers (`plan_slots` adds them to this machine's cores, each within memory)."""
        cpus = self.status.num_cpus if self.status and self.target else 0
        return replace(host, remote_slots=UNITS_PER_SERVER_CORE * cpus)

    def record(self, job_id: str, counts: UnitCounts | None, problem: str | None) -> None:
        with self.lock:
            if counts is not None:
                self.counts[job_id] = counts
            if problem is not None:
                self.problems[job_id] = problem

    def report(self, cells: list[CellResult], note: Callable[[str], None]) -> None:
        """Each built cell's counts into the run report, and one note per job."""
        for cell in cells:
            counts = self.counts.get(cell.job)
            if counts is not None:
                cell.compiles = {"scheduler": self.url, **counts.to_json()}
        for job_id, counts in sorted(self.counts.items()):
            note(f"distribute: {job_id}: {counts.describe()}")
        for job_id, problem in sorted(self.problems.items()):
            note(f"distribute: {job_id}: no counts ({problem})")

    def describe(self) -> str:
        s = self.status
        if self.target is None or s is None:
            return (
                f"distribute: {self.url} not used ({self.why}); every unit compiled locally, "
                "through sccache as a distributed build would (the same wheel)"
            )
        return (
            f"distribute: {self.target.url}: {s.num_servers} build server(s), "
            f"{s.num_cpus} core(s), {s.in_progress} job(s) in progress"
        )


def plan_distribution(
    opts: BuildOptions, *, runner: ProcessRunner, note: Callable[[str], None]
) -> DistPlan | None:
    """Where the units of a run with `opts.distribute` compile (None without it).

    The cluster when it answers; else (no token for matrix.yaml's setting, unreachable, no
    server, token refused) this machine, through sccache all the same: sccache's nvcc names
    its intermediate files its own way (`x_0.cudafe1.cpp`), and those names reach the
    binary, so a CUDA wheel is the same bytes only if every build of it takes that path. A
    note says which. Bad input (a malformed URL; no token for --distribute) is a
    ConfigError; a missing or wrong sccache a ToolMissingError naming the pinned install.
    """
    url, env = opts.distribute, opts.env
    if not url:
        return None
    sccache = find_tool("sccache", env)
    version_of(sccache, runner, env)
    plan = DistPlan(url=url, sccache=sccache)
    local = read_state(default_state_dir(env))
    try:
        target = resolve_target(
            url, env, local=(local.scheduler_url, local.client_token) if local else None
        )
    except ConfigError as exc:
        if not opts.distribute_by_default:
            raise
        plan.why = f"matrix.yaml build.distribute: {exc}"
    else:
        status = probe(target, env)
        if isinstance(status, str):
            plan.why = status
        elif status.num_servers == 0:
            plan.why, plan.status = "the scheduler has no build server", status
        else:
            plan.target, plan.status = target, status
    note(plan.describe())
    return plan


class DistributingBackend:
    """The local backend, each job's compiles sent through its own sccache server."""

    name: str
    needs_host_toolkit: bool
    repairs_inside: bool

    def __init__(self, inner: Backend, plan: DistPlan, *, opts: BuildOptions) -> None:
        if not inner.needs_host_toolkit:
            raise ConfigError(
                f"--distribute: the {inner.name} backend compiles in a container; distribute "
                "with --backend local"
            )
        self.inner = inner
        self.plan = plan
        self.name = inner.name
        self.needs_host_toolkit = inner.needs_host_toolkit
        self.repairs_inside = inner.repairs_inside
        self.cache_dir = opts.cache_dir
        self.asked = opts.compiler_cache  # "none" (--no-ccache): a throwaway cache per job

    def preflight(self, runner: ProcessRunner) -> None:
        self.inner.preflight(runner)

    def build_raw(
        self,
        job: BuildJob,
        toolchain: Toolchain,
        *,
        project_dir: Path,
        out_dir: Path,
        build_dir: Path,
        ctx: RunContext,
    ) -> list[Path]:
        work = self.cache_dir / "dist-client" / job.id
        work.mkdir(parents=True, exist_ok=True)
        log = ctx.stream
        with distributed_job(
            self.plan.target,
            ctx.env,
            sccache=self.plan.sccache,
            work=work,
            # a job without a compiler cache (command line or matrix) gets a throwaway one
            cache=work / "cache" if job_tool(job, self.asked) else None,
            cuda_home=toolchain.cuda_home if job.accelerator.kind == "cuda" else None,
            ctx=ctx,
        ) as dj:
            log.write(f"# {self.plan.describe()}; sccache log: {dj.paths.log}\n")
            wheels = self.inner.build_raw(
                job,
                toolchain,
                project_dir=project_dir,
                out_dir=out_dir,
                build_dir=build_dir,
                # the compiler wrapper (arch flags, unit reuse) stays in front of the cluster
                ctx=ctx.with_env(rewrap(dj.env, ctx.env)),
            )
        self.plan.record(job.id, dj.counts, dj.problem)
        if dj.counts is not None:
            log.write(f"# distributed compile units: {dj.counts.describe()}\n")
        return wheels
