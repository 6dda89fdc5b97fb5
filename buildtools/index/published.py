"""Which cells of a plan a published site already has a wheel for (`plan --missing`).

A cell is published when the site holds a wheel of the project at the version being
released with the label of the cell's job (so its file name is the one a build would
make), for the cell's architecture, whose Python tag installs on the cell's Python
(cp312 for per-python; cp39-abi3 for every Python from 3.9 on), and whose torch
requirement admits the cell's torch (a 2.14.0 wheel pinned `torch==2.14.*` serves the
2.14.1 cell; a stable wheel serves the torches its tested range admits).

A window wheel (a stable-ABI wheel: its `Requires-Dist` a range, `torch>=2.10,<2.16`) is
published for the releases its build record names, the ones its smoke proved before it was
published, and for those a passing smoke run the site keeps proved since. A release its range admits that the record does not name (2.15.1, out after the
wheel) is promised, not proven: the cell is `smoke_only` (`window_cells`), the existing wheel
needs a smoke run on it, never a rebuild. A release outside the range is missing: rebuild.
"""

from __future__ import annotations

__all__ = ["is_window", "proven_releases", "published_cells", "window_cells"]

from collections.abc import Callable, Iterable, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..model import BuildJob, Cell
from .manifest import IndexedWheel
from .smokelog import SmokeRun


def _installs_on(tags: frozenset[Tag], python: str, arch: str) -> bool:
    """Whether a wheel with `tags` installs on CPython `python` ('3.12', '3.14t')."""
    free_threaded = python.endswith("t")
    major, minor = (int(p) for p in python.removesuffix("t").split("."))
    for tag in tags:
        if not tag.platform.endswith(f"_{arch}"):
            continue
        if not tag.interpreter.startswith(f"cp{major}"):
            continue
        try:
            their = int(tag.interpreter[3:])
        except ValueError:
            continue
        if tag.abi == "abi3" and not free_threaded and their <= minor:
            return True
        wanted = f"cp{major}{minor}{'t' if free_threaded else ''}"
        if tag.abi == wanted and their == minor:
            return True
    return False


def _admits(wheel: IndexedWheel, cell: Cell) -> bool:
    try:
        spec = SpecifierSet(wheel.torch_specifier or "")
        return bool(wheel.torch_specifier) and spec.contains(cell.torch, prereleases=True)
    except InvalidSpecifier:
        return False


def is_window(wheel: IndexedWheel) -> bool:
    """Whether `wheel`'s torch requirement is a range (a stable-ABI window), not a pin."""
    try:
        spec = SpecifierSet(wheel.torch_specifier or "")
    except InvalidSpecifier:
        return False
    return bool(wheel.torch_specifier) and all(
        s.operator in (">=", ">", "<", "<=", "!=") for s in spec
    )


def proven_releases(runs: Iterable[SmokeRun]) -> dict[str, set[str]]:
    """sha256 → the torch releases (public versions) passing runs of that wheel ran on.

    The one reading of what smoke runs proved: `published_cells` (which cells a window wheel
    serves) and `variants.proven_variants` (which pages list it) both start from it."""
    out: dict[str, set[str]] = {}
    for run in runs:
        if run.torch:
            try:
                out.setdefault(run.sha256, set()).add(Version(run.torch).public)
            except InvalidVersion:
                continue
    return out


def published_cells(
    jobs: Sequence[BuildJob],
    *,
    project: str,
    version: Version,
    wheels: Sequence[IndexedWheel],
    runs: Iterable[SmokeRun] = (),
) -> dict[str, str]:
    """cell id → the file name of the published wheel that serves it; `runs` (the site's
    passing smoke runs): a window wheel serves the releases they proved, too."""
    proven = proven_releases(runs)

    def serves(wheel: IndexedWheel, cell: Cell) -> bool:
        if cell.torch in wheel.torch_versions:
            return True
        if is_window(wheel):
            return _admits(wheel, cell) and cell.torch in proven.get(wheel.sha256, ())
        return _admits(wheel, cell)

    return _cells(jobs, project=project, version=version, wheels=wheels, serves=serves)


def window_cells(
    jobs: Sequence[BuildJob],
    *,
    project: str,
    version: Version,
    wheels: Sequence[IndexedWheel],
    runs: Iterable[SmokeRun] = (),
) -> dict[str, str]:
    """cell id → the published window wheel whose range admits the cell's torch though its
    record does not name it and no passing run proved it: a smoke-only run proves it (see
    the module); cells already published are not here."""
    published = published_cells(jobs, project=project, version=version, wheels=wheels, runs=runs)

    def inside(wheel: IndexedWheel, cell: Cell) -> bool:
        return is_window(wheel) and _admits(wheel, cell)

    found = _cells(jobs, project=project, version=version, wheels=wheels, serves=inside)
    return {c: w for c, w in found.items() if c not in published}


def _cells(
    jobs: Sequence[BuildJob],
    *,
    project: str,
    version: Version,
    wheels: Sequence[IndexedWheel],
    serves: Callable[[IndexedWheel, Cell], bool],
) -> dict[str, str]:
    want = canonicalize_name(project)
    by_version: dict[Version, list[tuple[IndexedWheel, frozenset[Tag]]]] = {}
    for wheel in wheels:
        if canonicalize_name(wheel.name) != want:
            continue
        try:
            tags = parse_wheel_filename(wheel.filename)[3]
            by_version.setdefault(Version(wheel.version), []).append((wheel, tags))
        except (InvalidVersion, ValueError):
            continue
    found: dict[str, str] = {}
    for job in jobs:
        try:
            full = Version(f"{version.public}+{job.local_version}")
        except InvalidVersion:
            continue
        arch = job.platform.removeprefix("linux_")
        candidates = [
            (w, t) for w, t in by_version.get(full, []) if w.accelerator == job.accelerator.name
        ]
        for cell in job.cells:
            for wheel, tags in candidates:
                if _installs_on(tags, cell.python, arch) and serves(wheel, cell):
                    found[cell.id] = wheel.filename
                    break
    return found
