"""Merging new wheels into a published site: everything stays, nothing changes its bytes.

A wheel is known by its identity (`IndexedWheel.identity`: PEP 503 name, canonical version,
tags), not by the spelling of its file name: a `Hostile_X-1.0…whl` beside a published
`hostile_x-1.0…whl` is the same wheel to pip, so it is a conflict like other bytes under
the same name, whatever its bytes.

Pure: the result is decided before anything is written, so a conflict leaves the site
untouched.
"""

from __future__ import annotations

__all__ = ["MergeResult", "merge"]

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ImmutableWheelError
from .manifest import IndexedWheel
from .wheels import WheelSource


@dataclass(frozen=True, kw_only=True)
class MergeResult:
    wheels: tuple[IndexedWheel, ...]  # everything the new site lists, sorted by file name
    added: tuple[WheelSource, ...]
    unchanged: tuple[str, ...]
    # (file name, why): rebuilt from the same inputs (same job fingerprint) into other bytes,
    # where the toolchain is not byte-reproducible; the published wheel stays
    same_inputs: tuple[tuple[str, str], ...] = ()


def merge(published: Sequence[IndexedWheel], new: Sequence[WheelSource]) -> MergeResult:
    """The published wheels plus the new ones; the same name with other bytes is an error.

    Unless both build records carry the same job fingerprint: then the same sources, torch,
    toolchain and settings gave other bytes (a compiler that embeds something of the build),
    which is not a conflict. The published wheel stays and the result says so.
    """
    by_name = {w.filename: w for w in published}
    by_identity = {w.identity: w for w in published}
    added_identity: dict[object, WheelSource] = {}
    added: dict[str, WheelSource] = {}
    unchanged: set[str] = set()
    same_inputs: dict[str, str] = {}
    conflicts: list[str] = []
    for src in new:
        name, sha = src.wheel.filename, src.wheel.sha256
        old = by_name.get(name)
        if old is not None:
            if old.sha256 != sha and old.fingerprint and old.fingerprint == src.wheel.fingerprint:
                same_inputs[name] = (
                    f"same inputs as the published wheel (fingerprint {old.fingerprint[:12]}), "
                    f"other bytes (sha256 {sha[:12]}, published {old.sha256[:12]}): this "
                    "toolchain's build is not byte-reproducible; the published wheel stays"
                )
            elif old.sha256 != sha:
                conflicts.append(
                    f"{name}: published with sha256 {old.sha256}, the new file ({src.path}) "
                    f"has sha256 {sha}"
                )
            else:
                unchanged.add(name)
            continue
        twin = by_identity.get(src.wheel.identity)
        if twin is not None:
            conflicts.append(
                f"{name}: the site publishes {twin.filename}, the same project, version and "
                f"tags spelled otherwise (pip cannot tell them apart); the new file ({src.path}) "
                f"has sha256 {sha}, the published one {twin.sha256}"
            )
            continue
        sibling = added_identity.setdefault(src.wheel.identity, src)
        if sibling.wheel.filename != name:
            conflicts.append(
                f"{name}: two inputs are one wheel to pip: {sibling.path} and {src.path} "
                "(the same project, version and tags spelled otherwise)"
            )
            continue
        other = added.get(name)
        if other is not None and other.wheel.sha256 != sha:
            conflicts.append(
                f"{name}: two inputs differ: {other.path} has sha256 {other.wheel.sha256}, "
                f"{src.path} has sha256 {sha}"
            )
            continue
        added.setdefault(name, src)
    if conflicts:
        raise ImmutableWheelError(
            "published wheels are immutable; nothing was written:\n  "
            + "\n  ".join(conflicts)
            + "\n(bump the version, or rebuild exactly the published wheel)"
        )
    merged = sorted([*published, *(s.wheel for s in added.values())], key=lambda w: w.filename)
    return MergeResult(
        wheels=tuple(merged),
        added=tuple(added[n] for n in sorted(added)),
        unchanged=tuple(sorted(unchanged)),
        same_inputs=tuple(sorted(same_inputs.items())),
    )
