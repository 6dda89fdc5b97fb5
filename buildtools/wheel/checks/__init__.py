"""Static checks of a built wheel against the torch it targets (CPU only, no import).

`check_wheel` opens the wheel, reads every ELF in it with `buildtools.wheel.elf`, and compares
what it finds with the target torch installation(s) and with what the job promised. One
module per check; each declares the codes it reports (`spec.Code`), and `CHECKS` lists
them in the order their findings are reported:

==================  ======================================================================
code                what it catches
==================  ======================================================================
bundled-torch-lib   a torch/c10/CUDA/ROCm runtime library grafted into the wheel
undefined-symbol    a dynamic symbol neither torch, the allowed system libraries,
                    libpython nor the wheel itself provides (fails at import)
unstable-symbol     a stable-ABI wheel imports a torch/c10 symbol outside the stable
                    surface (C++ API, or a C function no stable C header declares)
shim-too-new        a stable-ABI wheel imports a shim its oldest allowed torch does not
                    export (names the first release that has it)
no-device-code      a CUDA/ROCm cell without device code, or a shared object without a
                    promised arch or PTX
extra-device-code   device code the cell did not promise (cubin, PTX, LTO IR, gfx
                    target), with its bytes and the .so holding it
cpu-links-cuda      a CPU cell whose extension needs a CUDA/ROCm/driver library
                    (libcudart, libc10_cuda…)
abi-mismatch        std::string symbols in the other C++ ABI than the target torch's
metadata-pin        Requires-Dist torch missing or not the expected spec
local-version       the version lacks the expected local label
platform-tag        a tag weaker than promised, or symbol versions beyond the tag
python-coverage     a promised cell's Python that the wheel's tag does not cover
elf-machine         a shared object built for another architecture than the platform
                    tag names
build-record        the wheel's buildtools.json missing or invalid
wheel-size          a wheel above the upload limit (warning) or the release-asset limit
                    (error), with its CUDA device code per arch
variant-properties  a variant wheel whose label or properties are not its build
                    record's and device code's
==================  ======================================================================

Which libraries are torch's, the GPU runtime's or the driver's is read from
`data/never_bundle.yaml` through the knowledge base, the list the repair step excludes.
"""

from __future__ import annotations

__all__ = [
    "CHECKS",
    "CHECK_CODES",
    "Expectation",
    "TorchTarget",
    "check_binaries",
    "check_wheel",
    "device_code",
    "expected_archs",
    "has_errors",
    "is_grafted",
    "load_torch_target",
]

import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ...knowledge import Knowledge, load_knowledge
from ...model import Finding, Severity
from ..elf import ElfInfo
from . import (
    abi,
    buildrecord,
    bundled,
    device,
    machine,
    metadata,
    platform,
    pythons,
    size,
    stable,
    symbols,
    variantclaims,
)
from .device import expected_archs
from .elves import WheelElf, describe_device_code, extract_elves, is_grafted
from .expect import Expectation
from .facts import target_facts
from .spec import BinaryCheck, Check, Subject, WheelSubject
from .target import TorchTarget, load_torch_target

# The registry, in report order.
CHECKS: tuple[Check, ...] = (
    bundled.CHECK,
    symbols.CHECK,
    stable.CHECK,
    device.CHECK,
    abi.CHECK,
    metadata.CHECK,
    platform.CHECK,
    pythons.CHECK,
    machine.CHECK,
    buildrecord.CHECK,
    size.CHECK,
    variantclaims.CHECK,
)
CHECK_CODES: tuple[str, ...] = tuple(code.name for check in CHECKS for code in check.codes)


def _run(check: Check, subject: Subject) -> list[Finding]:
    if isinstance(check, BinaryCheck):
        findings = check.run(subject)
    elif not isinstance(subject, WheelSubject):
        return []  # a wheel check has nothing to judge on installed binaries
    else:
        findings = check.run(subject)
    own = {code.name for code in check.codes}
    stray = sorted({f.code for f in findings} - own)
    if stray:
        raise RuntimeError(f"check {check.name!r} reported codes it does not register: {stray}")
    return findings


def check_binaries(
    binaries: Sequence[tuple[str, ElfInfo]],
    *,
    targets: Sequence[TorchTarget],
    knowledge: Knowledge | None = None,
) -> list[Finding]:
    """bundled-torch-lib, undefined-symbol and abi-mismatch findings for a set of ELF files.

    `binaries` are (path relative to the install root, ELF facts): the shared objects of
    one wheel or of one installed distribution (what `doctor` checks). Only the checks
    that need no wheel file and no promises run (`BinaryCheck`s).
    """
    subject = Subject(
        elves=tuple(WheelElf(arcname=a, info=i, grafted=is_grafted(a)) for a, i in binaries),
        targets=tuple(target_facts(t) for t in targets),
        knowledge=knowledge or load_knowledge(),
    )
    return [f for check in CHECKS for f in _run(check, subject)]


def check_wheel(
    wheel: Path,
    *,
    targets: Sequence[TorchTarget],
    expect: Expectation,
    knowledge: Knowledge | None = None,
) -> list[Finding]:
    """Every finding about `wheel` against each target torch and the job's promises."""
    facts = tuple(target_facts(t) for t in targets)
    kb = knowledge or load_knowledge()
    with tempfile.TemporaryDirectory(prefix="buildtools-check-") as tmp:
        subject = WheelSubject(
            elves=tuple(extract_elves(wheel, Path(tmp))),
            targets=facts,
            knowledge=kb,
            wheel=wheel,
            expect=expect,
        )
        return [f for check in CHECKS for f in _run(check, subject)]


def device_code(wheel: Path) -> list[tuple[str, str]]:
    """(path in the wheel, its device code in words) of each of the wheel's own shared
    objects (not the libraries a repair grafted): what a pass of the checks found."""
    with tempfile.TemporaryDirectory(prefix="buildtools-check-") as tmp:
        return [
            (e.arcname, describe_device_code(e))
            for e in extract_elves(wheel, Path(tmp))
            if not e.grafted
        ]


def has_errors(findings: Iterable[Finding]) -> bool:
    """True when any finding is an error."""
    return any(f.severity is Severity.ERROR for f in findings)
