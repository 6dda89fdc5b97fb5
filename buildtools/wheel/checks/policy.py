"""auditwheel's manylinux/musllinux policies: which symbol versions a platform tag allows.

Read from the auditwheel installed beside buildtools, the same data `auditwheel repair` and
`auditwheel show` judge by, so the check and the repair never disagree about a tag.
"""

from __future__ import annotations

__all__ = ["Policy", "policy_for", "strictest", "system_version_prefixes", "version_prefix"]

import functools
import importlib.resources
import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..meta import PlatformTag


@dataclass(frozen=True, kw_only=True)
class Policy:
    """The symbol versions one platform tag allows, per version-node prefix (GLIBC, GLIBCXX…)."""

    name: str
    symbol_versions: Mapping[str, frozenset[str]]


@functools.lru_cache(maxsize=1)
def _policy_json() -> tuple[dict[str, object], ...]:
    out: list[dict[str, object]] = []
    base = importlib.resources.files("auditwheel") / "policy"
    for name in ("manylinux-policy.json", "musllinux-policy.json"):
        entry = base / name
        if entry.is_file():
            out += json.loads(entry.read_text())
    return tuple(out)


def policy_for(tag: str) -> Policy | None:
    """auditwheel's policy for one platform tag (None for 'linux_*' or unknown tags)."""
    try:
        parsed = PlatformTag.parse(tag)
    except ValueError:
        return None
    if parsed.family == "linux" or parsed.libc is None:
        return None
    name = f"{parsed.family}_{parsed.libc[0]}_{parsed.libc[1]}"
    for policy in _policy_json():
        if policy.get("name") == name:
            versions = policy.get("symbol_versions")
            by_arch = versions.get(parsed.arch, {}) if isinstance(versions, dict) else {}
            return Policy(
                name=name,
                symbol_versions={k: frozenset(v) for k, v in dict(by_arch).items()},
            )
    return None


@functools.lru_cache(maxsize=1)
def system_version_prefixes() -> frozenset[str]:
    """Version-node prefixes of the system libraries auditwheel allows (GLIBC, GLIBCXX…)."""
    out: set[str] = set()
    for policy in _policy_json():
        versions = policy.get("symbol_versions")
        if isinstance(versions, dict):
            for by_arch in versions.values():
                out |= set(dict(by_arch))
    return frozenset(out or {"GLIBC", "GLIBCXX", "CXXABI", "GCC", "LIBATOMIC", "ZLIB"})


def version_prefix(version: str) -> tuple[str, str]:
    """'GLIBC_2.32' → ('GLIBC', '2.32')."""
    prefix, _, rest = version.partition("_")
    return prefix, rest


def strictest(tag_set: str) -> str:
    """Of a dotted tag set, the tag with the lowest libc floor (what the set claims)."""
    tags = tag_set.split(".")

    def key(tag: str) -> tuple[int, int]:
        try:
            libc = PlatformTag.parse(tag).libc
        except ValueError:
            return (999, 999)
        return libc if libc is not None else (999, 999)

    return min(tags, key=key)
