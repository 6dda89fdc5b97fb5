"""The coverage map: torch × accelerator by Python, one grid per platform (pure).

Each position of the grid says what a user of that combination gets:

- **smoke-tested**: a published wheel serves it and a smoke report passed it in exactly that
  cell (on which runner: GPU, driver, date; `smokelog`);
- **published**: a wheel serves it (an abi3 wheel serves every Python from its own up, a
  stable-ABI wheel every torch its build record names);
- **missing**: matrix.yaml promises it and no wheel serves it;
- **impossible**: torch publishes no wheel for it (the knowledge base says why) or the ABI
  mode rules it out;
- **excluded**: an `exclude` rule of matrix.yaml removes it;
- for `buildtools plan`: **planned** (this plan builds it) and **other profile** (the matrix
  promises it, another profile builds it) in place of missing.

The rows and columns are the union of what the matrix names and what is published. The
same map is rendered as HTML (`front`), as markdown for a GitHub step summary and as a
compact text grid (`render_markdown`, `render_text`).
"""

from __future__ import annotations

__all__ = [
    "CoverageMap",
    "CoverageStatus",
    "Grid",
    "MapCell",
    "Notes",
    "accelerator_label",
    "coverage_map",
    "python_order",
    "render_markdown",
    "render_text",
    "run_note",
    "shared_wheels",
    "wheel_platforms",
    "wheel_pythons",
]

import enum
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..knowledge import Knowledge
from ..model import DEFAULT_PLATFORM, Accelerator, Cell
from ..planner import MatrixCells
from ..untrusted import markdown
from .manifest import IndexedWheel
from .smokelog import SmokeRun
from .variants import Variant, proven_variants


class CoverageStatus(str, enum.Enum):
    """What the map says of one torch × accelerator × Python × platform."""

    SMOKED = "smoke-tested"
    PUBLISHED = "published"
    MISSING = "missing"
    PLANNED = "planned"
    OTHER_PROFILE = "other profile"
    IMPOSSIBLE = "impossible"
    EXCLUDED = "excluded"
    NONE = "not planned"

    @property
    def symbol(self) -> str:
        """One character for the text grid."""
        return _SYMBOLS[self]


_SYMBOLS = {
    CoverageStatus.SMOKED: "✓",
    CoverageStatus.PUBLISHED: "●",
    CoverageStatus.MISSING: "!",
    CoverageStatus.PLANNED: "+",
    CoverageStatus.OTHER_PROFILE: "○",
    CoverageStatus.IMPOSSIBLE: "×",
    CoverageStatus.EXCLUDED: "-",
    CoverageStatus.NONE: "·",
}


@dataclass(frozen=True, kw_only=True)
class MapCell:
    """One position of a grid."""

    status: CoverageStatus
    reason: str | None = None  # impossible: why
    runs: tuple[SmokeRun, ...] = ()  # smoke-tested: where and when
    wheels: tuple[str, ...] = ()  # published: the wheels that serve it


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The map of one platform: rows (torch, accelerator) × columns (Python)."""

    platform: str
    pythons: tuple[str, ...]
    rows: tuple[tuple[str, str], ...]
    cells: tuple[tuple[MapCell, ...], ...]  # cells[row][column]


@dataclass(frozen=True, kw_only=True)
class CoverageMap:
    grids: tuple[Grid, ...] = ()

    def counts(self) -> dict[CoverageStatus, int]:
        """How many positions have each status (in CoverageStatus order, zeros left out)."""
        found: dict[CoverageStatus, int] = defaultdict(int)
        for grid in self.grids:
            for row in grid.cells:
                for cell in row:
                    found[cell.status] += 1
        return {s: found[s] for s in CoverageStatus if found[s]}


_CP = re.compile(r"cp(\d)(\d+)(t?)")
_LINUX = re.compile(r"(?:many|musl)?linux(?:_\d+_\d+|\d+)?_(.+)")


def python_order(python: str) -> tuple[int, ...]:
    """'3.9' before '3.10', '3.13' before '3.13t', anything else last."""
    digits = python.rstrip("t").split(".")
    try:
        return (*(int(d) for d in digits), python.endswith("t"))
    except ValueError:
        return (999, 0, 0)


def _fields(filename: str) -> tuple[str, str, str]:
    """(python tags, abi tag, platform tags) of a wheel file name (checked before)."""
    python, abi, platform = filename.removesuffix(".whl").rsplit("-", 3)[1:]
    return python, abi, platform


def wheel_platforms(filename: str, known: Collection[str] = ()) -> tuple[str, ...]:
    """The platforms (matrix names: linux_x86_64, …) a wheel's platform tags serve."""
    found: set[str] = set()
    for tag in _fields(filename)[2].split("."):
        if tag == "any":
            found.update(known or (DEFAULT_PLATFORM,))
            continue
        m = _LINUX.fullmatch(tag)
        found.add(f"linux_{m.group(1)}" if m else tag)
    return tuple(sorted(found))


