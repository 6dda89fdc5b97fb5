"""unstable-symbol and shim-too-new: a stable-ABI wheel imports the stable surface of its floor.

A wheel built for the LibTorch stable ABI (`abi: stable`) claims every torch its
`Requires-Dist` allows. That holds only when every torch symbol its shared objects import is
a C shim of the stable surface (`data/stable_abi.json`: the shims each release's stable C
headers declare and its libraries export), and when each of those shims exists in the
oldest torch the metadata allows. A C++ symbol of c10/ATen/torch (`c10::detail::
torchCheckFail`) resolves today and may be gone, or mean something else, in the next
release; a shim newer than the floor makes the wheel fail with 'undefined symbol' on the
older releases it claims. Both are judged from the facts alone, without any torch installed:
the floor is the oldest release of the knowledge base the wheel's `Requires-Dist` admits.
Where a target torch is installed (a build, `buildtools check --torch`), what it exports
also counts as torch's when a name alone does not tell.
"""

from __future__ import annotations

__all__ = ["CHECK", "SHIM_TOO_NEW", "UNSTABLE_SYMBOL", "wheel_floor"]

import re
from collections.abc import Iterable, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ...knowledge import Knowledge
from ...knowledge.stableabi import ShimSymbol, StableAbiFacts, load_stable_abi, shim_like
from ...model import Finding
from ..elf import UndefinedSymbol, demangle
from ..meta import torch_requirements
from .elves import WheelElf
from .policy import system_version_prefixes, version_prefix
from .spec import Code, WheelCheck, WheelSubject, finding

UNSTABLE_SYMBOL = Code(
    name="unstable-symbol",
    summary="a stable-ABI wheel imports a torch/c10 symbol outside the stable surface (C++ "
    "API, or a C function no stable C header declares)",
)
SHIM_TOO_NEW = Code(
    name="shim-too-new",
    summary="a stable-ABI wheel imports a shim its oldest allowed torch does not export "
    "(names the first release that has it)",
)

_LIBPYTHON_PREFIXES = ("Py", "_Py")
_TORCH_NAMESPACE = re.compile(r"(?<![\w:])(c10|at|torch|caffe2|aoti)::")
_TORCH_MANGLED = re.compile(r"N(3c10|2at|5torch|6caffe2)\d")
_MAX_PER_FILE = 50


def wheel_floor(
    pins: Sequence[str], kb: Knowledge
) -> tuple[str | None, str | None, SpecifierSet | None]:
    """(oldest, newest, specifier) of the torch releases the knowledge base knows that the
    wheel's `Requires-Dist: torch…` lines admit; (None, None, None) without a readable pin."""
    spec = SpecifierSet()
    found = False
    for pin in pins:
        try:
            req = Requirement(pin)
        except InvalidRequirement:
            continue
        if req.name.lower() == "torch":
            spec &= req.specifier
            found = True
    if not found:
        return None, None, None
    releases = sorted(
        (Version(p) for rel in kb.torch.values() for p in rel.patches), key=lambda v: v
    )
    allowed = [v for v in releases if spec.contains(v, prereleases=False)]
    if not allowed:
        return None, None, spec
    return str(allowed[0]), str(allowed[-1]), spec


def _torch_owned(
    sym: UndefinedSymbol, pretty: str, torch_exports: Iterable[frozenset[str]]
) -> str | None:
    """Why `sym` is torch's (None: nothing says it is)."""
    if sym.name.startswith("_Z"):
        match = _TORCH_NAMESPACE.search(pretty) if pretty != sym.name else None
        if match is not None or _TORCH_MANGLED.search(sym.name):
            space = match[1] if match is not None else "torch"
            return (
                f"C++ API of {space}:: (its mangled name and the layout behind it may change "
                "in any release; the stable ABI is C shims plus inline headers)"
            )
    elif shim_like(sym.name):
        return "a C function of torch that no stable C header declares"
    if _runtime_library(pretty):
        return None  # torch's libraries export copies of libstdc++ templates; not torch's API
    if any(sym.name in exports for exports in torch_exports):
        return "exported by the target torch, outside the stable surface"
    return None


_SPECIAL = ("typeinfo name for ", "typeinfo for ", "vtable for ", "VTT for ", "guard variable for ")
_RUNTIME = ("std::", "__gnu_cxx::", "__cxxabiv1::", "operator new", "operator delete")


def _runtime_library(pretty: str) -> bool:
    """Whether a demangled name is the C++ runtime's (libstdc++, its ABI), wherever it resolves."""
    for prefix in _SPECIAL:
        pretty = pretty.removeprefix(prefix)
    return pretty.startswith(_RUNTIME)


def _shim_problem(shim: ShimSymbol, facts: StableAbiFacts, floor: str, newest: str) -> str | None:
    if not facts.exports_in(shim, floor):
        return "too new"
    if shim.until is not None and Version(newest) > Version(shim.until):
        return "dropped"
    return None


