"""The CUDA-major split of stable-ABI wheels, in words for `buildtools plan` (pure).

A stable-ABI wheel serves a window of torch releases, but only for one CUDA major: its
device code and the CUDA runtime it links are the major's (`libcudart.so.12` is not
`libcudart.so.13`). PyPI's default torch moved from CUDA 12 to CUDA 13 at 2.11 (torch.yaml
`pypi_cuda`), so a window such as `>=2.10` needs a CUDA 12 wheel and a CUDA 13 wheel, and
`pip install torch` users of a release reach only the wheel of its PyPI CUDA. This says, per
CUDA major and platform, which torch releases each planned wheel serves, which releases of
the windows it leaves out and why (the knowledge base's reason), which releases' PyPI builds
it serves, and when two wheels of one major are planned where one would do (a build for an
older CUDA minor runs with a newer runtime of its major: NVIDIA's minor-version
compatibility, R42 in docs/sources.md).
"""

from __future__ import annotations

__all__ = ["cuda_split"]

from collections import defaultdict
from collections.abc import Sequence

from packaging.version import Version

from ..knowledge import Knowledge
from ..model import BuildJob
from .cells import RemovedCell


def _major(version: str | None) -> str:
    return (version or "").split(".")[0]


def _span(torches: Sequence[str]) -> str:
    ordered = sorted(set(torches), key=Version)
    return ", ".join(ordered) if len(ordered) <= 3 else f"{ordered[0]} … {ordered[-1]}"


def _are(torches: Sequence[str], what: str) -> str:
    return f"{_span(torches)} {'is a' if len(torches) == 1 else 'are'} {what}" + (
        "" if len(torches) == 1 else "s"
    )


def cuda_split(
    jobs: Sequence[BuildJob], removed: Sequence[RemovedCell], kb: Knowledge
) -> list[str]:
    """The plan's lines on its stable-ABI CUDA wheels (none when it plans no such wheel)."""
    stable = [j for j in jobs if j.abi == "stable" and j.accelerator.kind == "cuda"]
    if not stable:
        return []
    window: dict[str, set[str]] = defaultdict(set)  # platform → every torch of its windows
    for job in jobs:
        if job.abi == "stable":
            window[job.platform].update(job.torch_versions)
    by_major: dict[tuple[str, str], list[BuildJob]] = defaultdict(list)
    for job in stable:
        by_major[(_major(job.accelerator.version), job.platform)].append(job)
    lines = ["CUDA-major split of the stable-ABI wheels (one wheel per CUDA major and platform):"]
    for (major, platform), group in sorted(by_major.items()):
        group.sort(key=lambda j: Version(j.accelerator.version or "0"))
        lines.append(f"  CUDA {major}, {platform}:")
        for job in group:
            lines.append(
                f"    {job.id} ({job.accelerator.name}) serves torch {_span(job.torch_versions)}"
            )
            for torch in sorted(window[platform] - set(job.torch_versions), key=Version):
                why = next(
                    (
                        r.reason
                        for r in removed
                        if r.cell.torch == torch
                        and r.cell.accelerator == job.accelerator.name
                        and r.cell.platform == platform
                    ),
                    "not in this job's cells (a profile, --only or an exclude rule)",
                )
                lines.append(f"      left out torch {torch}: {why}")
        served = sorted({t for j in group for t in j.torch_versions}, key=Version)
        pypi = {t: kb.torch_release(t).pypi_cuda for t in served}
        mine = [t for t, cuda in pypi.items() if _major(cuda) == major]
        other = [t for t, cuda in pypi.items() if _major(cuda) != major]
        if platform == "linux_x86_64":
            if mine:
                lines.append(
                    f"    `pip install torch` from PyPI: {_are(mine, f'CUDA {major} build')}, "
                    "served here"
                )
            if other:
                cudas = ", ".join(sorted({str(pypi[t]) for t in other}))
                lines.append(
                    f"    `pip install torch` from PyPI: {_are(other, f'CUDA {cudas} build')}: "
                    "their users "
                    f"need another major's wheel; this one serves those releases' "
                    f"{'/'.join(j.accelerator.name for j in group)} builds of PyTorch's index"
                )
        if len(group) > 1:
            oldest = group[0]
            lines.append(
                f"    {len(group)} wheels of one CUDA major: {oldest.accelerator.name}'s serves "
                f"the releases of the others too (CUDA minor-version compatibility: a build "
                f"for CUDA {oldest.accelerator.version} runs with a newer CUDA {major} "
                "runtime); the others may leave axes.accelerator"
            )
    return lines