def wheel_pythons(filename: str, candidates: Collection[str]) -> tuple[str, ...]:
    """The Pythons (X.Y) a wheel serves: its cpXY tags; with abi3 every candidate from the
    lowest of them up; a pure-Python tag (py3) every candidate."""
    python, abi, _ = _fields(filename)
    tags = python.split(".")
    found: set[str] = set()
    for tag in tags:
        m = _CP.fullmatch(tag)
        if m is None:
            if tag.startswith("py"):
                found.update(c for c in candidates if not c.endswith("t"))
            continue
        version = f"{m.group(1)}.{m.group(2)}{m.group(3)}"
        if abi == "abi3":
            low = python_order(version)
            found.update(c for c in candidates if not c.endswith("t") and python_order(c) >= low)
        found.add(version)
    return tuple(sorted(found, key=python_order))


def _row_key(row: tuple[str, str]) -> tuple[object, ...]:
    return Variant(torch=row[0], accelerator=row[1]).sort_key()


def _kb_pythons(kb: Knowledge, torch: str) -> tuple[str, ...]:
    try:
        return kb.torch_release(torch).python
    except (LookupError, ValueError):
        return ()


_Key = tuple[str, str, str, str]  # torch, accelerator, python, platform


def _published(
    wheels: Sequence[IndexedWheel],
    columns: Collection[str],
    platforms: Collection[str],
    kb: Knowledge,
    runs: Sequence[SmokeRun],
) -> dict[_Key, list[IndexedWheel]]:
    served: dict[_Key, list[IndexedWheel]] = defaultdict(list)
    kinds: dict[tuple[tuple[str, str, str], str, tuple[str, ...]], list[_Key]] = {}
    for w in wheels:
        # a window wheel serves the releases smoke runs proved it on too (their pages list it)
        proven = sorted(v.torch for v in proven_variants(w, runs, kb))
        torches = tuple(dict.fromkeys((*w.torch_versions, *proven)))
        # a site's thousands of wheels share a few kinds (python/abi/platform tags × torch)
        kind = (_fields(w.filename), w.accelerator, torches)
        keys = kinds.get(kind)
        if keys is None:
            keys = kinds[kind] = []
            for torch in torches:
                pythons = wheel_pythons(w.filename, {*columns, *_kb_pythons(kb, torch)})
                for platform in wheel_platforms(w.filename, platforms):
                    keys += [(torch, w.accelerator, p, platform) for p in pythons]
        for key in keys:
            served[key].append(w)
    return served


def _matches(run: SmokeRun, cell_id: str, python: str) -> bool:
    if run.cell is not None:
        return run.cell == cell_id
    return run.python is not None and ".".join(run.python.split(".")[:2]) == python


