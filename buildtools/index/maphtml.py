"""The coverage map as HTML, for the front page (pure string building).

Every text comes from outside this module (torch versions, accelerator names and Python
tags from `index.json`, GPU names and drivers from smoke reports, reasons from the
knowledge base): each goes through `html.escape`, in text and in attributes alike.
"""

from __future__ import annotations

__all__ = ["render_map"]

from html import escape

from .coverage import CoverageMap, CoverageStatus, MapCell, Notes, accelerator_label, run_note

_CLASS = {
    CoverageStatus.SMOKED: "s-smoked",
    CoverageStatus.PUBLISHED: "s-published",
    CoverageStatus.MISSING: "s-missing",
    CoverageStatus.PLANNED: "s-planned",
    CoverageStatus.OTHER_PROFILE: "s-other",
    CoverageStatus.IMPOSSIBLE: "s-impossible",
    CoverageStatus.EXCLUDED: "s-excluded",
    CoverageStatus.NONE: "s-none",
}
_WORD = {
    CoverageStatus.SMOKED: "tested",
    CoverageStatus.PUBLISHED: "published",
    CoverageStatus.MISSING: "missing",
    CoverageStatus.PLANNED: "planned",
    CoverageStatus.OTHER_PROFILE: "other profile",
    CoverageStatus.IMPOSSIBLE: "impossible",
    CoverageStatus.EXCLUDED: "excluded",
    CoverageStatus.NONE: "–",
}
_MEANING = {
    CoverageStatus.SMOKED: "published and smoke-tested on the runner named",
    CoverageStatus.PUBLISHED: "published, not smoke-tested in this cell",
    CoverageStatus.MISSING: "promised by matrix.yaml, not published",
    CoverageStatus.PLANNED: "built by this plan",
    CoverageStatus.OTHER_PROFILE: "built by another profile",
    CoverageStatus.IMPOSSIBLE: "torch has no such build (why: below)",
    CoverageStatus.EXCLUDED: "left out by an exclude rule of matrix.yaml",
    CoverageStatus.NONE: "not planned",
}


def platform_label(platform: str) -> str:
    """'Linux x86-64' for linux_x86_64; other names as they are."""
    arch = {"linux_x86_64": "x86-64", "linux_aarch64": "aarch64"}.get(platform)
    return f"Linux {arch}" if arch else platform


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ref(number: int) -> str:
    return f'<a href="#note-{number}">[{number}]</a>'


def _cell(cell: MapCell, notes: Notes) -> str:
    css = _CLASS[cell.status]
    word = _WORD[cell.status]
    if cell.status is CoverageStatus.SMOKED:
        first = cell.runs[0]
        refs = " ".join(_ref(notes.number(run_note(r))) for r in cell.runs)
        title = "; ".join(run_note(r) for r in cell.runs)
        device = first.gpu or f"{first.runner.upper()} runner"
        return (
            f'<td class="{css}" title="{escape(title)}">{word}'
            f"<small>{escape(_short(device))} {refs}</small></td>"
        )
    if cell.status is CoverageStatus.IMPOSSIBLE:
        reason = cell.reason or ""
        return (
            f'<td class="{css}" title="{escape(reason)}">{word}'
            f"<small>{_ref(notes.number(reason))}</small></td>"
        )
    if cell.status is CoverageStatus.PUBLISHED:
        return f'<td class="{css}" title="{len(cell.wheels)} wheel(s)">{word}</td>'
    return f'<td class="{css}">{word}</td>'


def render_map(cmap: CoverageMap) -> list[str]:
    """The map's legend, one table per platform and the numbered notes, as HTML lines."""
    counts = cmap.counts()
    if not counts:
        return ["<p>Nothing is published yet, and no matrix.yaml says what is planned.</p>"]
    lines = ['<ul class="legend">']
    for status, count in counts.items():
        lines.append(
            f'<li><span class="swatch {_CLASS[status]}"></span><span><b>{_WORD[status]}</b>: '
            f"{escape(_MEANING[status])} ({count})</span></li>"
        )
    lines.append("</ul>")
    notes = Notes()
    for grid in cmap.grids:
        lines.append(f"<h3>{escape(platform_label(grid.platform))}</h3>")
        lines.append('<table class="map">')
        heads = "".join(f'<th scope="col">Python {escape(p)}</th>' for p in grid.pythons)
        lines.append(
            f'<thead><tr><th scope="col">torch</th><th scope="col">accelerator</th>{heads}'
            "</tr></thead>"
        )
        lines.append("<tbody>")
        for (torch, acc), row in zip(grid.rows, grid.cells, strict=True):
            cells = "".join(_cell(c, notes) for c in row)
            lines.append(
                f'<tr><th scope="row">{escape(torch)}</th>'
                f'<th scope="row">{escape(accelerator_label(acc))}</th>{cells}</tr>'
            )
        lines += ["</tbody>", "</table>"]
    if notes.items():
        lines.append('<ol class="notes">')
        lines += [f'<li id="note-{n}">{escape(text)}</li>' for n, text in notes.items()]
        lines.append("</ol>")
    return lines
