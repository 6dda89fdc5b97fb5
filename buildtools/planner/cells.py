"""Which cells a plan builds: the axes expanded, include/exclude/profile/--only applied.

A cell is one torch × accelerator × Python × platform. The axes give the product; an
`exclude` rule removes cells, an `include` rule adds them (a glob only selects among the
axes' values); a profile's `select` rules and `--only` narrow the result; a cell that
never existed (the knowledge base, or the ABI mode) is removed with its reason.
`torch: current` stands for exactly one cell, the running environment's.
"""

from __future__ import annotations

__all__ = [
    "CellSelection",
    "MatrixCells",
    "RemovedCell",
    "Selection",
    "cell_key",
    "matrix_cells",
    "needs_current",
    "python_key",
    "select_cells",
]

import difflib
import fnmatch
import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from ..errors import ConfigError, PlanError
from ..knowledge import Knowledge
from ..matrix.config import CELL_KEYS, CURRENT, HOST, CellRule, MatrixFile, is_glob, is_range
from ..model import Accelerator, Cell
from ..torchinstall import TorchInstall
from .ranges import RangeResolution, ServedTorch, resolve_axis


@dataclass(frozen=True, kw_only=True)
class RemovedCell:
    """A requested cell that cannot exist, and why (from the knowledge base)."""

    cell: Cell
    reason: str


# a matrix of thousands of cells has a few dozen values per axis: each is parsed once
_version = functools.lru_cache(maxsize=1024)(Version)
_accelerator = functools.lru_cache(maxsize=1024)(Accelerator.parse)


@functools.lru_cache(maxsize=1024)
def _python(python: str) -> tuple[int, ...]:
    return python_key(python)


def cell_key(cell: Cell) -> tuple[Any, ...]:
    """The order of cells and jobs: torch, current last, accelerator, Python, platform."""
    return (
        _version(cell.torch),
        cell.current,
        _accelerator(cell.accelerator),
        _python(cell.python),
        cell.platform,
    )


def python_key(python: str) -> tuple[int, ...]:
    """'3.10' after '3.9'; the free-threaded '3.14t' right after '3.14'."""
    free_threaded = python.endswith("t")
    return (*(int(p) for p in python.removesuffix("t").split(".")), int(free_threaded))


def _torch_matches(cell: Cell, pattern: str) -> bool:
    """A current cell matches 'current', its exact version and its public version."""
    if not cell.current:
        return pattern != CURRENT and fnmatch.fnmatchcase(cell.torch, pattern)
    if pattern == CURRENT:
        return True
    public = Version(cell.torch).public
    return fnmatch.fnmatchcase(cell.torch, pattern) or fnmatch.fnmatchcase(public, pattern)


def _matches(cell: Cell, rule: CellRule) -> bool:
    for key, pattern in rule.values().items():
        value = getattr(cell, key)
        if pattern == HOST:
            return False  # resolved before matching; an unresolved 'host' matches nothing
        if key == "torch":
            if not _torch_matches(cell, pattern):
                return False
        elif not fnmatch.fnmatchcase(value, pattern):
            return False
    return True


def _current_cell(current: TorchInstall) -> Cell:
    """The one cell `torch: current` stands for: the environment fixes all four keys."""
    return Cell(
        torch=current.version,
        accelerator=current.accelerator,
        python=current.python_xy,
        platform=current.platform,
        current=True,
    )


def _resolve_host(rule: CellRule, host_python: str) -> CellRule:
    if rule.python == HOST:
        return rule.model_copy(update={"python": host_python})
    return rule


def _expand_include(
    mf: MatrixFile, index: int, rule: CellRule, axes: dict[str, list[str]]
) -> list[Cell]:
    choices: dict[str, list[str]] = {}
    for key in CELL_KEYS:
        value = getattr(rule, key)
        if value is None:
            choices[key] = axes[key]
        elif is_glob(value):
            hits = [v for v in axes[key] if fnmatch.fnmatchcase(v, value)]
            if not hits:
                raise ConfigError(
                    mf.error(
                        ("include", index, key),
                        f"{value!r} matches no value of axes.{key} ({', '.join(axes[key])}); "
                        "a glob in include only selects among the axes' values — "
                        "write the value itself to add a new one",
                    )
                )
            choices[key] = hits
        else:
            choices[key] = [value]
    return [
        Cell(torch=t, accelerator=a, python=p, platform=pl)
        for t, a, p, pl in itertools.product(
            choices["torch"], choices["accelerator"], choices["python"], choices["platform"]
        )
    ]


