"""The planner: Matrix → cells → BuildJobs. Pure: it never starts a process.

`cells` decides which cells a plan builds, `jobs` groups them into BuildJobs per ABI
mode and fills each job's fields, `derive` holds the small derivations both use (version
labels, Requires-Dist, arch lists), which the doctor shares.
"""

from __future__ import annotations

__all__ = [
    "MatrixCells",
    "Plan",
    "RangeResolution",
    "RemovedCell",
    "Selection",
    "ServedTorch",
    "abi_window",
    "arch_list_from_torch",
    "build_candidates",
    "cuda_split",
    "current_local_version",
    "local_version",
    "matrix_cells",
    "needs_current",
    "plan",
    "torch_index_for",
    "window_build",
]

from dataclasses import dataclass, field

from ..knowledge import Knowledge
from ..matrix.config import MatrixFile
from ..model import BuildJob, Cell
from ..torchinstall import TorchInstall
from .cells import MatrixCells, RemovedCell, Selection, matrix_cells, needs_current, select_cells
from .derive import (
    abi_window,
    arch_list_from_torch,
    build_candidates,
    current_local_version,
    local_version,
    window_build,
)
from .jobs import group_jobs, torch_index_for
from .ranges import RangeResolution, ServedTorch
from .split import cuda_split


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What will be built: the cells, the jobs covering them, and what was dropped."""

    profile: str | None
    cells: tuple[Cell, ...]
    jobs: tuple[BuildJob, ...]
    removed: tuple[RemovedCell, ...]
    excluded: int
    # every cell the matrix names, whatever the profile (the coverage map's rows and columns)
    matrix: MatrixCells = field(default_factory=MatrixCells)
    # what each range of axes.torch resolved to, and why other releases were left out
    ranges: tuple[RangeResolution, ...] = ()

    @property
    def builds_saved(self) -> int:
        return len(self.cells) - len(self.jobs)

    def job_for(self, cell_id: str) -> BuildJob:
        for job in self.jobs:
            if cell_id in job.cell_ids:
                return job
        raise KeyError(cell_id)


# the matrix's default profile, no --only, no --torch
_DEFAULT_SELECTION = Selection()


def plan(
    mf: MatrixFile,
    kb: Knowledge,
    *,
    host_python: str,
    current: TorchInstall | None = None,
    selection: Selection = _DEFAULT_SELECTION,
    served: ServedTorch | None = None,
    offline_reason: str | None = None,
) -> Plan:
    """Expand axes, apply include/exclude/profile/--only, drop impossible cells, group into jobs.

    `current` is the torch of the running environment (host facts, probed by the caller),
    what `torch: current` stands for; `selection` which cells to keep; `served` the torch
    releases the package index serves (a host fact the caller fetched; None: a torch range
    resolves against the knowledge base alone, `offline_reason` saying why).
    """
    selected = select_cells(
        mf,
        kb,
        host_python=host_python,
        current=current,
        selection=selection,
        served=served,
        offline_reason=offline_reason,
    )
    return Plan(
        profile=selected.profile,
        cells=selected.cells,
        jobs=tuple(group_jobs(mf, kb, selected.cells, current)),
        removed=selected.removed,
        excluded=selected.excluded,
        matrix=selected.matrix,
        ranges=selected.ranges,
    )
