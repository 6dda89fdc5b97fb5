"""undefined-symbol: a dynamic symbol nothing provides where the wheel will be imported.

A symbol resolves when a target torch (or a library it depends on), the wheel itself, or
libpython exports it; versioned symbols of the system libraries auditwheel allows (GLIBC,
GLIBCXX…) are the platform tag's business (`checks.platform`), not this check's.
"""

from __future__ import annotations

__all__ = ["CHECK", "UNDEFINED_SYMBOL"]

from ...model import Finding
from ..elf import demangle
from .policy import system_version_prefixes, version_prefix
from .spec import BinaryCheck, Code, Subject, finding

UNDEFINED_SYMBOL = Code(
    name="undefined-symbol",
    summary="a dynamic symbol neither torch, the allowed system libraries, libpython nor "
    "the wheel itself provides (fails at import)",
)

_LIBPYTHON_PREFIXES = ("Py", "_Py")
_MAX_SYMBOLS_PER_FILE = 50


def _check(subject: Subject) -> list[Finding]:
    findings: list[Finding] = []
    in_wheel: set[str] = set()
    for elf in subject.elves:
        in_wheel |= elf.info.exported
    system = system_version_prefixes()
    for elf in subject.elves:
        if elf.grafted:
            continue
        missing: dict[str, list[str]] = {}
        for sym in elf.info.undefined:
            if sym.version is not None and version_prefix(sym.version)[0] in system:
                continue
            if sym.name.startswith(_LIBPYTHON_PREFIXES) or sym.name in in_wheel:
                continue
            lacking = [f.target.label for f in subject.targets if sym.name not in f.exports]
            if lacking:
                missing[sym.name] = lacking
        for i, (name, lacking) in enumerate(
            sorted(missing.items(), key=lambda kv: demangle(kv[0]))
        ):
            if i == _MAX_SYMBOLS_PER_FILE:
                rest = len(missing) - _MAX_SYMBOLS_PER_FILE
                findings.append(
                    finding(
                        UNDEFINED_SYMBOL,
                        f"{elf.arcname} has {rest} more undefined symbols not listed here; "
                        "it was most likely built against another torch version.",
                        path=elf.arcname,
                    )
                )
                break
            pretty = demangle(name)
            lacking_txt = ", ".join(lacking)
            findings.append(
                finding(
                    UNDEFINED_SYMBOL,
                    f"{elf.arcname} needs {pretty}, which {lacking_txt} does not export: importing "
                    "it there fails with 'undefined symbol'. Build against the torch this wheel "
                    "targets, or avoid this API (it is not in that torch version).",
                    path=elf.arcname,
                    details=(f"mangled: {name}", f"missing from: {lacking_txt}"),
                )
            )
    return findings


CHECK = BinaryCheck(name="symbols", codes=(UNDEFINED_SYMBOL,), run=_check)
