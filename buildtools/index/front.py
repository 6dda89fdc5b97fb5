"""The index's front page: an install selector, the coverage map, every published combination.

What a visitor asks is "which command for my torch, accelerator, Python and platform?".
The page answers it three ways, all from the same rows (`FrontRow`, one per project ×
torch × accelerator × platform of the site's find-links pages):

- a **selector** (torch, accelerator, Python, platform, pip or uv) in the style of
  pytorch.org's, which shows the exact command with a copy button and, for a combination
  that is not published, the nearest one that is (`front/front.js`);
- the **coverage map** (`coverage`, `maphtml`);
- a **static list** of every published combination with its commands, each combination
  an anchor (`#bt-scatter-torch-2.13.0-cpu-cp311-linux_x86_64`): the page without
  JavaScript, and what the selector links to.

No external asset: the style and the script are inlined, and the page declares a strict
Content-Security-Policy of its own (`<meta http-equiv>`: no source but the sha256 of its
own style and script, which this module computes from the very text it inlines; Trusted
Types required, so not even the script can write HTML). The selector's data is a JSON
block (`type="application/json"`, never executed) whose `<`, `>` and `&` are escaped, so
no value can close it; every other value is HTML-escaped. Same inputs, same bytes.
"""

from __future__ import annotations

__all__ = ["FrontRow", "content_security_policy", "render_front"]

import base64
import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from importlib import resources

from ..model import DEFAULT_PLATFORM, python_tag
from .coverage import CoverageMap, accelerator_label, python_order
from .install import SITE_PLACEHOLDER, InstallCommands
from .maphtml import platform_label, render_map


@dataclass(frozen=True, kw_only=True)
class FrontRow:
    """One project × torch × accelerator × platform of the site, with its commands."""

    project: str
    torch: str
    accelerator: str
    platform: str
    versions: tuple[str, ...]  # newest first
    pythons: tuple[str, ...]  # X.Y, ascending
    page: str  # the find-links page, relative to the site root
    index: str  # the PEP 503 root of the page, relative to the site root
    commands: InstallCommands


@functools.cache
def _asset(name: str) -> str:
    return (resources.files("buildtools.index") / "front" / name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


@functools.cache
def content_security_policy() -> str:
    """The page's policy: nothing loads, only its own style and script run (by hash)."""
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'sha256-{_sha256(_asset('front.js'))}'",
            f"style-src 'sha256-{_sha256(_asset('front.css'))}'",
            "img-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
            "require-trusted-types-for 'script'",
            "trusted-types 'none'",
        ]
    )


_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._+-]+")


class _Anchors:
    """Readable, unique element ids from index values (anything else becomes '-')."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def make(self, *parts: str) -> str:
        base = "-".join(_UNSAFE_ID.sub("-", p) for p in parts).strip("-") or "row"
        anchor, n = base, 1
        while anchor in self._used:
            n += 1
            anchor = f"{base}-{n}"
        self._used.add(anchor)
        return anchor


def _json_block(value: object) -> str:
    """JSON that no value can break out of a <script> element with (nor `<!--`)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _radios(
    axis: str, title: str, values: Sequence[tuple[str, str]], *, checked: int | None = None
) -> list[str]:
    out = [
        f'<div class="axis" role="radiogroup" aria-labelledby="ax-{axis}">',
        f'<div class="axis-name" id="ax-{axis}">{escape(title)}</div>',
        '<div class="options">',
    ]
    for i, (value, label) in enumerate(values):
        mark = " checked" if i == checked else ""
        out.append(
            f'<input type="radio" name="{axis}" id="o-{axis}-{i}" value="{escape(value)}"{mark}>'
            f'<label for="o-{axis}-{i}">{escape(label)}</label>'
        )
    out += ["</div>", "</div>"]
    return out


def _versions(versions: Sequence[str], shown: int = 3) -> str:
    """The newest few versions, and how many older ones there are."""
    more = len(versions) - shown
    return ", ".join(versions[:shown]) + (f" and {more} older" if more > 0 else "")


def _fill(kind: str, text: str) -> str:
    """An element attribute asking the script to put the site's URL in place of the
    placeholder (relative links only)."""
    return f' data-fill="{kind}"' if SITE_PLACEHOLDER in text else ""


