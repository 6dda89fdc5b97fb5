"""How many jobs compile at once, and with how many compiler processes each (pure).

The machine's compile budget is its cores, capped by memory (a torch extension's compiler
process takes GBs: torch's headers alone are ~1.5 GB of parse state, nvcc with many archs
more). Jobs run concurrently while each gets an equal share of the budget as MAX_JOBS, so
`concurrent × max_jobs ≤ budget` always holds: the machine is never oversubscribed. A
compile slot is held only while a job compiles; creating environments (downloads, unpacking)
and repairing/checking run beside the compiles, in one extra worker.
"""

from __future__ import annotations

__all__ = ["GB_PER_COMPILE", "HostResources", "Slots", "host_resources", "plan_slots"]

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..model import BuildJob

# Peak resident memory of one compiler process, by the job's accelerator kind (measured on
# the example: c++ on torch/extension.h ~1.2 GB; nvcc for six archs ~2.5 GB), with headroom.
GB_PER_COMPILE = {"cpu": 2.0, "cuda": 4.0, "rocm": 4.0}


@dataclass(frozen=True, kw_only=True)
class HostResources:
    cores: int
    memory_gb: float


def host_resources(meminfo: Path = Path("/proc/meminfo")) -> HostResources:
    """Cores this process may use and the memory available now (MemAvailable)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    memory_gb = 0.0
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                memory_gb = int(line.split()[1]) / 1024 / 1024
                break
    except OSError:
        pass
    if memory_gb <= 0:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return HostResources(cores=max(1, cores), memory_gb=memory_gb)


@dataclass(frozen=True, kw_only=True)
class Slots:
    """`concurrent` jobs compile at once, each with MAX_JOBS=`max_jobs`; `workers` threads."""

    concurrent: int
    max_jobs: int
    workers: int
    budget: int  # compiler processes the machine holds
    reason: str


def plan_slots(
    jobs: Sequence[BuildJob],
    host: HostResources,
    *,
    max_jobs: int | None = None,
    concurrent: int | None = None,
) -> Slots:
    """Split the machine's compile budget between the jobs (pure).

    `max_jobs` (--max-jobs, or matrix build.max_jobs) fixes the processes per job;
    `concurrent` (--jobs) fixes how many jobs compile at once; neither may exceed the budget.
    By default as many jobs as the budget allows run at once, each with an equal share:
    a torch extension has few translation units and long serial phases (setup.py importing
    torch, the link, repair, checks), so parallel jobs use cores better than parallel TUs.
    """
    kinds = {j.accelerator.kind for j in jobs} or {"cpu"}
    per_compile = max(GB_PER_COMPILE[k] for k in kinds)
    by_memory = int(host.memory_gb // per_compile)
    budget = max(1, min(host.cores, by_memory))
    why = (
        f"{host.cores} core(s), {host.memory_gb:.0f} GB available / {per_compile:g} GB per compile"
    )
    n = max(1, len(jobs))
    if max_jobs is not None:
        per = max(1, min(max_jobs, budget))
        conc = max(1, min(n, budget // per, concurrent or n))
    else:
        conc = max(1, min(n, budget, concurrent or budget))
        per = max(1, budget // conc)
    workers = min(n, conc + 1)
    return Slots(
        concurrent=conc,
        max_jobs=per,
        workers=workers,
        budget=budget,
        reason=f"{conc} job(s) at once × MAX_JOBS={per} ≤ budget {budget} ({why})",
    )
