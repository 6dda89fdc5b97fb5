"""Arch flags a project hard-codes, and the archs its build really compiles per CUDA version.

torch's `cpp_extension` adds its own `-gencode` flags from TORCH_CUDA_ARCH_LIST only when
the extension's nvcc flags hold none: a flag with `arch` in it (`-gencode arch=…`,
`-arch=sm_90`, `--gpu-architecture`) makes `_get_cuda_arch_flags` return nothing, and
hipcc's `--offload-arch` does the same to PYTORCH_ROCM_ARCH (`_get_rocm_arch_flags`;
torch/utils/cpp_extension.py, read in torch 2.13.0). A setup.py that sets
TORCH_CUDA_ARCH_LIST itself overwrites the cell's value; CMake's CUDA_ARCHITECTURES decides
for a CMake build. Then the matrix's `arch_list` is not what gets compiled.

`archscan` finds the places (file:line, the flag as written, the condition around it as
written); this module says what they compile for one CUDA version without running anything:
a condition on the CUDA version (`bare_metal_version >= Version("12.8")`,
`CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8`) is evaluated, a ROCm/HIP branch is
not the CUDA build, a `SKIP…` switch is off, and anything else is reported as written and
taken to hold (the build's default path), said so in the output.
"""

from __future__ import annotations

__all__ = [
    "ArchFlag",
    "Atom",
    "BuiltArchs",
    "arch_version",
    "built_for",
    "describe_flags",
]

import re
from dataclasses import dataclass
from typing import Literal

from packaging.version import InvalidVersion, Version

# One conjunct of a flag's condition: the CUDA version compared with a release, a value
# known for a CUDA build (True/False), a condition init cannot evaluate (as written, and
# whether it must hold or fail), or a disjunction of conjunctions (`a or b`, `not (a and b)`).
# A condition init cannot evaluate is taken to hold (the build's default path), the same
# one everywhere: an `else` of it is then not taken.
Atom = (
    tuple[Literal["cuda"], str, str]
    | tuple[Literal["const"], bool]
    | tuple[Literal["text"], str, bool]
    | tuple[Literal["or"], tuple[tuple["Atom", ...], ...]]
)

_OPS = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
# a target as nvcc names it: sm_90a (device code), compute_90 (PTX), lto_90 (LTO IR)
_TARGET = re.compile(r"(sm|compute|lto)_(\d{2,3})([af]?)")
SPECIAL = ("native", "all", "all-major")
_MAX_LISTED = 40  # flags printed one per line; the rest by place


@dataclass(frozen=True, kw_only=True)
class ArchFlag:
    """One place of a project that decides which device code is compiled."""

    file: str  # relative to the repository
    line: int
    form: str  # -gencode, -arch, --offload-arch, CUDA_ARCHITECTURES, TORCH_CUDA_ARCH_LIST
    text: str  # the flag as written (cut short)
    kind: Literal["cuda", "rocm"]
    # nvcc targets (sm_80, compute_90, sm_90a), gfx targets, native/all/all-major, or a
    # value init cannot know ("{os.getenv('X', '80')}", "${ARCHS}")
    targets: tuple[str, ...]
    when: tuple[Atom, ...] = ()  # conjuncts, all of which must hold
    condition: str | None = None  # the enclosing conditions as written
    # the build runs it (setup.py, pyproject.toml, the CMake files of a CMake build), or a
    # script a person may run (a .sh file, CMake files of a build that is not CMake)
    in_build: bool = True
    overrides: bool = True  # False: os.environ.setdefault (the cell's value wins)
    # its archs are computed when it builds ({num}) by a setup.py that reads
    # TORCH_CUDA_ARCH_LIST: likely the cell's list, as setup.py filters it
    follows_list: bool = False

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def holds(self, cuda: str) -> bool | None:
        """Whether the flag is in a CUDA `cuda` build: True, False, or None (it is, if the
        conditions init cannot evaluate hold: `assumed` names them)."""
        value, assumed = _all(self.when, cuda)
        return None if value and assumed else value

    def assumed(self, cuda: str) -> tuple[str, ...]:
        """The conditions init took to hold (or to fail, `not (…)`) for `cuda`, as written."""
        return _all(self.when, cuda)[1]


