"""no-device-code, extra-device-code and cpu-links-cuda: the wheel's GPU code is the cell's.

The archs a cell promises are the archs its wheel carries, compared both ways in each of
the wheel's own shared objects that carries device code of the cell's kind (a library a
repair grafted is not the project's): a promised cubin (sm_XX), promised PTX (compute_XX,
from `+PTX`) or ROCm target (gfxNNN) missing from one is an error (`no-device-code`);
device code the cell did not promise is a warning (`extra-device-code`) listing each arch,
its bytes and the object that holds it (`devicesize`), and an error under `arch_flags:
enforce` (a compile the wrapper never saw: a build without ninja calls nvcc itself). A project that passes its own arch
flags shows up as both: torch's cpp_extension then adds none from the cell's list
(`_get_cuda_arch_flags` returns none when an nvcc flag names an arch,
`_get_rocm_arch_flags` when one holds `--offload-arch`; torch 2.11), and
tests/integration/test_device_arch_truth.py builds such a project.

Arch names are compared exactly: `9.0a` promises sm_90a and `10.0f` sm_100f, and neither is
met by the plain sm_90 / sm_100, nor the plain promise by them. An arch-specific cubin runs
on its one capability only and a family cubin on its family only, with instructions a
plain cubin of that number must not use; which one a wheel carries is the project's
choice, and the matrix must say it (`wheel.coverage` decides which GPU runs which).
LTO IR (lto_XX) is never promised: in a shared object it is extra.

A CPU cell must need no library that only a CUDA/ROCm torch or a GPU machine has (the
`device` groups of `data/never_bundle.yaml`: torch-cuda, torch-rocm, cuda, rocm, driver).
"""

from __future__ import annotations

__all__ = ["CHECK", "CPU_LINKS_CUDA", "EXTRA_DEVICE_CODE", "NO_DEVICE_CODE", "expected_archs"]

import re
from collections.abc import Sequence
from typing import Literal

from ...ecosystem import load_ecosystem
from ...model import Accelerator, Finding, Severity
from ..devicesize import arch_sizes
from ..elf import DeviceCode, strip_graft_hash
from .elves import WheelElf
from .spec import Code, WheelCheck, WheelSubject, finding

