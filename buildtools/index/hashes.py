"""Which wheel hashes publishing may take without reading the wheel again.

Hashing every wheel of a large wheelhouse on every publish is most of its cost, and the
hash is usually known already, from two records buildtools wrote itself:

- the build report next to the wheels (`report.json`: each built wheel's sha256, size and
  modification time, taken when `buildtools build` moved it into the wheelhouse);
- the manifest of the site being merged into (`index.json`: each published wheel's sha256
  and size), for a wheel whose file is the site's own copy of it: the same size and
  modification time as the file the site serves (publishing keeps a wheel's mtime).

A known hash is taken only when the file still has the size and modification time it had
when the hash was made (the cheap re-verification rsync and make rely on); `--verify`
takes none and hashes every wheel. `trusted_sha256` decides (pure); the readers below
gather what it decides on.
"""

from __future__ import annotations

__all__ = ["REPORT_NAME", "KnownHash", "manifest_hashes", "report_hashes", "trusted_sha256"]

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..files import read_regular
from ..jsonfields import decode_json
from .manifest import MANIFEST_MAX_BYTES, IndexedWheel
from .pages import WHEELS_DIR

REPORT_NAME = "report.json"  # what `buildtools build` writes into the wheelhouse
_REPORT_SCHEMA = "torch-buildtools/run-report/v1"
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class KnownHash:
    """A wheel's sha256 as a record gives it, with the file's size and mtime back then."""

    sha256: str
    size: int
    mtime_ns: int
    source: str  # "report" | "manifest": where it came from (for messages and tests)


def trusted_sha256(known: KnownHash | None, st: os.stat_result, *, verify: bool) -> str | None:
    """The known hash when the file is still as it was hashed; None: hash it (pure)."""
    if verify or known is None:
        return None
    if st.st_size != known.size or st.st_mtime_ns != known.mtime_ns:
        return None
    return known.sha256


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def report_hashes(directory: Path) -> dict[str, KnownHash]:
    """Wheel file name → its hash, from the build report in `directory` (if any).

    Only entries for wheels of that directory count, and only complete ones: a report
    from an older buildtools (no mtime) or a damaged one gives nothing, never an error.
    """
    try:
        raw = read_regular(directory / REPORT_NAME, max_bytes=MANIFEST_MAX_BYTES)
        data = decode_json(raw, what=REPORT_NAME)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != _REPORT_SCHEMA:
        return {}
    found: dict[str, KnownHash] = {}
    here = directory.resolve()
    parents: dict[Path, bool] = {}  # a report's wheels share one directory: resolve it once
    for cell in data.get("cells") or []:
        if not isinstance(cell, dict) or not isinstance(cell.get("wheel"), str):
            continue
        wheel = Path(cell["wheel"])
        if wheel.parent not in parents:
            parents[wheel.parent] = wheel.parent.resolve() == here
        sha, size, mtime = cell.get("sha256"), _int(cell.get("size")), _int(cell.get("mtime_ns"))
        if (
            not parents[wheel.parent]
            or not isinstance(sha, str)
            or not _SHA256_RE.fullmatch(sha)
            or size is None
            or mtime is None
        ):
            continue
        found[wheel.name] = KnownHash(sha256=sha, size=size, mtime_ns=mtime, source="report")
    return found


def manifest_hashes(
    site: Path, published: Iterable[IndexedWheel], wanted: Iterable[str]
) -> dict[str, KnownHash]:
    """Wheel file name → its published hash, for the `wanted` names the site hosts.

    The size and mtime are those of the site's own file: a wheel elsewhere with the same
    size and mtime is the same file (published by a hard link or reflink, or copied with
    its mtime), so it is unchanged without being read.
    """
    by_name: Mapping[str, IndexedWheel] = {w.filename: w for w in published if w.url is None}
    found: dict[str, KnownHash] = {}
    for name in wanted:
        entry = by_name.get(name)
        if entry is None:
            continue
        try:
            st = (site / WHEELS_DIR / name).stat()
        except OSError:
            continue
        if st.st_size == entry.size:
            found[name] = KnownHash(
                sha256=entry.sha256, size=entry.size, mtime_ns=st.st_mtime_ns, source="manifest"
            )
    return found