def _all(atoms: tuple[Atom, ...], cuda: str) -> tuple[bool, tuple[str, ...]]:
    """(the conjunction's value with unknown conditions assumed, the ones that were)."""
    assumed: list[str] = []
    for atom in atoms:
        value, used = _atom(atom, cuda)
        if not value and not used:
            return False, ()  # known to fail, whatever was assumed
        assumed += used
        if not value:
            return False, tuple(assumed)
    return True, tuple(dict.fromkeys(assumed))


def _atom(atom: Atom, cuda: str) -> tuple[bool, tuple[str, ...]]:
    if atom[0] == "const":
        return atom[1], ()
    if atom[0] == "text":
        return atom[2], (atom[1] if atom[2] else f"not ({atom[1]})",)
    if atom[0] == "or":
        results = [_all(branch, cuda) for branch in atom[1]]
        certain = [r for r in results if r[0] and not r[1]]
        if certain:
            return True, ()
        return any(r[0] for r in results), tuple(a for r in results for a in r[1])
    _, op, release = atom
    try:
        have, want = Version(cuda), Version(release)
    except InvalidVersion:
        return True, (f"CUDA {op} {release}",)
    if release.count(".") == 0:  # `.major >= 12`: compare the major alone
        have = Version(str(have.major))
    return bool(_OPS[op](have, want)), ()


def arch_version(number: str) -> str:
    """nvcc's arch number as TORCH_CUDA_ARCH_LIST writes it: 90 → 9.0, 121 → 12.1, 90a → 9.0a."""
    digits = number.rstrip("af")
    return f"{digits[:-1]}.{digits[-1]}{number[len(digits) :]}"


def _order(version: str) -> tuple[int, int, str]:
    major, _, rest = version.partition(".")
    minor = rest.rstrip("af")
    return (int(major), int(minor or 0), rest[len(minor) :])


@dataclass(frozen=True, kw_only=True)
class BuiltArchs:
    """What a CUDA build of the project compiles, as far as its files say."""

    cuda: str
    flags: tuple[ArchFlag, ...]  # the flags that decide it (holding or maybe holding)
    sass: tuple[str, ...] = ()  # device code, TORCH_CUDA_ARCH_LIST form (8.0, 9.0a)
    ptx: tuple[str, ...] = ()  # PTX
    listed: str | None = None  # a TORCH_CUDA_ARCH_LIST setup.py sets itself, as written
    special: tuple[str, ...] = ()  # native, all, all-major, or values known only when it builds
    assumed: tuple[str, ...] = ()  # conditions init took to hold, as written

    @property
    def known(self) -> bool:
        """The archs are fixed by the files (no native/all or computed value)."""
        return not self.special

    def arch_list(self) -> str | None:
        """The archs as TORCH_CUDA_ARCH_LIST (`+PTX` where PTX is emitted too); None when the
        files do not fix them."""
        if not self.known:
            return None
        if self.listed is not None:
            return self.listed
        entries = [v + ("+PTX" if v in self.ptx else "") for v in self.sass]
        return ";".join(entries) or None

    def ptx_only(self) -> tuple[str, ...]:
        """PTX emitted without device code of the same arch: TORCH_CUDA_ARCH_LIST cannot say
        it (X.Y+PTX promises sm_XY too), so the list leaves it out."""
        return tuple(v for v in self.ptx if v not in self.sass)

    def describe(self) -> str:
        """'7.5;8.0;9.0' or why the files do not say."""
        found = self.arch_list()
        if found is None:
            what = ", ".join(self.special)
            return f"not fixed by the files ({what}: decided when it builds)"
        extra = f" (and PTX only for {', '.join(self.ptx_only())})" if self.ptx_only() else ""
        return found + extra