NO_DEVICE_CODE = Code(
    name="no-device-code",
    summary="a CUDA/ROCm cell without device code, or a shared object without a promised arch or PTX",
)
EXTRA_DEVICE_CODE = Code(
    name="extra-device-code",
    summary="device code the cell did not promise (cubin, PTX, LTO IR, gfx target), with its bytes and the .so holding it",
    severity=Severity.WARNING,
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


_CUDA_VARIANT_RE = re.compile(r"^((?:sm|compute)_\d+)[af]?$")
_NUMBER_RE = re.compile(r"^(?:sm|compute|lto)_(\d+)|^gfx([0-9a-f]+)")
# where a project's own arch flags usually are, per kind
_OWN_FLAGS = {
    "cuda": "-gencode/-arch in setup.py, CUDA_ARCHITECTURES in CMake, or a build script",
    "rocm": "--offload-arch in setup.py, HIP_ARCHITECTURES/AMDGPU_TARGETS in CMake, or a "
    "build script",
}


def _order(arch: str) -> tuple[int, str]:
    """By number: sm_75 before sm_100, gfx90a before gfx942."""
    m = _NUMBER_RE.match(arch)
    number = int(m[1]) if m and m[1] else int(m[2], 16) if m and m[2] else 0
    return number, arch


def _named(archs: Sequence[str]) -> str:
    """'cubin sm_80 sm_90, PTX compute_90, LTO IR lto_80'; ROCm targets by name."""
    groups: dict[str, list[str]] = {"sm": [], "compute": [], "lto": [], "gfx": []}
    for arch in sorted(archs, key=_order):
        kind = arch.split("_", 1)[0] if "_" in arch else "gfx"
        groups.setdefault(kind, []).append(arch)
    label = {"sm": "cubin", "compute": "PTX", "lto": "LTO IR", "gfx": "target"}
    return ", ".join(f"{label.get(k, k)} {' '.join(v)}" for k, v in groups.items() if v)


def _variant_notes(missing: Sequence[str], found: frozenset[str]) -> list[str]:
    """What stands where a missing CUDA arch was promised: sm_90a for sm_90, sm_100 for
    sm_100f (ROCm targets have no such variants)."""
    notes: list[str] = []
    for arch in missing:
        m = _CUDA_VARIANT_RE.match(arch)
        if m is None:
            continue
        near = sorted(
            (a for a in found if (n := _CUDA_VARIANT_RE.match(a)) and n[1] == m[1] and a != arch),
            key=_order,
        )
        if near:
            notes.append(
                f"{' '.join(near)} is not {arch}: an arch-specific (a) or family (f) variant "
                "and the plain arch are different promises"
            )
    return notes


def _enforce(kind: Literal["cuda", "rocm"], accelerator: str) -> str:
    """The other remedy: the compiler wrapper (nvcc only) builds the cell's list instead."""
    if kind == "cuda":
        return (
            f"accelerators.{accelerator}.arch_flags: enforce to make the compiler wrapper "
            "replace the project's arch flags with the cell's list"
        )
    return "remove the project's own --offload-arch flags (arch_flags: enforce wraps nvcc only)"


def _remedy(kind: Literal["cuda", "rocm"], accelerator: str, var: str) -> str:
    return (
        f"Likely cause: the project passes its own arch flags ({_OWN_FLAGS[kind]}), and "
        f"torch's cpp_extension then ignores {var}. Set accelerators.{accelerator}.arch_list "
        f"to what the project really builds, or {_enforce(kind, accelerator)}."
    )


def _missing(
    elves: Sequence[tuple[WheelElf, DeviceCode]],
    wanted: frozenset[str],
    kind: Literal["cuda", "rocm"],
    subject: WheelSubject,
) -> list[Finding]:
    expect = subject.expect
    var = load_ecosystem().arch_variables[kind]
    label = "CUDA" if kind == "cuda" else "ROCm/HIP"
    parts: list[str] = []
    details: list[str] = []
    complete = True
    for elf, code in elves:
        missing = sorted(wanted - code.archs, key=_order)
        if not missing:
            continue
        complete &= code.complete
        found = sorted(code.archs, key=_order)
        carries = _named(found) if found else "no device code"
        if kind == "cuda" and not any(a.startswith("compute_") for a in found):
            carries += ", no PTX"
        notes = "".join(f"; {n}" for n in _variant_notes(missing, code.archs))
        parts.append(f"{elf.arcname} lacks {_named(missing)} (it carries {carries}{notes})")
        details += (
            f"{elf.arcname} missing: {' '.join(missing)}",
            f"{elf.arcname} found: {' '.join(found)}",
        )
    if not parts:
        return []
    ptx = any(a.startswith("compute_") for a in wanted)
    consequence = "GPUs of a missing arch fail with 'no kernel image is available'" + (
        "; without the promised PTX, so do GPUs newer than the newest cubin"
        if ptx and kind == "cuda"
        else ""
    )
    message = (
        f"The wheel's {label} device code is not what {var}={expect.arch_list!r} promised: "
        f"{'; '.join(parts)}. {consequence}. {_remedy(kind, expect.accelerator, var)}"
    )
    if not complete:
        message += " Some device code could not be read (compressed), so this may be a false alarm."
    return [
        finding(
            NO_DEVICE_CODE,
            message,
            path=subject.wheel.name,
            severity=Severity.ERROR if complete else Severity.WARNING,
            details=details,
        )
    ]


def _extra(
    elves: Sequence[tuple[WheelElf, DeviceCode]],
    wanted: frozenset[str],
    kind: Literal["cuda", "rocm"],
    subject: WheelSubject,
) -> list[Finding]:
    expect = subject.expect
    var = load_ecosystem().arch_variables[kind]
    label = "CUDA" if kind == "cuda" else "ROCm/HIP"
    parts: list[str] = []
    details: list[str] = []
    total = 0
    for elf, code in elves:
        extra = sorted(code.archs - wanted, key=_order)
        if not extra:
            continue
        sizes = arch_sizes(code)
        listed = []
        for arch in extra:
            size = sizes.get(arch)
            listed.append(f"{_named([arch])} ({size if size else 'size unknown'})")
            total += size.stored if size else 0
            details.append(f"{elf.arcname}: {arch} {size.stored if size else '?'} bytes")
        parts.append(f"{elf.arcname} carries {', '.join(listed)}")
    if not parts:
        return []
    if expect.arch_flags == "enforce":  # the wrapper was to build the list and nothing else
        message = (
            f"accelerators.{expect.accelerator}.arch_flags is enforce, yet the wheel carries "
            f"{label} device code {var}={expect.arch_list!r} did not promise, {total} bytes in "
            f"all: {'; '.join(parts)}. Some compile did not go through the wrapper: torch's "
            "cpp_extension calls nvcc through PYTORCH_NVCC only in its ninja build (a setup.py "
            "with BuildExtension.with_options(use_ninja=False), or a CMake build, calls nvcc "
            "itself). Build with ninja, or remove the project's own arch flags."
        )
        return [
            finding(
                EXTRA_DEVICE_CODE,
                message,
                path=subject.wheel.name,
                severity=Severity.ERROR,
                details=details,
            )
        ]
    message = (
        f"The wheel carries {label} device code "
        f"{var}={expect.arch_list!r} did not promise, {total} bytes in all: "
        f"{'; '.join(parts)}. The project likely compiles archs of its own "
        f"({_OWN_FLAGS[kind]}): list them in accelerators.{expect.accelerator}.arch_list "
        f"if the wheel should promise them, or {_enforce(kind, expect.accelerator)}."
    )
    return [finding(EXTRA_DEVICE_CODE, message, path=subject.wheel.name, details=details)]


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
    carrying = [
        (e, code)
        for e in own
        if (code := e.info.cuda if kind == "cuda" else e.info.hip) is not None
    ]
    label = "CUDA" if kind == "cuda" else "ROCm/HIP"
    if not carrying:
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
    if not expect.arch_list:
        return []
    try:
        wanted = expected_archs(expect.arch_list, kind)
    except ValueError as exc:
        return [finding(NO_DEVICE_CODE, f"Expectation: {exc}", path=wheel_name)]
    return _missing(carrying, wanted, kind, subject) + _extra(carrying, wanted, kind, subject)


CHECK = WheelCheck(
    name="device", codes=(NO_DEVICE_CODE, EXTRA_DEVICE_CODE, CPU_LINKS_CUDA), run=_check
)
