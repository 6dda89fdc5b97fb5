"""Every generated file of the site, path → bytes: pages and manifest (pure).

Each wheel's `<a>` line is made once (what follows the prefix of a page's depth) and
shared by every page that lists it; its pages (variants) are found once per kind of
wheel, each version string parsed once: a large site renders in one pass over its
wheels.
"""

from __future__ import annotations

__all__ = ["SIMPLE_DIR", "render_site"]

from collections import defaultdict
from collections.abc import Iterable, Sequence

from packaging.version import Version

from ..ecosystem import load_ecosystem
from ..knowledge import Knowledge
from .manifest import MANIFEST_NAME, IndexedWheel, Manifest
from .pages import (
    LandingRow,
    anchor_href_start,
    anchor_tail,
    render_find_links,
    render_landing,
    render_simple_project,
    render_simple_root,
    wheels_prefix,
)
from .settings import IndexSettings
from .variants import Aliases, Variant

SIMPLE_DIR = "simple"


def _python_tags(fields: Iterable[str]) -> tuple[str, ...]:
    """The interpreter tags of wheels, from their file names' python fields ('cp311.cp312')."""
    tags = {t for field in set(fields) for t in field.split(".")}
    return tuple(sorted(tags, key=lambda t: (len(t), t)))


def _by_project(wheels: Iterable[IndexedWheel]) -> dict[str, list[IndexedWheel]]:
    grouped: dict[str, list[IndexedWheel]] = defaultdict(list)
    for w in wheels:
        grouped[w.project].append(w)
    return grouped


def render_site(
    wheels: Sequence[IndexedWheel], settings: IndexSettings, kb: Knowledge
) -> dict[str, bytes]:
    """Every generated file of the site (pages and manifest), path → bytes; pure."""
    wheels = sorted(wheels, key=lambda w: w.filename)
    base = settings.base_url
    aliases = Aliases(settings, kb)
    # each wheel's <a> line is made once per depth, then shared by every page listing it
    top = wheels_prefix(base, 0)
    nested = wheels_prefix(base, 2)
    flat: dict[str, str] = {}
    deep: dict[str, str] = {}
    python: dict[str, str] = {}  # file name → its python tag field
    pages: dict[Variant, list[IndexedWheel]] = defaultdict(list)
    flat_start, deep_start = anchor_href_start(top), anchor_href_start(nested)
    for w in wheels:
        tail = anchor_tail(w.link())
        if w.url is not None:
            flat[w.filename] = deep[w.filename] = f'<a href="{tail}'
        else:
            flat[w.filename] = flat_start + tail
            deep[w.filename] = deep_start + tail
        # the name was checked (read_wheel parsed it, the manifest's check_wheel_filename):
        # its python field is the third field from the end
        python[w.filename] = w.filename.rsplit("-", 3)[1]
        for variant in aliases.variants(w):
            pages[variant].append(w)
    parsed: dict[str, Version] = {}  # each distinct version string parsed once

    def version_key(text: str) -> Version:
        if text not in parsed:
            parsed[text] = Version(text)
        return parsed[text]

    files: dict[str, str] = {}
    rows: list[LandingRow] = []
    for variant in sorted(pages, key=Variant.sort_key):
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
            versions = sorted({w.version for w in group}, key=version_key, reverse=True)
            rows.append(
                LandingRow(
                    torch=variant.torch,
                    accelerator=variant.accelerator,
                    project=project,
                    versions=tuple(versions),
                    pythons=_python_tags(python[w.filename] for w in group),
                    page=variant.page,
                    index=f"{root}/",
                    torch_index=f"{load_ecosystem().pytorch_index}/{variant.accelerator}",
                )
            )
    all_projects = _by_project(wheels)
    files[f"{SIMPLE_DIR}/index.html"] = render_simple_root("Simple index", sorted(all_projects))
    for project, group in sorted(all_projects.items()):
        files[f"{SIMPLE_DIR}/{project}/index.html"] = render_simple_project(
            f"Links for {project}", [deep[w.filename] for w in group]
        )
    files["index.html"] = render_landing(
        "Wheels by torch and accelerator", rows, base_url=base, total_wheels=len(wheels)
    )
    files[".nojekyll"] = ""  # GitHub Pages: serve the files as they are
    out = {path: text.encode("utf-8") for path, text in sorted(files.items())}
    manifest = Manifest(wheels=tuple(wheels), generated=tuple(sorted(out)))
    out[MANIFEST_NAME] = manifest.to_json().encode("utf-8")
    return out
