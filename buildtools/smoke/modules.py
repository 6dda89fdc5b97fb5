"""Every compiled module of a wheel, loaded by name: what to import, and what a failure means.

Importing a package proves little about its compiled modules: packages guard the optional
ones (`try: from . import _cuda except ImportError: _cuda = None`, torchsort's pattern), so
a module that cannot load (a missing library, an undefined symbol) is swallowed and the
import succeeds. The smoke child therefore imports each Python extension module of the
wheel by its own name after the package, and a failure fails the wheel unless matrix.yaml
declares that module optional (`project.optional_modules`).

Which files are extension modules comes from the wheel's file list and their ELF dynamic
symbols: a `.so` exporting `PyInit_<name>` is imported as `<package path>.<name>`. Other
shared objects (a library auditwheel grafted into `<pkg>.libs/`, one the package loads with
ctypes or `torch.ops.load_library`) are not importable by name; they are listed with the
reason, and whether the package's import mapped them.
"""

from __future__ import annotations

__all__ = [
    "CompiledModule",
    "ModuleOutcome",
    "child_spec",
    "compiled_modules",
    "describe_load_error",
    "install_path",
    "load_outcomes",
]

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from ..wheel.checks.elves import WheelElf
from ..wheel.elf import demangle, python_init_symbol

if TYPE_CHECKING:  # child imports report, which imports this module
    from .child import ChildReport

# <dist>-<version>.data/purelib|platlib/… installs into site-packages like the root
_DATA_LIB_RE = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/(?P<rest>.+)$")
_CPYTHON_SUFFIX_RE = re.compile(r"\.cpython-(?P<major>\d)(?P<minor>\d+)[a-z]*-[^/]*\.so$")
_EXTENSION_SUFFIX_RE = re.compile(r"\.(?:cpython-[^/]*|abi3)\.so$")
_UNDEFINED_RE = re.compile(r"undefined symbol: (?P<symbol>[A-Za-z0-9_.$@]+)")
_MISSING_LIB_RE = re.compile(
    r"(?P<lib>[A-Za-z0-9_.+-]+\.so[0-9.]*): cannot open shared object file"
)


@dataclass(frozen=True, kw_only=True)
class CompiledModule:
    """One shared object of a wheel: its module name when importable, else why not."""

    arcname: str
    name: str | None  # dotted module name; None when no name imports it
    importable: bool  # a Python extension module (exports PyInit_<name>) for this Python
    reason: str | None = None  # why it is not imported (library, other Python, not a package)
    # a fault found without loading it, which fails the wheel: a module file whose
    # PyInit_ is another name's (Python refuses to import it)
    error: str | None = None

    @property
    def label(self) -> str:
        return self.name or self.arcname


def _module_path(arcname: str) -> tuple[str, ...] | None:
    """The install path of a wheel member (…data/platlib/ stripped); None outside site-packages."""
    m = _DATA_LIB_RE.match(arcname)
    rest = m["rest"] if m else arcname
    parts = PurePosixPath(rest).parts
    if not m and parts and parts[0].endswith(".data"):
        return None  # scripts, headers, data: not on sys.path
    return parts


def _misnamed(base: str, dotted: str, exported: frozenset[str]) -> str | None:
    """Why a file named as an extension module cannot be imported by its name: it exports
    another module's init function (renamed after it was built), or None. A plain `libX.so`
    exporting some PyInit_ is a library that embeds a module, not a module file."""
    inits = sorted(s for s in exported if s.startswith(("PyInit_", "PyInitU_")))
    tagged = _EXTENSION_SUFFIX_RE.search(base) is not None
    if not inits or not (tagged or not base.startswith("lib")):
        return None
    own = python_init_symbol(base)
    return (
        f"exports {', '.join(inits[:3])}, not {own}: Python cannot import it as {dotted} "
        "(ImportError: dynamic module does not define module export function); a module "
        "file renamed after it was built"
    )


def compiled_modules(elves: Sequence[WheelElf], *, python: str) -> list[CompiledModule]:
    """The wheel's shared objects in file order, each with its module name or its reason.

    `python` ("3.12") is the interpreter the wheel is installed for: a `.cpython-311-…so`
    does not import on 3.12 and is listed, not imported. A name that is not ASCII is found
    by its PEP 489 init function (`PyInitU_…`); a module file whose init function names
    another module is an error (`error`), not a library.
    """
    out: list[CompiledModule] = []
    for elf in elves:
        arc = elf.arcname
        parts = _module_path(arc)
        if parts is None:
            continue
        base = parts[-1]
        if elf.grafted:
            out.append(
                CompiledModule(
                    arcname=arc,
                    name=None,
                    importable=False,
                    reason="a library auditwheel grafted: loaded as a dependency of the modules",
                )
            )
            continue
        stem = base.split(".", 1)[0]
        packages = parts[:-1]
        dotted = ".".join([*packages, stem])
        if not base.endswith(".so") or not all(p.isidentifier() for p in [*packages, stem]):
            out.append(
                CompiledModule(
                    arcname=arc,
                    name=None,
                    importable=False,
                    reason="a shared library, not a module name (loaded with ctypes or as a "
                    "dependency)",
                )
            )
            continue
        init = python_init_symbol(base)
        if init not in elf.info.exported:
            wrong = _misnamed(base, dotted, elf.info.exported)
            out.append(
                CompiledModule(
                    arcname=arc,
                    name=dotted,
                    importable=False,
                    reason=wrong
                    or f"no {init}: not a Python extension module (the package loads "
                    "it with ctypes or torch.ops.load_library, or it is a dependency)",
                    error=wrong,
                )
            )
            continue
        suffix = _CPYTHON_SUFFIX_RE.search(base)
        if suffix is not None and f"{suffix['major']}.{suffix['minor']}" != python:
            out.append(
                CompiledModule(
                    arcname=arc,
                    name=dotted,
                    importable=False,
                    reason=f"built for CPython {suffix['major']}.{suffix['minor']}; this env "
                    f"runs {python}",
                )
            )
            continue
        out.append(CompiledModule(arcname=arc, name=dotted, importable=True))
    return out


