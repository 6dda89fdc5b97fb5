"""wheel-size: a wheel too large for where it is published, and what its device code weighs.

Above PyPI's default upload limit (100 MiB) a wheel is a warning: a project may have a
larger limit, and the find-links index has none. Above GitHub's limit for one release
asset (2 GiB) it is an error: the release workflow cannot publish it. Both thresholds are
configurable (matrix.yaml `build.size_warning`, `build.size_error`). The finding lists the
CUDA device code per arch (sm_90, compute_120, …) across the wheel's shared objects, so the
maintainer sees what dropping an arch, or `build.cuda_compress: size`, would save.
"""

from __future__ import annotations

__all__ = ["CHECK", "WHEEL_SIZE", "device_code_by_arch", "human"]

from collections.abc import Iterable

from ...ecosystem import load_ecosystem
from ...model import Finding, Severity
from .elves import WheelElf
from .spec import Code, WheelCheck, WheelSubject, finding

WHEEL_SIZE = Code(
    name="wheel-size",
    summary="a wheel above the upload limit (warning) or the release-asset limit (error), with its CUDA device code per arch",
    severity=Severity.WARNING,
)


def human(size: int) -> str:
    """'1.5 GiB', '120.0 MiB', '4.2 KiB', '12 B'."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"


def device_code_by_arch(elves: Iterable[WheelElf]) -> dict[str, int]:
    """CUDA device code bytes per arch, over every non-grafted shared object."""
    total: dict[str, int] = {}
    for elf in elves:
        if elf.grafted or elf.info.cuda is None:
            continue
        for arch, size in elf.info.cuda.sizes:
            total[arch] = total.get(arch, 0) + size
    return total


def _arch_key(arch: str) -> tuple[int, str]:
    digits = "".join(ch for ch in arch.split("_", 1)[-1] if ch.isdigit())
    return (int(digits or 0), arch)


def _check(subject: WheelSubject) -> list[Finding]:
    wheel, expect = subject.wheel, subject.expect
    limits = load_ecosystem().size_limits
    warn = expect.size_warning or limits["pypi_upload"]
    error = expect.size_error or limits["github_release_asset"]
    size = wheel.stat().st_size
    if size <= warn:
        return []
    archs = device_code_by_arch(subject.elves)
    listed = ", ".join(f"{a} {human(archs[a])}" for a in sorted(archs, key=_arch_key))
    per_arch = f"; device code per arch: {listed}" if listed else ""
    over_error = size > error
    limit = (
        f"above the {human(error)} a GitHub release asset may be (build.size_error)"
        if over_error
        else f"above PyPI's default {human(warn)} upload limit (build.size_warning)"
    )
    remedy = (
        "drop archs from the accelerator's arch_list (keep +PTX on the newest), or set "
        "build.cuda_compress: size (CUDA >= 12.8)"
    )
    return [
        finding(
            WHEEL_SIZE,
            f"{wheel.name} is {human(size)}, {limit}{per_arch}: {remedy}",
            path=wheel.name,
            severity=Severity.ERROR if over_error else Severity.WARNING,
            details=tuple(f"{a}={archs[a]}" for a in sorted(archs, key=_arch_key)),
        )
    ]


CHECK = WheelCheck(name="wheel-size", codes=(WHEEL_SIZE,), run=_check)