def _remedy(shim: ShimSymbol, facts: StableAbiFacts, floor: str) -> str:
    release = facts.release(floor)
    target = (
        f"TORCH_TARGET_VERSION={release.abi_version}"
        if release and release.abi_version
        else (f"TORCH_TARGET_VERSION for torch {floor}")
    )
    since = Version(shim.since)
    how = (
        "the inline stable API then leaves it out"
        if shim.inline is not None or shim.guard is not None
        else "then avoid calling it"
    )
    return (
        f"build with -D{target} ({how}), or raise the floor to torch>={since.major}.{since.minor}"
    )


def _check(subject: WheelSubject) -> list[Finding]:
    if subject.expect.abi != "stable":
        return []
    facts = load_stable_abi()
    wheel = subject.wheel.name
    pins = torch_requirements(subject.wheel)
    floor, newest, spec = wheel_floor(pins, subject.knowledge)
    allows = f"Requires-Dist {', '.join(pins)}" if pins else "no Requires-Dist on torch"
    system = system_version_prefixes()
    in_wheel: set[str] = set()
    for elf in subject.elves:
        in_wheel |= elf.info.exported
    exports = [t.exports for t in subject.targets]
    findings: list[Finding] = []
    floor_known = floor is not None and Version(floor) >= Version(facts.oldest)
    for elf in subject.elves:
        if elf.grafted:
            continue
        found = _scan(elf, in_wheel, system, exports, facts)
        shims, foreign = found
        for i, (sym, why) in enumerate(foreign):
            if i == _MAX_PER_FILE:
                findings.append(_more(elf, len(foreign) - i, UNSTABLE_SYMBOL))
                break
            pretty = demangle(sym.name)
            findings.append(
                finding(
                    UNSTABLE_SYMBOL,
                    f"{elf.arcname} imports {pretty}: {why}. A stable-ABI wheel may import "
                    "only the C shims of the stable surface; use torch::stable / "
                    "torch::headeronly (or a shim) instead.",
                    path=elf.arcname,
                    details=(f"mangled: {sym.name}",) if pretty != sym.name else (),
                )
            )
        if shims and not floor_known:
            findings.append(
                finding(
                    SHIM_TOO_NEW,
                    f"{elf.arcname} imports {len(shims)} stable shims, and {wheel} allows "
                    f"{'torch ' + floor if floor else 'any torch'} ({allows}): the stable-ABI "
                    f"facts start at torch {facts.oldest}, the first release with the stable "
                    f"ABI; set Requires-Dist torch>={Version(facts.oldest).major}."
                    f"{Version(facts.oldest).minor} or later.",
                    path=elf.arcname,
                )
            )
            continue
        assert floor is not None and newest is not None
        bad = [(s, p) for s in shims if (p := _shim_problem(s, facts, floor, newest))]
        for i, (shim, problem) in enumerate(bad):
            if i == _MAX_PER_FILE:
                findings.append(_more(elf, len(bad) - i, SHIM_TOO_NEW))
                break
            guard = f", guard TORCH_VERSION_{shim.guard.replace('.', '_')}" if shim.guard else ""
            if problem == "too new":
                message = (
                    f"{elf.arcname} imports {shim.name}, a stable shim first in torch "
                    f"{shim.since} ({shim.header}{guard}); {wheel} allows torch {floor} "
                    f"({allows}), where loading it fails with 'undefined symbol': "
                    f"{_remedy(shim, facts, floor)}."
                )
            else:
                message = (
                    f"{elf.arcname} imports {shim.name}, a stable shim last in torch "
                    f"{shim.until}; {wheel} allows torch {newest} ({allows}), which no longer "
                    f"exports it: cap the range below it or stop calling it."
                )
            findings.append(
                finding(
                    SHIM_TOO_NEW,
                    message,
                    path=elf.arcname,
                    details=(
                        f"first in: torch {shim.since} ({shim.library})",
                        f"floor: torch {floor} ({spec})",
                    ),
                )
            )
    return findings


def _scan(
    elf: WheelElf,
    in_wheel: set[str],
    system: frozenset[str],
    exports: list[frozenset[str]],
    facts: StableAbiFacts,
) -> tuple[list[ShimSymbol], list[tuple[UndefinedSymbol, str]]]:
    """(the stable shims `elf` imports, its torch imports outside the surface with why)."""
    shims: list[ShimSymbol] = []
    foreign: list[tuple[UndefinedSymbol, str]] = []
    for sym in elf.info.undefined:
        if sym.version is not None and version_prefix(sym.version)[0] in system:
            continue
        if sym.name.startswith(_LIBPYTHON_PREFIXES) or sym.name in in_wheel:
            continue
        shim = facts.symbol(sym.name)
        if shim is not None:
            shims.append(shim)
            continue
        why = _torch_owned(sym, demangle(sym.name), exports)
        if why is not None:
            foreign.append((sym, why))
    foreign.sort(key=lambda f: demangle(f[0].name))
    shims.sort(key=lambda s: (Version(s.since), s.name), reverse=True)
    return shims, foreign


def _more(elf: WheelElf, rest: int, code: Code) -> Finding:
    return finding(
        code,
        f"{elf.arcname} has {rest} more such imports, not listed here.",
        path=elf.arcname,
    )


CHECK = WheelCheck(name="stable", codes=(UNSTABLE_SYMBOL, SHIM_TOO_NEW), run=_check)
