"""The LibTorch stable ABI per torch release, as data: which C shims exist since when.

`data/stable_abi.json` is written by `ci/refresh-stable-abi.py` from the released wheels
themselves (their stable C headers and the dynamic symbol tables of `libtorch_cpu.so` and
`libtorch_cuda.so`, read by range requests) and is read here, validated, so that the
stable-ABI check of a wheel needs no torch installed. One row per shim: the library that
exports it, the first release of the facts that exports it (`since`), the last one when a
later release dropped it (`until`), the stable C header that declares it with the
`TORCH_FEATURE_VERSION` guard of its declaration, and the first release whose inline C++
(`torch/csrc/stable`, `torch/headeronly`) calls it (`inline`). A shim a header declares
that no Linux library of the release exports (the MPS and XPU ones) is not a row.
"""

from __future__ import annotations

__all__ = [
    "STABLE_ABI_PATH",
    "FactsLibrary",
    "FactsRelease",
    "ReleaseInput",
    "ShimSymbol",
    "StableAbiFacts",
    "dump_facts",
    "load_stable_abi",
    "merge",
]

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..errors import KnowledgeError
from ..jsonfields import decode_json
from .load import DATA_DIR
from .shimheaders import Declaration

STABLE_ABI_PATH = DATA_DIR / "stable_abi.json"
_MAX_BYTES = 4 << 20

ReleaseVersion = Annotated[str, StringConstraints(pattern=r"^\d+\.\d+\.\d+$")]
Symbol = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
Library = Annotated[str, StringConstraints(pattern=r"^lib[\w.+-]+\.so(\.\d+)*$")]


def _key(version: str) -> Version:
    return Version(version)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FactsLibrary(_Model):
    """One library read from a release's wheel: the member, its size and CRC-32 as the
    wheel's directory gives them, its dynamic exports and how many are shims."""

    member: str = Field(min_length=1)
    size: int = Field(ge=0)
    crc32: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8}$")]
    exports: int = Field(ge=0)
    shims: int = Field(ge=0)


class FactsRelease(_Model):
    """Where one release's facts were read: the wheel (name, URL, the index's sha256), the
    ABI version its headers announce, the libraries read and the shims declared."""

    version: ReleaseVersion
    wheel: str = Field(min_length=1)
    url: str = Field(pattern=r"^https?://")
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    abi_version: Annotated[str, StringConstraints(pattern=r"^0x[0-9a-f]{16}$")] | None
    libraries: tuple[FactsLibrary, ...] = Field(min_length=1)
    declared: int = Field(ge=0)


class ShimSymbol(_Model):
    """One C shim of the stable surface (see the module)."""

    name: Symbol
    library: Library
    since: ReleaseVersion
    until: ReleaseVersion | None = None
    header: str = Field(min_length=1)
    guard: ReleaseVersion | None = None
    inline: ReleaseVersion | None = None


class _Document(_Model):
    about: str = Field(min_length=1)
    source: str = Field(min_length=1)
    platform: str = Field(min_length=1)
    releases: tuple[FactsRelease, ...] = Field(min_length=1)
    symbols: tuple[ShimSymbol, ...]


class StableAbiFacts:
    """The validated facts: releases oldest first, shims by name."""

    def __init__(self, document: _Document, *, path: Path) -> None:
        self.path = path
        self.about = document.about
        self.source = document.source
        self.platform = document.platform
        self.releases: tuple[FactsRelease, ...] = document.releases
        self.versions: tuple[str, ...] = tuple(r.version for r in document.releases)
        self.symbols: Mapping[str, ShimSymbol] = {s.name: s for s in document.symbols}

    @property
    def oldest(self) -> str:
        return self.versions[0]

    @property
    def newest(self) -> str:
        return self.versions[-1]

    def symbol(self, name: str) -> ShimSymbol | None:
        """The shim row of `name`, or None when it is no shim of any release here."""
        return self.symbols.get(name)

    def release(self, version: str) -> FactsRelease | None:
        return next((r for r in self.releases if r.version == version), None)

    def exports_in(self, shim: ShimSymbol, version: str) -> bool:
        """Whether `version` (a release of the facts, or a patch between two of them) exports it."""
        v = _key(version)
        return _key(shim.since) <= v and (shim.until is None or v <= _key(shim.until))