def coverage_map(
    wheels: Sequence[IndexedWheel],
    *,
    kb: Knowledge,
    runs: Iterable[SmokeRun] = (),
    matrix: MatrixCells | None = None,
    planned: Collection[str] | None = None,
) -> CoverageMap:
    """The map of what `wheels` serve, what `runs` proved, and what `matrix` names.

    `planned` (cell ids): the map of a plan, not of a site: the matrix's cells that this
    plan builds are `planned`, its others `other profile` (instead of `missing`).
    """
    matrix = matrix or MatrixCells()
    named: dict[_Key, Cell] = {}
    for cell in matrix.cells:
        named[(cell.torch, cell.accelerator, cell.python, cell.platform)] = cell
    impossible = {
        (r.cell.torch, r.cell.accelerator, r.cell.python, r.cell.platform): r.reason
        for r in matrix.impossible
    }
    excluded = {(c.torch, c.accelerator, c.python, c.platform) for c in matrix.excluded}
    keys: set[_Key] = {*named, *impossible, *excluded}
    columns = {k[2] for k in keys}
    platforms = {k[3] for k in keys} or {DEFAULT_PLATFORM}
    runs = tuple(runs)  # read twice: the releases a run proved, the cells it passed
    served = _published(wheels, columns, platforms, kb, runs)
    keys |= served.keys()
    by_sha: dict[str, list[SmokeRun]] = defaultdict(list)
    for run in runs:
        by_sha[run.sha256].append(run)

    def cell_at(key: _Key) -> MapCell:
        torch, accelerator, python, platform = key
        cell = Cell(torch=torch, accelerator=accelerator, python=python, platform=platform)
        if key in served:
            names = tuple(sorted({w.filename for w in served[key]}))
            found = sorted(
                {
                    r
                    for w in served[key]
                    for r in by_sha.get(w.sha256, ())
                    if _matches(r, cell.id, python)
                },
                key=lambda r: (r.date, r.gpu or "", r.driver or "", r.sha256),
                reverse=True,
            )
            if found:
                return MapCell(status=CoverageStatus.SMOKED, runs=tuple(found), wheels=names)
            return MapCell(status=CoverageStatus.PUBLISHED, wheels=names)
        if key in impossible:
            return MapCell(status=CoverageStatus.IMPOSSIBLE, reason=impossible[key])
        if key in named:
            if planned is None:
                return MapCell(status=CoverageStatus.MISSING)
            return MapCell(
                status=CoverageStatus.PLANNED
                if cell.id in planned
                else CoverageStatus.OTHER_PROFILE
            )
        reason = _unavailable(kb, cell)
        if reason:
            return MapCell(status=CoverageStatus.IMPOSSIBLE, reason=reason)
        if key in excluded:
            return MapCell(status=CoverageStatus.EXCLUDED)
        return MapCell(status=CoverageStatus.NONE)

    grids = []
    by_platform: dict[str, set[_Key]] = defaultdict(set)
    for key in keys:
        by_platform[key[3]].add(key)
    order = sorted(by_platform, key=lambda p: (p != DEFAULT_PLATFORM, p))
    for platform in order:
        mine = by_platform[platform]
        pythons = tuple(sorted({k[2] for k in mine}, key=python_order))
        rows = tuple(sorted({(k[0], k[1]) for k in mine}, key=_row_key))
        cells = tuple(
            tuple(cell_at((torch, acc, python, platform)) for python in pythons)
            for torch, acc in rows
        )
        grids.append(Grid(platform=platform, pythons=pythons, rows=rows, cells=cells))
    return CoverageMap(grids=tuple(grids))


def _unavailable(kb: Knowledge, cell: Cell) -> str | None:
    try:
        Version(cell.torch)
    except InvalidVersion:
        return None  # not a release: nothing to say about it
    return kb.cell_unavailable_reason(cell)


def shared_wheels(cmap: CoverageMap) -> list[tuple[str, tuple[str, ...]]]:
    """(wheel, the torch pages it serves) of each published wheel that serves more than one
    torch release (a stable-ABI wheel): one file, N pages, oldest torch first."""
    pages: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for grid in cmap.grids:
        for (torch, acc), row in zip(grid.rows, grid.cells, strict=True):
            for cell in row:
                for wheel in cell.wheels:
                    pages[wheel].add((torch, acc))
    out = []
    for wheel, found in sorted(pages.items()):
        if len({t for t, _ in found}) > 1:
            ordered = sorted(found, key=_row_key)
            out.append((wheel, tuple(f"{t}+{a}" for t, a in ordered)))
    return out


def _shared_lines(cmap: CoverageMap) -> list[str]:
    return [
        f"one wheel, {len(pages)} torch pages: {wheel} serves {', '.join(pages)}"
        for wheel, pages in shared_wheels(cmap)
    ]


# -- text renderings --------------------------------------------------------------------


class Notes:
    """Numbered notes (a reason, a runner) in order of first use: `[1]`, `[2]`, …"""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}

    def number(self, text: str) -> int:
        if text not in self._numbers:
            self._numbers[text] = len(self._numbers) + 1
        return self._numbers[text]

    def items(self) -> list[tuple[int, str]]:
        return [(n, text) for text, n in self._numbers.items()]


