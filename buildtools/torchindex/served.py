"""What the index serves of one torch release: Pythons, platforms, tags, default CUDA.

Read from the file names (Python tags, free-threaded ones included, and platform tags) and
from one wheel's METADATA per Linux platform (its `nvidia-*` / `cuda-toolkit` pins say which
CUDA the plain `pip install torch` gets). Only the platforms buildtools builds for are
described; the others (macOS, Windows) are counted, not compared.
"""

from __future__ import annotations

__all__ = ["PlatformFacts", "ServedRelease", "cuda_from_metadata", "describe_release"]

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from ..model import PLATFORMS
from .simple import IndexFile

_LINUX_RE = re.compile(r"^(manylinux\w*?)_(x86_64|aarch64)$")
_CP_RE = re.compile(r"^cp(\d)(\d+)(t?)$")
# the CUDA runtime's own package names before and after the cuda-toolkit metapackage
_RUNTIME_RE = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?$")
_EXACT_RE = re.compile(r"^==(\d+)\.(\d+)(?:\.\d+)*$")


@dataclass(frozen=True, kw_only=True)
class PlatformFacts:
    """One Linux platform of a release as served."""

    platform: str  # 'linux_x86_64'
    tags: tuple[str, ...]  # manylinux tag bases seen: ('manylinux_2_28',)
    pythons: tuple[str, ...]  # '3.10', … (cpXY-cpXY)
    free_threaded: tuple[str, ...]  # '3.14', … (cpXY-cpXYt)
    cuda: str | None = None  # CUDA of the wheel's own pins; None: a CPU wheel
    cuda_toolkit: str | None = None  # the exact cuda-toolkit pin, where it has one
    metadata_of: str | None = None  # the wheel whose METADATA was read (None: not read)


@dataclass(frozen=True, kw_only=True)
class ServedRelease:
    """A torch release as the index serves it."""

    version: str
    platforms: Mapping[str, PlatformFacts]
    other_platforms: tuple[str, ...]  # served but not built for by buildtools


def _python_key(python: str) -> tuple[int, ...]:
    return tuple(int(p) for p in python.split("."))


def cuda_from_metadata(text: str, *, machine: str, python: str) -> tuple[str | None, str | None]:
    """(CUDA 'X.Y', exact cuda-toolkit version) of a torch METADATA on Linux/`machine`.

    Markers are evaluated for that machine and Python, so an x86_64-only pin does not
    count for aarch64. (None, None): no CUDA runtime pin, a CPU wheel.
    """
    env = {
        "platform_system": "Linux",
        "sys_platform": "linux",
        "platform_machine": machine,
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "extra": "",
    }
    cuda: str | None = None
    toolkit: str | None = None
    for value in HeaderParser().parsestr(text).get_all("Requires-Dist") or []:
        try:
            req = Requirement(value)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
        except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            continue
        exact = _EXACT_RE.match(str(req.specifier))
        if exact is None:
            continue
        if req.name == "cuda-toolkit":
            toolkit = str(req.specifier).removeprefix("==")
            cuda = f"{exact[1]}.{exact[2]}"
        elif _RUNTIME_RE.match(req.name) and cuda is None:
            cuda = f"{exact[1]}.{exact[2]}"
    return cuda, toolkit


def describe_release(
    version: Version,
    files: Sequence[IndexFile],
    *,
    metadata: Callable[[IndexFile], str] | None,
) -> ServedRelease:
    """The facts of one release from its files; `metadata` reads one wheel's METADATA
    per Linux platform (None: the pins are not read, CUDA stays unknown)."""
    per: dict[str, dict[str, set[str]]] = {}
    chosen: dict[str, tuple[tuple[tuple[int, ...], int], IndexFile]] = {}
    others: set[str] = set()
    for f in files:
        for tag in f.tags:
            m = _LINUX_RE.match(tag.platform)
            if m is None:
                others.add(tag.platform)
                continue
            platform = f"linux_{m[2]}"
            if platform not in PLATFORMS:
                others.add(tag.platform)
                continue
            facts = per.setdefault(platform, {"tags": set(), "py": set(), "ft": set()})
            facts["tags"].add(m[1])
            cp = _CP_RE.match(tag.abi)
            if cp is None or tag.interpreter != f"cp{cp[1]}{cp[2]}":
                continue
            python = f"{cp[1]}.{cp[2]}"
            facts["ft" if cp[3] else "py"].add(python)
            if not cp[3]:
                # one wheel per platform: the oldest Python's, its newest build
                key = (_python_key(python), -int(f.build[0]) if f.build else 0)
                best = chosen.get(platform)
                if best is None or key < best[0]:
                    chosen[platform] = (key, f)
    platforms: dict[str, PlatformFacts] = {}
    for platform, facts in sorted(per.items()):
        cuda = toolkit = metadata_of = None
        pick = chosen.get(platform)
        if metadata is not None and pick is not None:
            wheel = pick[1]
            python = ".".join(str(p) for p in pick[0][0])
            cuda, toolkit = cuda_from_metadata(
                metadata(wheel), machine=platform.removeprefix("linux_"), python=python
            )
            metadata_of = wheel.filename
        platforms[platform] = PlatformFacts(
            platform=platform,
            tags=tuple(sorted(facts["tags"])),
            pythons=tuple(sorted(facts["py"], key=_python_key)),
            free_threaded=tuple(sorted(facts["ft"], key=_python_key)),
            cuda=cuda,
            cuda_toolkit=toolkit,
            metadata_of=metadata_of,
        )
    return ServedRelease(
        version=str(version), platforms=platforms, other_platforms=tuple(sorted(others))
    )
