"""Device code against the GPUs torch sees: which cubin or PTX runs where.

A package can import cleanly and still fail at its first kernel launch with 'no kernel
image is available for execution on the device'; the arch lists in its ELF files say so
in advance.
"""

from __future__ import annotations

__all__ = ["check_devices", "device_code_runs"]

import re
from collections.abc import Sequence
from typing import Literal

from ..model import Finding, Severity
from ..torchinstall import GpuInfo
from ..wheel.elf import DeviceCode, ElfInfo

_ARCH_RE = re.compile(r"^(?P<kind>sm|compute|lto)_(?P<digits>\d{2,3})(?P<suffix>[af]?)$")


def _arch_tuple(digits: str) -> tuple[int, int]:
    return int(digits[:-1]), int(digits[-1])


def device_code_runs(code: DeviceCode, gpu: GpuInfo) -> Literal["native", "ptx", "no"]:
    """Whether device code runs on `gpu`: a matching cubin, only via PTX JIT, or not at all.

    A cubin sm_XY runs on the same major with minor >= Y; sm_XYa only on exactly X.Y;
    sm_XYf on its family (same major, minor >= Y). PTX compute_XY is JIT-compiled for any
    GPU of capability >= X.Y. HIP code objects match their gfx target exactly.
    """
    if code.kind == "hip":
        return "native" if gpu.gcn_arch and gpu.arch in code.archs else "no"
    if gpu.capability is None:
        return "no"
    have = gpu.capability
    result: Literal["native", "ptx", "no"] = "no"
    for arch in code.archs:
        m = _ARCH_RE.match(arch)
        if m is None or m["kind"] == "lto":
            continue
        want = _arch_tuple(m["digits"])
        suffix = m["suffix"]
        if suffix == "a":
            fits = want == have
        else:  # plain and family-specific: same major (cubin) or older (PTX)
            fits = want[0] == have[0] and want[1] <= have[1]
            if m["kind"] == "compute" and not suffix:
                fits = want <= have
        if not fits:
            continue
        if m["kind"] == "sm":
            return "native"
        result = "ptx"
    return result


def check_devices(
    binaries: Sequence[tuple[str, ElfInfo]], gpus: Sequence[GpuInfo]
) -> list[Finding]:
    """A finding per binary and visible GPU that has no cubin for it (PTX only, or nothing)."""
    findings: list[Finding] = []
    for rel, info in binaries:
        for gpu in gpus:
            code = info.hip if gpu.gcn_arch else info.cuda
            if code is None:
                continue
            runs = device_code_runs(code, gpu)
            have = ", ".join(sorted(code.archs)) or "none"
            if runs == "native":
                continue
            if runs == "ptx":
                findings.append(
                    Finding(
                        code="no-device-code",
                        severity=Severity.INFO,
                        message=f"{rel} has no binary code for GPU {gpu.index} ({gpu.name}, "
                        f"{gpu.arch}); its PTX is JIT-compiled at first use (slow start, cached "
                        "afterwards).",
                        path=rel,
                        details=(f"device code: {have}",),
                    )
                )
                continue
            findings.append(
                Finding(
                    code="no-device-code",
                    severity=Severity.ERROR if code.complete else Severity.WARNING,
                    message=f"{rel} has no device code for GPU {gpu.index} ({gpu.name}, "
                    f"{gpu.arch}): its kernels fail with 'no kernel image is available for "
                    f"execution on the device' (it carries: {have})."
                    + ("" if code.complete else " Part of it is compressed and unread."),
                    path=rel,
                    details=(f"device code: {have}", f"gpu: {gpu.arch}"),
                )
            )
    return findings
