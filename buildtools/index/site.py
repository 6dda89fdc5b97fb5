"""Every generated file of the site, path → bytes: pages and manifest (pure).

Each wheel's `<a>` line is made once (what follows the prefix of a page's depth) and
shared by every page that lists it; its pages (variants), Pythons and platforms are found
once per kind of wheel, each version string parsed once: a large site renders in one pass
over its wheels. The front page (`front`) gets one row per project × page × platform and
the coverage map (`coverage`) of the wheels, their smoke runs and the matrix's cells.
"""

from __future__ import annotations

__all__ = ["SIMPLE_DIR", "render_site"]

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from packaging.version import InvalidVersion, Version

from ..knowledge import Knowledge
from ..model import DEFAULT_PLATFORM
from ..planner import MatrixCells
from .coverage import CoverageMap, coverage_map, python_order, wheel_platforms, wheel_pythons
from .front import FrontRow, render_front
from .install import install_commands, torch_index, variant_command
from .manifest import MANIFEST_NAME, IndexedWheel, Manifest
from .pages import (
    anchor_href_start,
    anchor_tail,
    render_find_links,
    render_simple_project,
    render_simple_root,
    wheels_prefix,
)
from .settings import IndexSettings
from .smokelog import SmokeRun
from .variantindex import render_variant_index
from .variants import Aliases, Variant, proven_variants

SIMPLE_DIR = "simple"


def _by_project(wheels: Iterable[IndexedWheel]) -> dict[str, list[IndexedWheel]]:
    grouped: dict[str, list[IndexedWheel]] = defaultdict(list)
    for w in wheels:
        grouped[w.project].append(w)
    return grouped