def _combos_table(rows: Sequence[FrontRow], anchors: Sequence[tuple[str, list[str]]]) -> list[str]:
    several = len({r.project for r in rows}) > 1
    head = "<th>package</th>" if several else ""
    out = [
        '<table class="combos">',
        f"<thead><tr>{head}<th>torch</th><th>accelerator</th><th>platform</th><th>Python</th>"
        "<th>versions</th><th>install</th></tr></thead>",
        "<tbody>",
    ]
    for row, (row_id, combo_ids) in zip(rows, anchors, strict=True):
        c = row.commands
        pythons = "".join(
            f'<span id="{escape(a)}">{escape(p)}</span>'
            for p, a in zip(row.pythons, combo_ids, strict=True)
        )
        project = f"<td>{escape(row.project)}</td>" if several else ""
        out.append(
            f'<tr id="{escape(row_id)}" data-row="{escape(row_id)}">{project}'
            f"<td>{escape(row.torch)}</td><td>{escape(accelerator_label(row.accelerator))}</td>"
            f"<td>{escape(platform_label(row.platform))}</td>"
            f'<td class="pythons">{pythons}</td>'
            f"<td>{escape(_versions(row.versions))}</td>"
            f'<td>pip: <code class="cmd-pip"{_fill("shell", c.pip)}>{escape(c.pip)}</code><br>'
            f'uv: <code class="cmd-uv"{_fill("shell", c.uv)}>{escape(c.uv)}</code>'
            + (
                f'<br>uv, the variant for this machine (PEP 825 preview): <code class="cmd-uv-'
                f'variants"{_fill("shell", c.uv_variants)}>{escape(c.uv_variants)}</code>'
                if c.uv_variants
                else ""
            )
            + "<details><summary>PEP 503 index, uv project</summary>"
            f'<pre><code class="cmd-pip-index"{_fill("shell", c.pip_index)}>'
            f"{escape(c.pip_index)}</code></pre>"
            f'<pre><code class="cmd-uv-project"{_fill("text", c.uv_project)}>'
            f"{escape(c.uv_project)}</code></pre>"
            "</details></td></tr>"
        )
    out += ["</tbody>", "</table>"]
    return out


def _default(
    combos: Sequence[tuple[str, str, str, str, str, int, str]],
    torch_order: Sequence[str],
    accelerator_order: Sequence[str],
) -> int:
    """The combination the selector starts with: the newest torch, its first accelerator
    (CPU before CUDA before ROCm), the newest Python, the default platform."""
    if not combos:
        return 0
    torches = {t: i for i, t in enumerate(torch_order)}
    accelerators = {a: i for i, a in enumerate(accelerator_order)}

    def key(i: int) -> tuple[object, ...]:
        project, torch, acc, python, platform, _, _ = combos[i]
        return (
            project,
            torches.get(torch, len(torches)),
            accelerators.get(acc, len(accelerators)),
            _neg(python_order(python)),
            platform != DEFAULT_PLATFORM,
        )

    return min(range(len(combos)), key=key)


def _neg(values: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-v for v in values)


