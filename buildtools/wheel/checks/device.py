"""no-device-code and cpu-links-cuda: the wheel's GPU code matches the cell's accelerator.

A CUDA/ROCm cell must carry device code for every promised arch; a CPU cell must need no
library that only a CUDA/ROCm torch or a GPU machine has (the `device` groups of
`data/never_bundle.yaml`: torch-cuda, torch-rocm, cuda, rocm, driver).
"""

from __future__ import annotations

__all__ = ["CHECK", "CPU_LINKS_CUDA", "NO_DEVICE_CODE", "expected_archs"]

import re
from typing import Literal

from ...ecosystem import load_ecosystem
from ...model import Accelerator, Finding, Severity
from ..elf import strip_graft_hash
from .registry import Code, WheelCheck, WheelSubject, finding

NO_DEVICE_CODE = Code(
    name="no-device-code",
    summary="a CUDA/ROCm cell without device code, or without a promised arch",
)
CPU_LINKS_CUDA = Code(
    name="cpu-links-cuda",
    summary="a CPU cell whose extension needs a CUDA/ROCm/driver library (libcudart, libc10_cuda…)",
)

_ARCH_RE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d+)(?P<suffix>[af]?)(?P<ptx>\+PTX)?$", re.I)


def expected_archs(arch_list: str, kind: Literal["cuda", "rocm"]) -> frozenset[str]:
    """'7.5;8.0;12.0+PTX' → {sm_75, sm_80, sm_120, compute_120}; 'gfx90a;gfx942' for ROCm."""
    tokens = [t for t in re.split(r"[;,\s]+", arch_list.strip()) if t]
    out: set[str] = set()
    for token in tokens:
        if kind == "rocm":
            base = token.split(":", 1)[0].lower()
            if not re.fullmatch(r"gfx[0-9a-f]+", base):
                raise ValueError(f"{token!r} in {arch_list!r} is not a ROCm arch like 'gfx90a'")
            out.add(base)
            continue
        m = _ARCH_RE.match(token)
        if m is None:
            raise ValueError(
                f"{token!r} in {arch_list!r} is not a CUDA arch; expected e.g. '8.0', "
                "'9.0a' or '12.0+PTX'"
            )
        arch = f"{m['major']}{m['minor']}{m['suffix'].lower()}"
        out.add(f"sm_{arch}")
        if m["ptx"]:
            out.add(f"compute_{arch}")
    return frozenset(out)


def _cpu_links_cuda(subject: WheelSubject) -> list[Finding]:
    kb = subject.knowledge
    findings: list[Finding] = []
    for elf in subject.elves:
        if elf.grafted:
            continue
        linked = sorted(
            n
            for n in elf.info.needed
            if (rule := kb.never_bundle_rule(strip_graft_hash(n))) is not None and rule.device
        )
        if linked or elf.info.has_device_code:
            what = ", ".join(linked) if linked else "GPU device code"
            findings.append(
                finding(
                    CPU_LINKS_CUDA,
                    f"{elf.arcname} of a CPU cell needs {what}: it cannot load with a CPU "
                    "torch. Build the CPU cell against the CPU torch wheel "
                    "(--index-url https://download.pytorch.org/whl/cpu) without FORCE_CUDA.",
                    path=elf.arcname,
                    details=tuple(linked),
                )
            )
    return findings


def _check(subject: WheelSubject) -> list[Finding]:
    expect, wheel_name = subject.expect, subject.wheel.name
    try:
        acc = Accelerator.parse(expect.accelerator)
    except ValueError as exc:
        return [finding(NO_DEVICE_CODE, f"Expectation: {exc}", path=wheel_name)]
    if acc.kind == "cpu":
        return _cpu_links_cuda(subject)
    kind: Literal["cuda", "rocm"] = "cuda" if acc.kind == "cuda" else "rocm"
    own = [e for e in subject.elves if not e.grafted]
    codes = [e.info.cuda if kind == "cuda" else e.info.hip for e in own]
    present = [c for c in codes if c is not None]
    label = "CUDA" if kind == "cuda" else "ROCm/HIP"
    if not present:
        env = f"FORCE_CUDA=1 and {load_ecosystem().arch_variables[kind]}"
        return [
            finding(
                NO_DEVICE_CODE,
                f"No .so in this {expect.accelerator} wheel contains {label} device code: it "
                "was built CPU-only (setup.py probably gated the CUDAExtension on "
                "torch.cuda.is_available(), which is False on a build node without a GPU). "
                f"Decide on torch.version.{'cuda' if kind == 'cuda' else 'hip'} instead and set "
                f"{env}.",
                path=wheel_name,
                details=tuple(e.arcname for e in own),
            )
        ]
    found: set[str] = set()
    for code in present:
        found |= code.archs
    if not expect.arch_list:
        return []
    try:
        wanted = expected_archs(expect.arch_list, kind)
    except ValueError as exc:
        return [finding(NO_DEVICE_CODE, f"Expectation: {exc}", path=wheel_name)]
    missing = sorted(wanted - found)
    if not missing:
        return []
    complete = all(c.complete for c in present)
    var = load_ecosystem().arch_variables[kind]
    message = (
        f"The wheel's {label} device code lacks {', '.join(missing)} promised by "
        f"{var}={expect.arch_list!r} (found: {', '.join(sorted(found)) or 'none'}): GPUs of "
        f"those archs fail with 'no kernel image is available'. Set {var} in the build "
        "environment (buildtools sets it from data for the cell)."
    )
    return [
        finding(
            NO_DEVICE_CODE,
            message
            if complete
            else message + " Some device code could not be read "
            "(compressed), so this may be a false alarm.",
            path=wheel_name,
            severity=Severity.ERROR if complete else Severity.WARNING,
            details=(f"missing: {' '.join(missing)}", f"found: {' '.join(sorted(found))}"),
        )
    ]


CHECK = WheelCheck(name="device", codes=(NO_DEVICE_CODE, CPU_LINKS_CUDA), run=_check)