def _torch_axis(kb: Knowledge, values: Sequence[str]) -> list[str]:
    known = kb.torch_versions()
    for value in values:
        if is_range(value):
            try:
                spec = SpecifierSet(value)
            except InvalidSpecifier:
                raise PlanError(
                    f"--torch {value}: not a version range; e.g. '>=2.10' or '>=2.10,<2.15'"
                ) from None
            if not any(spec.contains(v) for v in known):
                raise PlanError(f"--torch {value}: matches no known torch release")
            continue
        if value != CURRENT and value not in known:
            close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise PlanError(
                f"--torch {value}: not a known torch release; allowed: 'current' (the torch of "
                f"the running environment) or {known[0]} … {known[-1]}{hint}"
            )
    return list(dict.fromkeys(values))


def _in_axis(pattern: str | None, values: Sequence[str]) -> bool:
    if pattern is None:
        return True
    return any(v == pattern or (v != CURRENT and fnmatch.fnmatchcase(v, pattern)) for v in values)


def needs_current(mf: MatrixFile, torch_axis: Sequence[str] | None) -> bool:
    """Whether planning this matrix needs the running environment's torch."""
    if torch_axis is not None:
        return CURRENT in torch_axis
    m = mf.matrix
    return CURRENT in m.axes.torch or any(r.torch == CURRENT for r in m.include)


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which cells of the matrix a plan keeps: a profile, `--only` globs, `--torch` values.

    `torch_axis` replaces `axes.torch` (`--torch`); then the default profile is not applied
    and include rules naming another torch are skipped. `strict` fails on a requested cell
    that never existed instead of dropping it.
    """

    profile: str | None = None
    only: Sequence[str] = ()
    strict: bool = False
    torch_axis: Sequence[str] | None = None


@dataclass(frozen=True, kw_only=True)
class MatrixCells:
    """Every cell the matrix names, whatever the profile: what it promises (buildable), what
    it asks for that cannot exist (with the reason), and what its `exclude` rules remove.
    The coverage map (`index.coverage`) is drawn from it."""

    cells: tuple[Cell, ...] = ()
    impossible: tuple[RemovedCell, ...] = ()
    excluded: tuple[Cell, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CellSelection:
    """The cells a plan builds, in build order, and what was dropped on the way."""

    profile: str | None
    cells: tuple[Cell, ...]
    removed: tuple[RemovedCell, ...]
    excluded: int
    matrix: MatrixCells = field(default_factory=MatrixCells)
    ranges: tuple[RangeResolution, ...] = ()


def _expand(
    mf: MatrixFile,
    kb: Knowledge,
    *,
    host_python: str,
    torch_values: Sequence[str],
    torch_axis: Sequence[str] | None,
    current: TorchInstall | None,
) -> tuple[dict[str, Cell], list[Cell]]:
    """The axes' product, less what `exclude` removes (returned apart), plus `include`.

    Without `current`, the cells `torch: current` stands for are left out."""
    m = mf.matrix
    axes = {
        "torch": [t for t in torch_values if t != CURRENT],
        "accelerator": list(m.axes.accelerator),
        "python": [host_python if p == HOST else p for p in m.axes.python],
        "platform": list(m.axes.platform),
    }
    cells: dict[str, Cell] = {}
    for t, a, p, pl in itertools.product(
        axes["torch"], axes["accelerator"], axes["python"], axes["platform"]
    ):
        cell = Cell(torch=t, accelerator=a, python=p, platform=pl)
        cells[cell.id] = cell
    if CURRENT in torch_values and current is not None:
        cell = _current_cell(current)
        cells[cell.id] = cell
    excluded_cells: list[Cell] = []
    for raw_rule in m.exclude:
        rule = _resolve_host(raw_rule, host_python)
        for cid in [cid for cid, c in cells.items() if _matches(c, rule)]:
            excluded_cells.append(cells.pop(cid))

    for i, rule in enumerate(m.include):
        if torch_axis is not None and not _in_axis(rule.torch, torch_values):
            continue  # --torch replaced the axis this rule adds to
        if rule.torch == CURRENT:
            if current is None:
                continue  # matrix_cells: no running environment to stand for
            cell = _current_cell(current)
            if not _matches(cell, _resolve_host(rule, host_python)):
                raise ConfigError(
                    mf.error(
                        ("include", i),
                        f"impossible include: torch: current is {cell.id} (the running "
                        "environment fixes its accelerator, Python and platform); this rule "
                        "asks for another",
                    )
                )
            cells[cell.id] = cell
            continue
        for cell in _expand_include(mf, i, _resolve_host(rule, host_python), axes):
            reason = kb.cell_unavailable_reason(cell) or kb.abi_unavailable_reason(
                m.project.abi, cell.torch
            )
            if reason:
                raise ConfigError(
                    mf.error(("include", i), f"impossible include {cell.id}: {reason}")
                )
            cells[cell.id] = cell

    return cells, excluded_cells


def _reasons(mf: MatrixFile, kb: Knowledge, cells: Mapping[str, Cell]) -> dict[str, str]:
    """Cell id → why it cannot exist (knowledge base, ABI mode), for those that cannot."""
    reasons: dict[str, str] = {}
    for cid, cell in cells.items():
        # the running torch exists by definition; only the ABI mode can rule it out
        known = None if cell.current else kb.cell_unavailable_reason(cell)
        reason = known or kb.abi_unavailable_reason(mf.matrix.project.abi, cell.torch)
        if reason:
            reasons[cid] = reason
    return reasons


def _matrix_cells(
    cells: Mapping[str, Cell], reasons: Mapping[str, str], excluded: Sequence[Cell]
) -> MatrixCells:
    ordered = sorted(
        ((cid, c) for cid, c in cells.items() if not c.current), key=lambda kv: cell_key(kv[1])
    )
    return MatrixCells(
        cells=tuple(c for cid, c in ordered if cid not in reasons),
        impossible=tuple(
            RemovedCell(cell=c, reason=reasons[cid]) for cid, c in ordered if cid in reasons
        ),
        excluded=tuple(sorted((c for c in excluded if not c.current), key=cell_key)),
    )


def matrix_cells(mf: MatrixFile, kb: Knowledge, *, host_python: str) -> MatrixCells:
    """Every cell the matrix names, whatever the profile (`torch: current` left out: the
    running environment's torch is no release an index lists)."""
    values = [t for t in mf.matrix.axes.torch if t != CURRENT]
    torch_values, _ = resolve_axis(values, kb, None, offline_reason="the coverage map")
    cells, excluded = _expand(
        mf, kb, host_python=host_python, torch_values=torch_values, torch_axis=None, current=None
    )
    return _matrix_cells(cells, _reasons(mf, kb, cells), excluded)


def select_cells(
    mf: MatrixFile,
    kb: Knowledge,
    *,
    host_python: str,
    current: TorchInstall | None,
    selection: Selection,
    served: ServedTorch | None = None,
    offline_reason: str | None = None,
) -> CellSelection:
    """Expand axes, apply include/exclude/profile/--only, drop impossible cells (see `plan`).

    `served` is what the package index serves of torch (a host fact fetched by the caller):
    a range of axes.torch resolves to the releases it has; None resolves it against the
    knowledge base alone (`offline_reason` says why, in the plan's note).
    """
    m = mf.matrix
    profile, only, strict = selection.profile, selection.only, selection.strict
    torch_axis = selection.torch_axis
    torch_values = _torch_axis(kb, torch_axis) if torch_axis is not None else list(m.axes.torch)
    torch_values, ranges = resolve_axis(torch_values, kb, served, offline_reason=offline_reason)
    if needs_current(mf, torch_axis) and current is None:
        raise PlanError(
            f"{mf.source.where(('axes', 'torch'))}: axes.torch: 'current' needs the torch of "
            "the running environment, and none was given; run buildtools with that "
            "environment's interpreter or pass --torch-python PATH"
        )
    cells, excluded_cells = _expand(
        mf,
        kb,
        host_python=host_python,
        torch_values=torch_values,
        torch_axis=torch_axis,
        current=current,
    )
    excluded = len(excluded_cells)
    reasons = _reasons(mf, kb, cells)
    matrix = _matrix_cells(cells, reasons, excluded_cells)

    all_cells = dict(cells)
    if profile is None and torch_axis is None:
        profile = m.default_profile
    if profile is not None:
        if profile not in m.profiles:
            names = sorted(m.profiles)
            close = difflib.get_close_matches(profile, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise PlanError(
                f"{mf.source.where(('profiles',))}: profiles: no profile named {profile!r}; "
                f"defined: {', '.join(names) or '(none)'}{hint}"
            )
        rules = [_resolve_host(r, host_python) for r in m.profiles[profile].select]
        if rules:
            cells = {cid: c for cid, c in cells.items() if any(_matches(c, r) for r in rules)}
            # only what the rules removed from this profile's cells is worth reporting
            excluded = sum(1 for c in excluded_cells if any(_matches(c, r) for r in rules))

    removed: list[RemovedCell] = []
    for cid in sorted(cells, key=lambda k: cell_key(cells[k])):
        reason = reasons.get(cid)
        if reason:
            removed.append(RemovedCell(cell=cells[cid], reason=reason))
            del cells[cid]
    if strict and removed:
        lines = "\n".join(f"  {r.cell.id}: {r.reason}" for r in removed)
        raise PlanError(
            f"{mf.source.where(('axes',))}: axes: --strict: {len(removed)} requested cell(s) never "
            f"existed:\n{lines}\nremove them with an `exclude:` rule or narrow the axes"
        )

    only = tuple(only)
    if only:
        selected = {
            cid: c for cid, c in cells.items() if any(fnmatch.fnmatchcase(cid, g) for g in only)
        }
        if not selected:
            sample = ", ".join(sorted(cells)[:6]) or "(none)"
            elsewhere = _profiles_with(mf, kb, all_cells, only, host_python, skip=profile)
            hint = (
                f"; it is in profile{'s' if len(elsewhere) > 1 else ''} "
                f"{', '.join(repr(p) for p in elsewhere)}: add "
                f"--profile {elsewhere[0]}"
                if elsewhere
                else ""
            )
            where = f"profile {profile!r}" if profile else "this plan"
            raise PlanError(
                f"--only {' '.join(only)}: matches no cell of {where}{hint}; cells: {sample}"
            )
        cells = selected

    if not cells:
        where = f"profile {profile!r}" if profile else "the matrix"
        empty = [r for r in ranges if not r.versions]
        if empty:
            raise PlanError(
                f"{mf.source.where(('axes', 'torch'))}: axes.torch: {empty[0].spec!r} resolves "
                f"to no release ({empty[0].note}); left out: "
                + "; ".join(f"{v}: {why}" for v, why in empty[0].left_out)
            )
        raise PlanError(
            f"{mf.source.where(('profiles', profile) if profile else ('axes',))}: {where} "
            "selects no buildable cell; check axes, exclude and the profile's select rules"
            + (f" ({len(removed)} removed as impossible, see `buildtools plan`)" if removed else "")
        )
    return CellSelection(
        profile=profile,
        cells=tuple(sorted(cells.values(), key=cell_key)),
        removed=tuple(removed),
        excluded=excluded,
        matrix=matrix,
        ranges=tuple(ranges),
    )


def _profiles_with(
    mf: MatrixFile,
    kb: Knowledge,
    cells: Mapping[str, Cell],
    only: Sequence[str],
    host_python: str,
    *,
    skip: str | None,
) -> list[str]:
    """The profiles (other than `skip`) with a buildable cell that the `--only` globs match."""
    wanted = [
        c
        for cid, c in cells.items()
        if any(fnmatch.fnmatchcase(cid, g) for g in only)
        and (c.current or kb.cell_unavailable_reason(c) is None)
        and kb.abi_unavailable_reason(mf.matrix.project.abi, c.torch) is None
    ]
    found: list[str] = []
    for name in sorted(mf.matrix.profiles):
        if name == skip:
            continue
        rules = [_resolve_host(r, host_python) for r in mf.matrix.profiles[name].select]
        if any(not rules or any(_matches(c, r) for r in rules) for c in wanted):
            found.append(name)
    # the profile that builds everything is the least surprising suggestion
    return sorted(found, key=lambda n: (bool(mf.matrix.profiles[n].select), n))