def child_spec(
    listed: Sequence[CompiledModule],
    *,
    packages: Sequence[str],
    site: Path,
    members: Sequence[str],
) -> dict[str, Any]:
    """The smoke child's argument: each package with the files the wheel installs for it
    (None when the wheel's file list is unknown), each compiled module with the file it
    must come from (under `site`, the site-packages the wheel was installed into), and the
    shared objects that are not imported, to look for in the process's maps."""
    installed = [install_path(m) for m in members]
    return {
        "packages": [
            {"name": name, "paths": _package_paths(name, installed, site) if members else None}
            for name in packages
        ],
        "compiled": [
            {"name": m.name, "file": str(site / install_path(m.arcname))}
            for m in listed
            if m.importable and m.name
        ],
        "watch": [install_path(m.arcname) for m in listed if not m.importable],
    }


def _package_paths(name: str, installed: Sequence[str], site: Path) -> dict[str, list[str]]:
    """Where the wheel puts module `name` under `site`: its package directory (when it
    installs files under one) and its module files (`name.py`, `name.<suffix>.so`)."""
    rel = name.replace(".", "/")
    dirs = [str(site / rel)] if any(p.startswith(rel + "/") for p in installed) else []
    files = sorted(
        str(site / p)
        for p in installed
        if p == rel + ".py"
        or (p.startswith(rel + ".") and p.endswith(".so") and "/" not in p[len(rel) :])
    )
    return {"dirs": dirs, "files": files}


def describe_load_error(message: str) -> str:
    """The loader's message, with C++ symbols demangled and a missing library named."""
    text = message.strip()
    extra: list[str] = []
    for m in _UNDEFINED_RE.finditer(text):
        symbol = m["symbol"].split("@", 1)[0]
        readable = demangle(symbol)
        if readable != symbol:
            extra.append(f"undefined symbol {readable}")
    for m in _MISSING_LIB_RE.finditer(text):
        extra.append(f"missing library {m['lib']}")
    return f"{text} ({'; '.join(dict.fromkeys(extra))})" if extra else text


@dataclass(frozen=True, kw_only=True)
class ModuleOutcome:
    """What happened to one compiled module in the smoke's child."""

    arcname: str
    name: str | None
    outcome: Literal["loaded", "failed", "optional-failed", "skipped"]
    detail: str | None = None  # the loader's message (demangled), or why it was skipped
    mapped: bool | None = None  # skipped libraries: did the package's import map it?

    @property
    def label(self) -> str:
        return self.name or self.arcname

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.arcname,
            "module": self.name,
            "outcome": self.outcome,
            "detail": self.detail,
            "mapped": self.mapped,
        }


def load_outcomes(
    listed: Sequence[CompiledModule],
    child: ChildReport,
    optional: frozenset[str],
) -> tuple[tuple[ModuleOutcome, ...], list[str], list[str]]:
    """(outcome per shared object, failures that fail the wheel, notes on optional ones).

    `listed`: `compiled_modules`' answer; `child`: what the smoke's child announced
    (`loaded`, `load_failed`, the `watched` files it mapped). A module is loaded only when
    the child saw the wheel's own file come back from its import (see `child_spec`)."""
    outcomes: list[ModuleOutcome] = []
    failures: list[str] = []
    notes: list[str] = []
    watched = set(child.watched or ())
    for m in listed:
        arcname, name = m.arcname, m.name
        if m.reason is not None and m.error is None:
            mapped = None if child.watched is None else install_path(arcname) in watched
            outcomes.append(
                ModuleOutcome(
                    arcname=arcname, name=name, outcome="skipped", detail=m.reason, mapped=mapped
                )
            )
            continue
        assert name is not None
        error = m.error or child.load_failed.get(name)
        if error is None and name in child.loaded:
            outcomes.append(ModuleOutcome(arcname=arcname, name=name, outcome="loaded"))
            continue
        detail = describe_load_error(error) if error is not None else "not reached"
        if name in optional:
            outcomes.append(
                ModuleOutcome(arcname=arcname, name=name, outcome="optional-failed", detail=detail)
            )
            notes.append(f"optional module {name} did not load: {detail}")
        else:
            outcomes.append(
                ModuleOutcome(arcname=arcname, name=name, outcome="failed", detail=detail)
            )
            failures.append(f"{name} ({arcname}): {detail}")
    return tuple(outcomes), failures, notes


def install_path(arcname: str) -> str:
    """Where a wheel member lands relative to site-packages (…data/platlib/ stripped)."""
    first, _, rest = arcname.partition("/")
    if first.endswith(".data") and rest.split("/", 1)[0] in ("purelib", "platlib"):
        return rest.split("/", 1)[1]
    return arcname
