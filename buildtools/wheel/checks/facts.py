"""What a target torch installation provides (SONAMEs, exported symbols), cached per install.

Reading libtorch_cpu.so's 75k exports takes seconds; a matrix checks many wheels against the
same torch, so the exports are cached by (path, mtime, size) of its libraries.
"""

from __future__ import annotations

__all__ = ["TargetFacts", "target_facts"]

import functools
from dataclasses import dataclass
from pathlib import Path

from ..elf import inspect_elf
from ..repair import scan_torch_libs
from .target import TorchTarget


@functools.lru_cache(maxsize=16)
def _exports_cached(key: tuple[tuple[str, int, int], ...]) -> frozenset[str]:
    out: set[str] = set()
    for path, _mtime, _size in key:
        out |= inspect_elf(Path(path)).exported
    return frozenset(out)


@dataclass(frozen=True, kw_only=True)
class TargetFacts:
    """The SONAMEs and dynamic exports of one target torch and the libraries it depends on."""

    target: TorchTarget
    sonames: frozenset[str]
    exports: frozenset[str]


def target_facts(target: TorchTarget) -> TargetFacts:
    """Scan `target`'s installation (torch/lib and the nvidia/ROCm wheels torch requires)."""
    libs = scan_torch_libs(target.site_packages)
    key = tuple((str(f), (st := f.stat()).st_mtime_ns, st.st_size) for f in libs.files)
    return TargetFacts(target=target, sonames=frozenset(libs.sonames), exports=_exports_cached(key))