def _problems(path: Path, exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        out.append(f"{path}: {where.lstrip('.') or '(top)'}: {err['msg']}")
    return out


def _cross_check(doc: _Document, path: Path) -> list[str]:
    problems: list[str] = []
    versions = [r.version for r in doc.releases]
    if versions != sorted(set(versions), key=_key):
        problems.append(f"{path}: releases: must be sorted oldest first, each once")
    known = set(versions)
    names: set[str] = set()
    for i, s in enumerate(doc.symbols):
        where = f"{path}: symbols[{i}] ({s.name})"
        if s.name in names:
            problems.append(f"{where}: listed twice")
        names.add(s.name)
        for field in ("since", "until", "inline"):
            value = getattr(s, field)
            if value is not None and value not in known:
                problems.append(f"{where}: {field}: {value} is not one of the releases")
        if s.until is not None and _key(s.until) < _key(s.since):
            problems.append(f"{where}: until: {s.until} is before since {s.since}")
    return problems


def _read(path: Path) -> StableAbiFacts:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise KnowledgeError(f"{path}: cannot read the stable-ABI facts: {exc.strerror}") from None
    if len(raw) > _MAX_BYTES:
        raise KnowledgeError(f"{path}: larger than {_MAX_BYTES} bytes; not the facts file")
    try:  # one shim per row: a schema bounds the depth it reads
        plain = decode_json(raw, what=str(path), max_bytes=_MAX_BYTES, max_depth=None)
    except ValueError as exc:
        raise KnowledgeError(f"{path}: not valid JSON: {exc}") from None
    try:
        doc = _Document.model_validate(plain)
    except ValidationError as exc:
        problems = _problems(path, exc)
    else:
        problems = _cross_check(doc, path)
    if problems:
        raise KnowledgeError(
            "invalid stable-ABI facts (refresh them: python ci/refresh-stable-abi.py):\n  "
            + "\n  ".join(problems)
        )
    return StableAbiFacts(doc, path=path)


@functools.cache
def _default() -> StableAbiFacts:
    return _read(STABLE_ABI_PATH)


def load_stable_abi(path: Path | None = None) -> StableAbiFacts:
    """The stable-ABI facts (the packaged file, read once per process, unless `path`)."""
    return _default() if path is None else _read(path)


# -- writing (the refresh script) -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReleaseInput:
    """What the refresh script read of one release: where from, its headers' declarations
    (header → name → declaration), the shims its inline headers call, and each library's
    dynamic exports."""

    release: FactsRelease
    declared: Mapping[str, Mapping[str, Declaration]]
    inline_calls: frozenset[str]
    exports: Mapping[str, frozenset[str]]  # library file name → exported names


_ROW_ORDER = ("name", "library", "since", "until", "header", "guard", "inline")


def merge(
    inputs: Sequence[ReleaseInput], *, about: str, source: str, platform: str
) -> dict[str, Any]:
    """The facts document of `inputs` (any order): one row per shim some library exports.

    A shim exported, dropped and exported again has no row shape here: ValueError names it
    (the data model would have to grow a list of spans first)."""
    ordered = sorted(inputs, key=lambda i: _key(i.release.version))
    versions = [i.release.version for i in ordered]
    rows: dict[str, dict[str, Any]] = {}
    seen_in: dict[str, list[int]] = {}
    for index, item in enumerate(ordered):
        by_name: dict[str, tuple[str, Declaration]] = {}
        for header, decls in sorted(item.declared.items()):
            for name, decl in decls.items():
                by_name.setdefault(name, (header, decl))
        for name, (header, decl) in by_name.items():
            library = next(
                (lib for lib, names in sorted(item.exports.items()) if name in names), None
            )
            if library is None:
                continue
            seen_in.setdefault(name, []).append(index)
            row = rows.setdefault(
                name, {"name": name, "library": library, "since": versions[index]}
            )
            row.update(library=library, header=header, guard=decl.guard)
            if name in item.inline_calls and "inline" not in row:
                row["inline"] = versions[index]
    for name, indices in seen_in.items():
        if indices != list(range(indices[0], indices[-1] + 1)):
            gaps = [versions[i] for i in range(indices[0], indices[-1]) if i not in indices]
            raise ValueError(f"{name}: exported, then not in {', '.join(gaps)}, then again")
        if indices[-1] != len(versions) - 1:
            rows[name]["until"] = versions[indices[-1]]
    symbols = [
        {k: row[k] for k in _ROW_ORDER if row.get(k) is not None}
        for row in sorted(rows.values(), key=lambda r: (r["library"], r["name"]))
    ]
    return {
        "about": about,
        "source": source,
        "platform": platform,
        "releases": [i.release.model_dump() for i in ordered],
        "symbols": symbols,
    }


def dump_facts(document: Mapping[str, Any]) -> str:
    """The document as JSON with one shim per line (a refresh's diff is a line per change),
    a field that is None left out."""
    head = {k: v for k, v in document.items() if k != "symbols"}
    text = json.dumps(head, indent=1)
    rows = ",\n  ".join(json.dumps(s, separators=(", ", ": ")) for s in document["symbols"])
    return text[:-2] + ',\n "symbols": [\n  ' + rows + "\n ]\n}\n"


_SHIM_NAME_RE = re.compile(r"^(aoti_torch|torch)_\w+$")


def shim_like(name: str) -> bool:
    """Whether a C name looks like a shim (`aoti_torch_*`, `torch_*`), stable or not."""
    return bool(_SHIM_NAME_RE.match(name))
