"""The shared objects an installed distribution carries, and the torch libraries they need.

A distribution is a torch extension when one of its ELF files NEEDs one of torch's own
libraries (libtorch*, libc10*…); those files come from its RECORD or, for an editable
install, from its source tree. A needed torch or CUDA/ROCm runtime library that this
torch does not ship is a finding. Which library is whose: `data/never_bundle.yaml`.
"""

from __future__ import annotations

__all__ = ["binaries_of", "check_needed", "links_torch"]

import os
from collections.abc import Sequence
from pathlib import Path

from ..knowledge import load_knowledge
from ..model import Finding, Severity
from ..probe.hostenv import DistInfo
from ..wheel.elf import ElfInfo, inspect_elf, is_elf, strip_graft_hash

_SKIP_DIRS = {
    ".git",
    ".nox",
    ".tox",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    "wheelhouse",
    "dist",
    "build",
}
_MAX_SOURCE_FILES = 20000


def _source_shared_objects(root: Path) -> list[Path]:
    """The .so files of an editable install's source tree (skipping VCS, envs and dists)."""
    found: list[Path] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        for name in filenames:
            seen += 1
            if name.endswith(".so") or ".so." in name:
                found.append(Path(dirpath) / name)
        if seen > _MAX_SOURCE_FILES:
            break
    return sorted(found)


def binaries_of(dist: DistInfo) -> list[tuple[str, ElfInfo]]:
    """The ELF files of a distribution (RECORD, plus an editable install's source tree), by path."""
    paths: list[tuple[Path, Path]] = [(p, dist.location) for p in dist.shared_objects]
    src = dist.source_dir
    if dist.editable and src is not None and src.is_dir():
        paths += [(p, src) for p in _source_shared_objects(src)]
    out: list[tuple[str, ElfInfo]] = []
    seen: set[Path] = set()
    for path, root in paths:
        if path in seen or not is_elf(path):
            continue
        seen.add(path)
        try:
            info = inspect_elf(path)
        except (ValueError, OSError):
            continue
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            rel = str(path)
        out.append((rel, info))
    return out


def links_torch(binaries: Sequence[tuple[str, ElfInfo]]) -> bool:
    """Whether one of the binaries NEEDs a torch library: the mark of a torch extension."""
    return any(
        (rule := load_knowledge().never_bundle_rule(strip_graft_hash(n))) is not None
        and rule.torch_own
        for _, info in binaries
        for n in info.needed
    )


def check_needed(
    binaries: Sequence[tuple[str, ElfInfo]], torch_sonames: frozenset[str], torch_label: str
) -> list[Finding]:
    """Torch and CUDA/ROCm runtime libraries the package needs that this torch does not ship."""
    own = {Path(rel).name for rel, _ in binaries} | {
        info.soname for _, info in binaries if info.soname
    }
    findings: list[Finding] = []
    for rel, info in binaries:
        for needed in info.needed:
            if needed in own or strip_graft_hash(needed) in torch_sonames:
                continue
            # data/never_bundle.yaml says which libraries are torch's or its GPU runtime's
            rule = load_knowledge().never_bundle_rule(strip_graft_hash(needed))
            if rule is None:
                continue  # a system library: the loader's business, not torch's
            if rule.torch_own:
                severity = Severity.ERROR
                message = (
                    f"{rel} needs {needed}, which {torch_label} does not ship: importing it "
                    f"fails with '{needed}: cannot open shared object file'. It was built "
                    "for a torch of another accelerator (a CUDA/ROCm build needs "
                    "libc10_cuda/libtorch_cuda or their HIP twins)."
                )
            else:
                severity = Severity.WARNING
                message = (
                    f"{rel} needs {needed}, which neither {torch_label} nor the packages it "
                    "depends on provide: it loads only where the system has that library "
                    "on the loader's path (usually another CUDA/ROCm version than torch's)."
                )
            findings.append(
                Finding(
                    code="missing-library",
                    severity=severity,
                    message=message,
                    path=rel,
                    details=(f"library: {needed}",),
                )
            )
    return findings