def run_note(run: SmokeRun) -> str:
    """'NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-25 (torch 2.11.0+cu130, Python 3.12)'."""
    extra = ", ".join(
        x
        for x in (
            f"torch {run.torch}" if run.torch else "",
            f"Python {run.python}" if run.python else "",
        )
        if x
    )
    return f"{run.device}, {run.date}" + (f" ({extra})" if extra else "")


def accelerator_label(accelerator: str) -> str:
    """'CPU', 'CUDA 13.0', 'ROCm 7.2' (the name itself when it is none of those)."""
    try:
        acc = Accelerator.parse(accelerator)
    except ValueError:
        return accelerator
    if acc.kind == "cpu":
        return "CPU"
    return f"{'CUDA' if acc.kind == 'cuda' else 'ROCm'} {acc.version}"


def _md(text: str) -> str:
    """Markdown-inert text: no link, no image, no HTML (angle brackets as entities), no
    emphasis, no line or table-cell break, no control or bidi character."""
    return markdown(text)


def _md_cell(cell: MapCell, notes: Notes) -> str:
    if cell.status is CoverageStatus.SMOKED:
        refs = "".join(f"[{notes.number(run_note(r))}]" for r in cell.runs)
        return f"✅ tested {refs}"
    if cell.status is CoverageStatus.IMPOSSIBLE:
        return f"impossible [{notes.number(cell.reason or '')}]"
    return {
        CoverageStatus.PUBLISHED: "📦 published",
        CoverageStatus.MISSING: "**missing**",
        CoverageStatus.PLANNED: "planned",
        CoverageStatus.OTHER_PROFILE: "other profile",
        CoverageStatus.EXCLUDED: "excluded",
        CoverageStatus.NONE: "–",
    }[cell.status]


def render_markdown(cmap: CoverageMap, *, title: str = "Coverage") -> str:
    """The map as markdown (GitHub step summary): a table per platform, notes below."""
    lines = [f"### {_md(title)}", ""]
    counts = cmap.counts()
    if not counts:
        return "\n".join([*lines, "Nothing published and no matrix: no coverage to show.", ""])
    lines.append(", ".join(f"{n} {s.value}" for s, n in counts.items()))
    notes = Notes()
    for grid in cmap.grids:
        lines += ["", f"**{_md(grid.platform)}**", ""]
        lines.append("| torch | accelerator | " + " | ".join(_md(p) for p in grid.pythons) + " |")
        lines.append("|---|---|" + "---|" * len(grid.pythons))
        for (torch, acc), row in zip(grid.rows, grid.cells, strict=True):
            cells = " | ".join(_md_cell(c, notes) for c in row)
            lines.append(f"| {_md(torch)} | {_md(accelerator_label(acc))} | {cells} |")
    if notes.items():
        lines.append("")
        lines += [f"{n}. {_md(text)}" for n, text in notes.items()]
    shared = _shared_lines(cmap)
    if shared:
        lines += ["", *(f"- {_md(line)}" for line in shared)]
    return "\n".join(lines) + "\n"


def render_text(cmap: CoverageMap, *, max_rows: int = 60) -> list[str]:
    """The map as a compact grid of symbols (`buildtools plan`), with its legend."""
    out: list[str] = []
    used: set[CoverageStatus] = set()
    for grid in cmap.grids:
        labels = [f"torch {t} {a}" for t, a in grid.rows]
        width = max((len(label) for label in labels), default=5)
        out.append(f"coverage of {grid.platform}:")
        if len(grid.rows) > max_rows:
            out.append(f"  ({len(grid.rows)} rows: too many to draw here)")
            continue
        out.append(" " * width + " " + " ".join(p.rjust(5) for p in grid.pythons))
        for label, row in zip(labels, grid.cells, strict=True):
            used.update(c.status for c in row)
            out.append(label.ljust(width) + " " + " ".join(c.status.symbol.rjust(5) for c in row))
    if used:
        out.append("  ".join(f"{s.symbol} {s.value}" for s in CoverageStatus if s in used))
    return out + _shared_lines(cmap)