def render_front(
    title: str,
    rows: Sequence[FrontRow],
    cmap: CoverageMap,
    *,
    base_url: str | None,
    total_wheels: int,
    torch_order: Sequence[str],
    accelerator_order: Sequence[str],
) -> str:
    """The front page. `rows` in page order; `torch_order` newest first, `accelerator_order`
    as the pages sort them."""
    anchors = _Anchors()
    ids: list[tuple[str, list[str]]] = []
    combos: list[tuple[str, str, str, str, str, int, str]] = []
    for i, row in enumerate(rows):
        row_id = anchors.make(row.project, "torch", row.torch, row.accelerator, row.platform)
        combo_ids = []
        for python in row.pythons:
            anchor = anchors.make(
                row.project, "torch", row.torch, row.accelerator, python_tag(python), row.platform
            )
            combo_ids.append(anchor)
            combos.append(
                (row.project, row.torch, row.accelerator, python, row.platform, i, anchor)
            )
        ids.append((row_id, combo_ids))
    data = {
        "combos": [list(c) for c in combos],
        "default": _default(combos, torch_order, accelerator_order),
        "rows": [
            {
                "project": r.project,
                "versions": _versions(r.versions),
                "pip": r.commands.pip,
                "pip_index": r.commands.pip_index,
                "uv": r.commands.uv,
                "uv_project": r.commands.uv_project,
                **({"uv_variants": r.commands.uv_variants} if r.commands.uv_variants else {}),
            }
            for r in rows
        ],
    }
    projects = sorted({r.project for r in rows})
    pythons = sorted({p for r in rows for p in r.pythons}, key=python_order)
    platforms = sorted({r.platform for r in rows}, key=lambda p: (p != DEFAULT_PLATFORM, p))
    used_torch = {r.torch for r in rows}
    used_acc = {r.accelerator for r in rows}
    selector = ['<form id="selector" class="selector" hidden>']
    if len(projects) > 1:
        selector += _radios("project", "Package", [(p, p) for p in projects])
    else:
        # one project: a fixed choice the script still reads
        selector += [
            f'<input type="radio" name="project" id="o-project-0" value="{escape(p)}" '
            "checked hidden>"
            for p in projects
        ]
    selector += _radios("torch", "PyTorch", [(t, t) for t in torch_order if t in used_torch])
    selector += _radios(
        "accelerator",
        "Accelerator",
        [(a, accelerator_label(a)) for a in accelerator_order if a in used_acc],
    )
    selector += _radios("python", "Python", [(p, p) for p in pythons])
    selector += _radios("platform", "Platform", [(p, platform_label(p)) for p in platforms])
    selector += _radios("installer", "Installer", [("pip", "pip"), ("uv", "uv")], checked=0)
    selector += [
        '<div class="result" aria-live="polite">',
        '<p id="status" class="status"></p>',
        '<div class="command"><pre><code id="command"></code></pre>'
        '<button type="button" id="copy" class="copy">Copy</button></div>',
        '<div class="alt"><span id="alt-label"></span><pre><code id="alt-code"></code></pre></div>',
        "</div>",
        "</form>",
    ]
    relative = (
        " The commands name the site as <code>&lt;site-url&gt;</code>: the address this page is "
        "served from (its links are relative)."
        if not base_url
        else ""
    )
    nojs = (
        '<p id="nojs" class="lead">Find your torch, accelerator, Python and platform in '
        f'<a href="#all">the list of every published combination</a>.{relative}</p>'
        if rows
        else '<p id="nojs" class="lead">No wheel is published yet.</p>'
    )
    css, js = _asset("front.css"), _asset("front.js")
    page = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy()}">',
        '<meta name="referrer" content="no-referrer">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{css}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="lead">{total_wheels} wheel(s) for {len(used_torch)} torch release(s) on '
        f"{escape(', '.join(accelerator_label(a) for a in accelerator_order if a in used_acc)) or 'no accelerator'}. "
        "Choose what you have installed; pip or uv then picks the wheel of your Python.</p>",
        "</header>",
        "<main>",
        '<section id="install">',
        "<h2>Install</h2>",
        *selector,
        nojs,
        "</section>",
        '<section id="map">',
        "<h2>Coverage</h2>",
        *render_map(cmap),
        "</section>",
        '<section id="all">',
        "<h2>Every published combination</h2>",
        *(_combos_table(rows, ids) if rows else ["<p>None yet.</p>"]),
        "<p>The wheels pin <code>torch==X.Y.*</code>; <code>--extra-index-url</code> names the "
        "index torch of that accelerator comes from (PyPI's torch is one build only). "
        '<a href="simple/">simple/</a> is a PEP 503 index of every wheel; pin the full '
        "version there (<code>==1.2.0+pt211cu130</code>), since its wheels differ only by "
        'the local label. <a href="index.json">index.json</a> lists every published wheel '
        "with its sha256.</p>",
        "</section>",
        "</main>",
        '<footer class="foot">Generated by torch-buildtools from index.json.</footer>',
        f'<script type="application/json" id="bt-data">{_json_block(data)}</script>',
        f"<script>{js}</script>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(page)
