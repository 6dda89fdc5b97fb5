"""What the package index serves of torch, and the knowledge base checked against it.

`simple` reads a PEP 691 page, `remote` a wheel's METADATA without the wheel (PEP 658, else
HTTP range requests), `served` the facts of one release, `compare` those facts against
buildtools/data, `client` the cache in front of the index, `propose` a data row for a
release the knowledge base does not have yet. Every request goes through `http.Http`.
"""

from __future__ import annotations

__all__ = [
    "CheckReport",
    "Difference",
    "IndexReader",
    "ServedRelease",
    "check_index",
    "served_releases",
    "served_versions",
]

from collections.abc import Sequence

from packaging.version import Version

from ..knowledge import Knowledge
from ..knowledge.load import release_locator
from .compare import CheckReport, Difference, compare
from .indexcache import IndexReader, PageAnswer
from .served import ServedRelease, describe_release

PROJECT = "torch"


def served_releases(
    reader: IndexReader,
    *,
    since: str | None = None,
    metadata: bool = True,
    stale_ok: bool = False,
) -> tuple[list[ServedRelease], PageAnswer]:
    """Every final torch release the index serves (from `since`'s minor on, when given);
    `metadata`: read each one's METADATA too (its CUDA pins); `stale_ok`: an expired
    cached page answers when the index cannot be reached."""
    answer = reader.page(PROJECT, stale_ok=stale_ok)
    floor = Version(since) if since else None
    out = []
    for version, files in answer.page.releases().items():
        if floor is not None and Version(f"{version.major}.{version.minor}") < floor:
            out.append(describe_release(version, files, metadata=None))
            continue
        out.append(describe_release(version, files, metadata=reader.metadata if metadata else None))
    return out, answer


def check_index(
    kb: Knowledge, reader: IndexReader, *, since: str | None = None
) -> tuple[CheckReport, PageAnswer]:
    """The knowledge base against the index (see `compare`); `since`: from that minor on."""
    oldest = next(iter(kb.torch))
    floor = max((oldest, since or oldest), key=Version)
    served, answer = served_releases(reader, since=floor)
    return compare(kb, served, release_locator(kb.data_dir), since=since), answer


def served_versions(releases: Sequence[ServedRelease]) -> frozenset[str]:
    """The release versions with at least one Linux wheel."""
    return frozenset(r.version for r in releases if r.platforms)
