"""Device code against the GPUs torch sees: which cubin or PTX runs where.

A package can import cleanly and still fail at its first kernel launch with 'no kernel
image is available for execution on the device'; the arch lists in its ELF files say so
in advance (the rule: `wheel.coverage.device_code_runs`, shared with smoke).
"""

from __future__ import annotations

__all__ = ["check_devices", "device_code_runs"]

from collections.abc import Sequence

from ..model import Finding, Severity
from ..torchinstall import GpuInfo
from ..wheel.archcoverage import device_code_runs
from ..wheel.elf import ElfInfo


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
