"""Torch ranges in matrix.yaml: `torch: ">=2.10"` resolved to releases, and why others not.

A range stands for every release the knowledge base knows and the package index serves,
the newest patch of each minor: a torch release becomes new cells without editing
matrix.yaml. What the index serves is a host fact (`ServedTorch`), fetched and cached by
the caller (`planning.load_plan`); the planner stays pure. Without it (offline, or asked
not to) a range resolves against the knowledge base alone, and the resolution says so.
"""

from __future__ import annotations

__all__ = ["RangeResolution", "ServedTorch", "is_range", "resolve_axis", "resolve_range"]

from collections.abc import Sequence
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..knowledge import Knowledge
from ..matrix.config import is_range


@dataclass(frozen=True, kw_only=True)
class ServedTorch:
    """The torch releases the package index serves (a host fact, fetched by the caller)."""

    versions: frozenset[str]
    source: str  # 'https://pypi.org/simple/torch/ (asked 2026-11-25 23:54 UTC)'


@dataclass(frozen=True, kw_only=True)
class RangeResolution:
    """What one range of axes.torch stands for, and every known release it left out."""

    spec: str
    versions: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (release, why)
    note: str  # where the served releases came from, or why the index was not asked


def resolve_range(
    spec: str, kb: Knowledge, served: ServedTorch | None, *, offline_reason: str | None = None
) -> RangeResolution:
    """The newest served patch of every known minor inside `spec`."""
    specifier = SpecifierSet(spec)
    known = [v for v in kb.torch_versions() if specifier.contains(v)]
    left_out: list[tuple[str, str]] = []
    servable: list[str] = []
    for version in known:
        if served is not None and version not in served.versions:
            left_out.append((version, "not served by the package index"))
        else:
            servable.append(version)
    newest: dict[str, str] = {}
    for version in servable:
        v = Version(version)
        newest[f"{v.major}.{v.minor}"] = version  # sorted: the last one is the newest
    chosen = tuple(newest.values())
    for version in servable:
        if version not in chosen:
            v = Version(version)
            left_out.append((version, f"not the newest {v.major}.{v.minor} patch"))
    if served is not None:
        unknown = sorted(
            (v for v in served.versions if specifier.contains(v) and v not in kb.torch_versions()),
            key=Version,
        )
        for version in unknown:
            left_out.append(
                (
                    version,
                    "served by the index but not in the knowledge base (a newer "
                    "torch-buildtools, or `buildtools knowledge --check-index`, adds it)",
                )
            )
        note = f"releases served by {served.source}"
    else:
        note = (
            f"the package index was not asked ({offline_reason or 'offline'}): resolved "
            "against the knowledge base alone"
        )
    left_out.sort(key=lambda item: Version(item[0]))
    return RangeResolution(spec=spec, versions=chosen, left_out=tuple(left_out), note=note)


def resolve_axis(
    values: Sequence[str],
    kb: Knowledge,
    served: ServedTorch | None,
    *,
    offline_reason: str | None = None,
) -> tuple[list[str], list[RangeResolution]]:
    """axes.torch with every range replaced by its releases (in order, without repeats)."""
    out: list[str] = []
    ranges: list[RangeResolution] = []
    for value in values:
        if is_range(value):
            resolution = resolve_range(value, kb, served, offline_reason=offline_reason)
            ranges.append(resolution)
            out += resolution.versions
        else:
            out.append(value)
    return list(dict.fromkeys(out)), ranges
