"""HTML of the published index: find-links pages and PEP 503 pages (the front page: `front`).

Pure string building, no I/O. Everything is sorted by the caller and nothing depends on
the clock, so the same wheels always give byte-identical pages.

Each link carries what pip can use before downloading a wheel:

- `#sha256=…` (pip verifies the download against it);
- `data-requires-python` (PEP 503; pip skips wheels whose Python range excludes it),
  HTML-escaped since it holds `<` and `>`;
- `data-dist-info-metadata` and `data-core-metadata` (PEP 658, renamed by PEP 714; both,
  for old and new pips) with the sha256 of `<wheel>.metadata`, served next to the wheel,
  so the resolver reads a wheel's dependencies without downloading it. Only for wheels
  the site hosts: a wheel elsewhere (release assets) has no metadata file beside it.
"""

from __future__ import annotations

__all__ = [
    "LinkTarget",
    "anchor",
    "anchor_href_start",
    "anchor_tail",
    "quote_name",
    "render_find_links",
    "render_simple_project",
    "render_simple_root",
    "wheels_prefix",
]

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from urllib.parse import quote

WHEELS_DIR = "wheels"


@dataclass(frozen=True, kw_only=True)
class LinkTarget:
    """What a page needs to know about one wheel to link it."""

    filename: str
    sha256: str
    requires_python: str | None
    metadata_sha256: str | None  # None: no .metadata file next to the wheel
    url: str | None  # absolute URL of a wheel hosted elsewhere; None: the site's wheels/


def _head(title: str, *, simple: bool) -> list[str]:
    lines = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">']
    if simple:
        lines.append('<meta name="pypi:repository-version" content="1.0">')
    lines += [f"<title>{escape(title)}</title>", "</head>", "<body>", f"<h1>{escape(title)}</h1>"]
    return lines


_TAIL = ["</body>", "</html>", ""]


_PLAIN = re.compile(r"[A-Za-z0-9._+-]*")


def quote_name(filename: str) -> str:
    """A file name as a URL path segment (`+` → `%2B`; S3 and some servers read `+` as space)."""
    if _PLAIN.fullmatch(filename):
        return filename.replace("+", "%2B")  # the common case, much faster than quote()
    return quote(filename, safe="")


def wheels_prefix(base_url: str | None, depth: int) -> str:
    """Where `wheels/` is, seen from a page `depth` directories below the site root."""
    return f"{base_url}/" if base_url else "../" * depth


@functools.lru_cache(maxsize=1024)
def _escaped(text: str) -> str:
    """html.escape of the strings many links share (a prefix, a Requires-Python range)."""
    return escape(text)


def anchor(target: LinkTarget, prefix: str) -> str:
    """The `<a>` line of one wheel; `prefix` comes from `wheels_prefix`."""
    if target.url is not None:
        return f'<a href="{anchor_tail(target)}'
    # escape() works character by character: the prefix is escaped on its own
    return f'<a href="{_escaped(prefix)}{anchor_tail(target)}'


def anchor_tail(target: LinkTarget) -> str:
    """What follows the wheels prefix in the `<a>` line of one wheel: the same on every
    page, so a site's renderer makes it once per wheel and adds each page's prefix."""
    if target.url is not None:
        href = escape(target.url)
    else:
        # quote_name's output (letters, digits, '._-%') has nothing escape() changes
        href = f"{WHEELS_DIR}/{quote_name(target.filename)}"
    attrs = f'{href}#sha256={target.sha256}"'
    if target.requires_python:
        attrs += f' data-requires-python="{_escaped(target.requires_python)}"'
    if target.metadata_sha256 is not None and target.url is None:
        value = f"sha256={target.metadata_sha256}"
        attrs += f' data-dist-info-metadata="{value}" data-core-metadata="{value}"'
    name = target.filename
    return f"{attrs}>{name if _PLAIN.fullmatch(name) else escape(name)}</a><br>"


def anchor_href_start(prefix: str) -> str:
    """The start of every hosted wheel's `<a>` line on a page with this `prefix`."""
    return f'<a href="{_escaped(prefix)}'


def render_find_links(title: str, anchors: Sequence[str]) -> str:
    """A flat find-links page (`pip install … -f URL`): one `anchor` per wheel."""
    return "\n".join([*_head(title, simple=False), *anchors, *_TAIL])


def render_simple_root(title: str, projects: Sequence[str]) -> str:
    """The PEP 503 root: one link per normalized project name."""
    lines = _head(title, simple=True)
    lines += [f'<a href="{quote(p)}/">{escape(p)}</a><br>' for p in projects]
    return "\n".join(lines + _TAIL)


def render_simple_project(title: str, anchors: Sequence[str]) -> str:
    """A PEP 503 project page (`<root>/<project>/index.html`): anchors with prefix depth 2."""
    return "\n".join([*_head(title, simple=True), *anchors, *_TAIL])