class _Serves:
    """Which (platform, Pythons) a wheel serves on a page, once per kind of wheel."""

    def __init__(self, kb: Knowledge, matrix: MatrixCells | None) -> None:
        self.kb = kb
        cells = [*matrix.cells, *(r.cell for r in matrix.impossible)] if matrix else []
        self.pythons = {c.python for c in cells}
        self.platforms = {c.platform for c in cells} or {DEFAULT_PLATFORM}
        self._known: dict[tuple[str, str], tuple[tuple[str, tuple[str, ...]], ...]] = {}

    def __call__(self, filename: str, torch: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        tags = filename.removesuffix(".whl").rsplit("-", 3)
        key = ("-".join(tags[1:]), torch)
        found = self._known.get(key)
        if found is None:
            try:
                candidates = {*self.pythons, *self.kb.torch_release(torch).python}
            except (LookupError, ValueError):
                candidates = set(self.pythons)
            pythons = wheel_pythons(filename, candidates)
            found = tuple((p, pythons) for p in wheel_platforms(filename, self.platforms))
            self._known[key] = found
        return found


_Order = tuple[int, Version | str, str]


def _version_key(text: str) -> _Order:
    """Versions in PEP 440 order; a string that is none after every one that is."""
    try:
        return (0, Version(text), "")
    except InvalidVersion:
        return (1, text, "")


class _VersionOrder:
    """PEP 440 order of the versions a site lists, each public part parsed once: the
    wheels of one page share their local label (`+pt213cpu`), which orders them after
    that, as text."""

    def __init__(self) -> None:
        self._public: dict[str, _Order] = {}

    def __call__(self, text: str) -> _Order:
        public, _, local = text.partition("+")
        found = self._public.get(public)
        if found is None:
            found = self._public[public] = _version_key(public)
        return (found[0], found[1], local)


def _front_rows(
    pages: dict[Variant, list[IndexedWheel]],
    order: Sequence[Variant],
    settings: IndexSettings,
    kb: Knowledge,
    serves: _Serves,
    version_key: Callable[[str], _Order],
    twins: frozenset[tuple[str, str, str]] = frozenset(),
) -> list[FrontRow]:
    rows: list[FrontRow] = []
    for variant in order:
        for project, group in sorted(_by_project(pages[variant]).items()):
            pythons: dict[str, set[str]] = defaultdict(set)
            versions: dict[str, set[str]] = defaultdict(set)
            for w in group:
                for platform, served in serves(w.filename, variant.torch):
                    pythons[platform].update(served)
                    versions[platform].add(w.version)
            for platform in sorted(pythons, key=lambda p: (p != DEFAULT_PLATFORM, p)):
                if not pythons[platform]:
                    continue
                rows.append(
                    FrontRow(
                        project=project,
                        torch=variant.torch,
                        accelerator=variant.accelerator,
                        platform=platform,
                        versions=tuple(sorted(versions[platform], key=version_key, reverse=True)),
                        pythons=tuple(sorted(pythons[platform], key=python_order)),
                        page=variant.page,
                        index=f"{variant.index_dir}/",
                        commands=replace(
                            install_commands(
                                project,
                                variant,
                                site=settings.base_url,
                                torch_from=torch_index(variant, platform, settings, kb),
                            ),
                            uv_variants=variant_command(
                                project, variant.torch, site=settings.base_url
                            )
                            if (project, variant.torch, variant.accelerator) in twins
                            else None,
                        ),
                    )
                )
    return rows


def render_site(
    wheels: Sequence[IndexedWheel],
    settings: IndexSettings,
    kb: Knowledge,
    *,
    runs: Iterable[SmokeRun] = (),
    matrix: MatrixCells | None = None,
    coverage: CoverageMap | None = None,
) -> dict[str, bytes]:
    """Every generated file of the site (pages and manifest), path → bytes; pure.

    `runs`: the passing smoke runs known of these wheels (the manifest keeps those of
    published wheels); `matrix`: the cells matrix.yaml names, for the coverage map;
    `coverage`: that map, when the caller has made it already (`coverage_map` of the same
    wheels, runs and matrix)."""
    runs = tuple(runs)  # read twice: the pages a run proved, the runs the manifest keeps
    listed_all = sorted(wheels, key=lambda w: w.filename)
    variant_files = render_variant_index(listed_all, settings)  # PEP 825: their own pages
    wheels = [w for w in listed_all if not w.in_variant_set]
    base = settings.base_url
    aliases = Aliases(settings, kb)
    # each wheel's <a> line is made once per depth, then shared by every page listing it
    top = wheels_prefix(base, 0)
    nested = wheels_prefix(base, 2)
    flat: dict[str, str] = {}
    deep: dict[str, str] = {}
    pages: dict[Variant, list[IndexedWheel]] = defaultdict(list)
    flat_start, deep_start = anchor_href_start(top), anchor_href_start(nested)
    for w in wheels:
        tail = anchor_tail(w.link())
        if w.url is not None:
            flat[w.filename] = deep[w.filename] = f'<a href="{tail}'
        else:
            flat[w.filename] = flat_start + tail
            deep[w.filename] = deep_start + tail
        for variant in aliases.variants(w) | proven_variants(w, runs, kb):
            pages[variant].append(w)
    version_key = _VersionOrder()

    files: dict[str, str] = {}
    order = sorted(pages, key=Variant.sort_key)
    for variant in order:
        listed = pages[variant]
        title = f"torch {variant.key}"
        files[variant.page] = render_find_links(title, [flat[w.filename] for w in listed])
        by_project = _by_project(listed)
        root = variant.index_dir
        files[f"{root}/index.html"] = render_simple_root(title, sorted(by_project))
        for project in sorted(by_project):
            group = by_project[project]
            files[f"{root}/{project}/index.html"] = render_simple_project(
                f"{project} for torch {variant.key}", [deep[w.filename] for w in group]
            )
    all_projects = _by_project(wheels)
    files[f"{SIMPLE_DIR}/index.html"] = render_simple_root("Simple index", sorted(all_projects))
    for project, group in sorted(all_projects.items()):
        files[f"{SIMPLE_DIR}/{project}/index.html"] = render_simple_project(
            f"Links for {project}", [deep[w.filename] for w in group]
        )
    shas = {w.sha256 for w in wheels}
    kept = tuple(sorted({r for r in runs if r.sha256 in shas}, key=SmokeRun.key))
    serves = _Serves(kb, matrix)
    twins = frozenset(
        (w.project, t, w.accelerator)
        for w in listed_all
        if w.variant_label is not None
        for t in w.torch_versions
    )
    rows = _front_rows(pages, order, settings, kb, serves, version_key, twins)
    torches = sorted({v.torch for v in order}, key=_version_key, reverse=True)
    accelerators = list(
        dict.fromkeys(
            v.accelerator
            for v in sorted(
                order, key=lambda v: Variant(torch="0", accelerator=v.accelerator).sort_key()
            )
        )
    )
    projects = sorted(all_projects)
    files["index.html"] = render_front(
        f"{projects[0]} wheels" if len(projects) == 1 else "Wheels by torch and accelerator",
        rows,
        coverage or coverage_map(wheels, kb=kb, runs=kept, matrix=matrix),
        base_url=base,
        total_wheels=len(wheels),
        torch_order=torches,
        accelerator_order=accelerators,
    )
    files[".nojekyll"] = ""  # GitHub Pages: serve the files as they are
    files.update(variant_files)
    out = {path: text.encode("utf-8") for path, text in sorted(files.items())}
    manifest = Manifest(wheels=tuple(listed_all), generated=tuple(sorted(out)), smoke=kept)
    out[MANIFEST_NAME] = manifest.to_json().encode("utf-8")
    return out