def built_for(flags: tuple[ArchFlag, ...], cuda: str) -> BuiltArchs | None:
    """What a CUDA `cuda` build compiles given the project's `flags`; None when none of them
    decides it (the cell's TORCH_CUDA_ARCH_LIST then does)."""
    live = [
        (f, f.holds(cuda))
        for f in flags
        if f.kind == "cuda" and f.in_build and f.overrides and not f.follows_list
    ]
    live = [(f, h) for f, h in live if h is not False]
    nvcc = [(f, h) for f, h in live if f.form != "TORCH_CUDA_ARCH_LIST"]
    chosen = nvcc or [(f, h) for f, h in live if f.form == "TORCH_CUDA_ARCH_LIST"]
    if not chosen:
        return None
    sass: set[str] = set()
    ptx: set[str] = set()
    special: list[str] = []
    listed: str | None = None
    for flag, _ in chosen:
        if flag.form == "TORCH_CUDA_ARCH_LIST":
            listed = ";".join(flag.targets)  # the last assignment wins
            continue
        for target in flag.targets:
            found = _TARGET.fullmatch(target)
            if found is None:
                special.append(target)
            elif found[1] == "sm":
                sass.add(arch_version(found[2] + found[3]))
            elif found[1] == "compute":
                ptx.add(arch_version(found[2] + found[3]))
    if listed is not None and not nvcc:
        # an empty list is no list: cpp_extension then asks the machine's GPUs ("native")
        entries = [t for t in listed.split(";") if t]
        special = [t for t in entries if t.startswith(("{", "$"))]
        if not entries:
            special = [SPECIAL[0]]
    assumed = tuple(dict.fromkeys(c for f, h in chosen if h is None for c in f.assumed(cuda)))
    return BuiltArchs(
        cuda=cuda,
        flags=tuple(f for f, _ in chosen),
        sass=tuple(sorted(sass, key=_order)),
        ptx=tuple(sorted(ptx, key=_order)),
        listed=listed if not nvcc else None,
        special=tuple(dict.fromkeys(special)),
        assumed=assumed,
    )


def lines_of(flags: tuple[ArchFlag, ...]) -> str:
    """'setup.py:180,182,187; CMakeLists.txt:12': the places, file by file."""
    by_file: dict[str, list[str]] = {}
    for flag in flags:
        by_file.setdefault(flag.file, []).append(str(flag.line))
    return "; ".join(f"{f}:{','.join(dict.fromkeys(ls))}" for f, ls in by_file.items())


def describe_flags(flags: tuple[ArchFlag, ...], cudas: tuple[str, ...]) -> list[str]:
    """The lines `init` prints: every flag with its place and condition, then what a build of
    each CUDA version compiles."""
    if not flags:
        return []
    out = [
        "  arch flags set by the project (torch's cpp_extension then ignores "
        "TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH):"
    ]
    for flag in flags[:_MAX_LISTED]:
        note = "" if flag.in_build else "   [not part of this build: a script, or CMake unused]"
        if not flag.overrides:
            note = "   [setdefault: the cell's value wins]"
        when = f"   if {flag.condition}" if flag.condition else ""
        targets = " ".join(flag.targets) or "(empty)"
        out.append(f"    {flag.where}: {flag.text}  -> {targets}{when}{note}")
    if len(flags) > _MAX_LISTED:
        rest = flags[_MAX_LISTED:]
        out.append(f"    … and {len(rest)} more: {lines_of(rest)}")
    for cuda in cudas:
        built = built_for(flags, cuda)
        derived = [f for f in flags if f.follows_list and f.holds(cuda) is not False]
        if built is None and derived:
            out.append(
                f"  CUDA {cuda}: computed when it builds ({lines_of(tuple(derived))}) from "
                "TORCH_CUDA_ARCH_LIST, which setup.py reads: the cell's arch_list, as far as "
                "setup.py keeps it"
            )
            continue
        if built is None:
            out.append(f"  CUDA {cuda}: none of them applies (the cell's arch_list is compiled)")
            continue
        out.append(f"  CUDA {cuda} build compiles: {built.describe()}")
        if built.assumed:
            out.append(f"    assuming (init cannot evaluate it): {'; '.join(built.assumed)}")
    rocm = [f for f in flags if f.kind == "rocm" and f.in_build]
    if rocm:
        targets = ", ".join(dict.fromkeys(t for f in rocm for t in f.targets))
        out.append(f"  ROCm build compiles: {targets} ({lines_of(tuple(rocm))})")
    return out
