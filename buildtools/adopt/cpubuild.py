"""Which CUDA headers the CPU build would include: read from the sources, before any build.

A CPU cell compiles the project's C++ files on a machine without the CUDA toolkit. A file of
that build that includes `<cuda.h>` (or `<ATen/cuda/...>`, …) outside any `#if`, directly or
through the project's own headers, stops the build with "cuda.h: No such file or directory"
(xformers 0.0.34's `pt_stable_utils.cpp` → `pt_stable_utils.h` → `<cuda.h>`). This walks the
includes the preprocessor would follow unconditionally; anything under an `#if`/`#ifdef` is
taken as guarded (the project decides it), an include guard (`#ifndef X` + `#define X` as the
first two directives) is not a condition.
"""

from __future__ import annotations

__all__ = ["CpuBuildInclude", "cpu_translation_units", "unguarded_cuda_includes"]

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)[ \t]*(.*)$", re.MULTILINE)
_TARGET = re.compile(r'^([<"])([^>"\n]+)[>"]')
# directories whose C++ files a CPU build does not compile: vendored projects and what is
# not part of the package; device-side ones are named like _GPU_NAME (cuda/, hip_fmha/, …)
_NOT_BUILT = frozenset(
    {"third_party", "third-party", "thirdparty", "external", "extern", "vendor", "submodules"}
    | {"test", "tests", "example", "examples", "doc", "docs", "benchmark", "benchmarks", "build"}
)
_GPU_NAME = re.compile(r"(?:^|[_-])(?:cuda|hip|gpu|rocm)(?:$|[_-])", re.IGNORECASE)
_MAX_FILES = 2000  # headers read per project: a bound, not a limit a real extension reaches


@dataclass(frozen=True, kw_only=True)
class CpuBuildInclude:
    """`header` reached from the CPU build's `unit`, included by `by` with no `#if` around."""

    unit: str  # the C++ file of the CPU build, relative to the project
    by: str  # the file holding the #include (unit itself or one of its headers)
    header: str  # as written in the #include


def cpu_translation_units(cpp_sources: Iterable[str]) -> tuple[str, ...]:
    """The C++ files a CPU build plausibly compiles: not device-side, vendored or tests."""
    units = []
    for rel in cpp_sources:
        parts = rel.split("/")
        if any(p.lower() in _NOT_BUILT or p.startswith(".") for p in parts[:-1]):
            continue
        names = [*parts[:-1], parts[-1].rsplit(".", 1)[0]]
        if any(_GPU_NAME.search(name) for name in names):
            continue  # device-side: cuda/, hip_fmha/, ops_cuda.cpp, …
        units.append(rel)
    return tuple(units)


def _unguarded(text: str) -> list[tuple[str, str]]:
    """(kind, target) of every #include outside any #if (an include guard does not count)."""
    directives = [(m[1], m[2].strip()) for m in _DIRECTIVE.finditer(text)]
    guard = 0
    if (
        len(directives) >= 2
        and directives[0][0] == "ifndef"
        and directives[1][0] == "define"
        and directives[1][1].split()[:1] == directives[0][1].split()[:1]
    ):
        guard = 1  # the file's include guard: its body is what every includer sees
    depth = 0
    found = []
    for name, rest in directives:
        if name in ("if", "ifdef", "ifndef"):
            depth += 1
        elif name == "endif":
            depth = max(depth - 1, 0)
        elif name == "include" and depth <= guard:
            target = _TARGET.match(rest)
            if target:
                found.append((target[1], target[2].strip()))
    return found


def unguarded_cuda_includes(
    root: Path,
    units: Iterable[str],
    headers: Iterable[str],
    *,
    is_cuda_header: Callable[[str], bool],
    read: Callable[[Path], str],
) -> list[CpuBuildInclude]:
    """Every CUDA header the CPU build's `units` reach through unguarded includes.

    `headers` are the project's header files (relative paths), for `"x.h"` includes that do not
    resolve beside the includer; `read` returns a file's text without comments.
    """
    by_name: dict[str, list[str]] = {}
    for rel in headers:
        by_name.setdefault(rel.rsplit("/", 1)[-1], []).append(rel)
    texts: dict[str, str] = {}
    found: list[CpuBuildInclude] = []
    seen_headers: set[tuple[str, str]] = set()

    def text_of(rel: str) -> str:
        if rel not in texts:
            texts[rel] = read(root / rel) if len(texts) < _MAX_FILES else ""
        return texts[rel]

    def resolve(includer: str, target: str) -> str | None:
        here = includer.rsplit("/", 1)[0] if "/" in includer else ""
        beside = f"{here}/{target}" if here else target
        if ".." not in beside.split("/") and (root / beside).is_file():
            return beside
        candidates = [c for c in by_name.get(target.rsplit("/", 1)[-1], ()) if c.endswith(target)]
        return candidates[0] if len(candidates) == 1 else None

    for unit in units:
        pending, visited = [unit], {unit}
        while pending:
            current = pending.pop()
            for kind, target in _unguarded(text_of(current)):
                if is_cuda_header(target):
                    if (current, target) not in seen_headers:
                        seen_headers.add((current, target))
                        found.append(CpuBuildInclude(unit=unit, by=current, header=target))
                    continue
                if kind != '"':
                    continue  # <...>: a system or dependency header, not the project's
                local = resolve(current, target)
                if local is not None and local not in visited:
                    visited.add(local)
                    pending.append(local)
    return found
