"""How many jobs compile at once, and with how many compiler processes each (pure).

The machine's compile budget is its cores, capped by memory (a torch extension's compiler
process takes GBs: torch's headers alone are ~1.5 GB of parse state, nvcc with many archs
more); with a compile cluster (`--distribute`), the cluster's slots as well, each capped by
the memory its unit's preprocessing takes here. Jobs run concurrently while each gets an equal share of the budget as MAX_JOBS, so
`concurrent × max_jobs ≤ budget` always holds: the machine is never oversubscribed. A
compile slot is held only while a job compiles; creating environments (downloads, unpacking)
and repairing/checking run beside the compiles, in one extra worker.

Device code is the long pole of a CUDA job: nvcc compiles each `.cu` file once per arch
target, one after another, while the job's other cores idle (a torch extension has few
translation units). `nvcc --threads N` compiles N targets at once; `nvcc_threads` picks N
within the job's share, so the machine is neither idle nor oversubscribed.
"""

from __future__ import annotations

__all__ = [
    "GB_PER_COMPILE",
    "GB_PER_NVCC_THREAD",
    "GB_PER_REMOTE_UNIT",
    "HostResources",
    "Slots",
    "device_sources",
    "device_targets",
    "host_resources",
    "nvcc_threads",
    "plan_slots",
]

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..model import BuildJob

# Peak resident memory of one compiler process, by the job's accelerator kind (measured on
# the example: c++ on torch/extension.h ~1.2 GB; nvcc for six archs ~2.5 GB), with headroom.
GB_PER_COMPILE = {"cpu": 2.0, "cuda": 4.0, "rocm": 4.0}
# Peak resident memory here of one unit a build server compiles: sccache runs the unit's
# preprocessing on this machine, and for a `.cu` file nvcc's cudafe++ too (measured on an
# xformers `.cu` with torch's headers: cudafe++ 1.3 GB, `gcc -E` 0.17 GB), with headroom.
GB_PER_REMOTE_UNIT = {"cpu": 0.5, "cuda": 1.5, "rocm": 1.5}
# What one more arch compiled at once adds to an nvcc process (cicc + ptxas of one arch of
# the example's kernel peak well under 1 GB; the host-side parse is shared), with headroom.
GB_PER_NVCC_THREAD = 1.0
# nvcc --threads appeared in CUDA 11.2 (older nvcc rejects the option).
NVCC_THREADS_SINCE = (11, 2)


@dataclass(frozen=True, kw_only=True)
class HostResources:
    cores: int
    memory_gb: float
    remote_slots: int = 0  # units a compile cluster takes at once (`--distribute`), 0: none


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
    memory_gb: float = 0.0  # memory of one job's share (the machine's / `concurrent`)


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
    # a cluster's units first (each holds only its preprocessing here), then what is left of
    # the memory for this machine's own compiles: with a cluster, its slots and this
    # machine's cores together (sccache compiles here what the cluster refuses)
    per_remote = max(GB_PER_REMOTE_UNIT[k] for k in kinds)
    remote = min(host.remote_slots, int(host.memory_gb // per_remote))
    local = min(host.cores, int((host.memory_gb - remote * per_remote) // per_compile))
    budget = max(1, local + remote)
    why = (
        f"{host.cores} core(s), {host.memory_gb:.0f} GB available / {per_compile:g} GB per compile"
    )
    if host.remote_slots:
        why = (
            f"{local} here ({why}) + {remote} on the cluster (its {host.remote_slots} slot(s), "
            f"{per_remote:g} GB each here)"
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
        memory_gb=host.memory_gb / conc,
    )


def device_sources(files: Sequence[Path]) -> int:
    """How many CUDA translation units (`.cu` files) a project's sources hold."""
    return sum(1 for f in files if f.suffix == ".cu")


def device_targets(arch_list: str) -> int:
    """Device-code compiles of one `.cu` file: one per arch, one more for each `+PTX`.

    >>> device_targets("7.5;8.0;8.6;9.0;10.0;12.0+PTX")
    7
    """
    archs = [a for a in re.split(r"[;\s,]+", arch_list.strip()) if a]
    return len(archs) + sum(1 for a in archs if a.upper().endswith("+PTX"))


def _version(text: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (text or "").split(".")[:2])
    except ValueError:
        return ()


def nvcc_threads(job: BuildJob, slots: Slots, *, device_sources: int) -> int:
    """`nvcc --threads` for `job`'s compiles (pure): 1 for jobs without CUDA device code.

    The job may run `slots.max_jobs` compiler processes. At most
    `min(max_jobs, device_sources)` of them are nvcc at once, so each nvcc gets an equal
    part of the share as threads: the example (one `.cu`, MAX_JOBS=2) compiles two of its
    seven targets at once; a project with many `.cu` files already fills the share through
    ninja and gets 1. Never more threads than targets (nvcc has nothing to run them on),
    and each extra thread must fit in the share's memory (`GB_PER_NVCC_THREAD`). Only the
    C++ files that compile beside the `.cu` files can exceed the share, briefly (they are
    few and short next to device code).
    """
    toolkit = job.toolkit
    if toolkit is None or toolkit.kind != "cuda" or device_sources <= 0:
        return 1
    if _version(toolkit.version) < NVCC_THREADS_SINCE:
        return 1
    nvccs = max(1, min(slots.max_jobs, device_sources))
    threads = min(device_targets(toolkit.arch_list), slots.max_jobs // nvccs)
    if slots.memory_gb > 0:
        spare = slots.memory_gb / nvccs - GB_PER_COMPILE["cuda"]
        threads = min(threads, 1 + int(max(0.0, spare) // GB_PER_NVCC_THREAD))
    return max(1, threads)
