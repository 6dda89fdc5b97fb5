"""Reading the wheels to publish: hash, METADATA and build record, checked against the name.

The only module of the index that opens a wheel; everything after it works on the
`IndexedWheel` record it returns.
"""

from __future__ import annotations

__all__ = ["WheelSource", "collect_wheels", "read_wheel", "read_wheels", "wheel_url"]

import functools
import hashlib
import multiprocessing
import os
import stat
import sys
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import PublishError
from ..files import NotRegularFileError, describe_os_error, file_kind
from ..wheel.archive import ArchiveError, open_wheel
from ..wheel.meta import BUILD_RECORD_BYTES, BUILD_RECORD_NAME, parse_build_record
from .hashes import KnownHash, manifest_hashes, report_hashes, trusted_sha256
from .manifest import IndexedWheel, read_manifest
from .pages import WHEELS_DIR


@dataclass(frozen=True, kw_only=True)
class WheelSource:
    """A wheel to publish: its record, where it is, and its METADATA bytes (PEP 658)."""

    wheel: IndexedWheel
    path: Path
    metadata: bytes
    # the file's size and mtime when it was read: publishing checks them again (cheaply)
    # before it links the file into the site
    size: int | None = None
    mtime_ns: int | None = None


@functools.lru_cache(maxsize=4096)
def _torch_requirement(value: str) -> str | None:
    """The specifier of one Requires-Dist value when it is an unconditional torch requirement.

    Cached: the wheels of one project share a handful of requirement lines.
    """
    if not value.lstrip().lower().startswith("torch"):
        return None  # not torch (its name has no separator to normalise): no parse needed
    try:
        req = Requirement(value)
    except InvalidRequirement:
        return None
    if canonicalize_name(req.name) == "torch" and (
        req.marker is None or "extra" not in str(req.marker)
    ):
        return str(req.specifier)
    return None


@functools.lru_cache(maxsize=4096)
def _public(version: str) -> str:
    """The public part of a version (InvalidVersion for a bad one); cached like the above."""
    return Version(version).public


def _torch_spec(requires: Iterable[str]) -> str | None:
    """The unconditional torch requirement of METADATA's Requires-Dist, as one specifier."""
    specs = [s for s in (_torch_requirement(v) for v in requires) if s]
    return ",".join(specs) or None


def wheel_url(template: str, wheel: IndexedWheel) -> str:
    """Fill a `--wheel-url` template for one wheel."""
    return template.format(
        filename=quote(wheel.filename, safe=""),
        project=wheel.project,
        version=wheel.version,
        public_version=Version(wheel.version).public,
    )


def read_wheel(
    path: Path,
    *,
    wheel_url_template: str | None = None,
    known: KnownHash | None = None,
    verify: bool = False,
) -> WheelSource:
    """Hash `path` and read its METADATA and build record; PublishError names what is wrong.

    `known`: a hash a record gives for it, taken instead of hashing when the file still has
    the size and mtime it had then (`hashes.trusted_sha256`; never with `verify`).
    """
    try:
        with open_wheel(path) as archive:
            st = archive.stat
            trusted = trusted_sha256(known, st, verify=verify)
            if trusted is None:
                sha, size = archive.sha256()
                archive.verify()  # its bytes are read anyway: inflate every member too
            else:
                sha, size = trusted, st.st_size
            metadata, headers = archive.metadata, archive.fields
            raw_record = archive.read_optional(
                f"{archive.dist_info}/{BUILD_RECORD_NAME}", max_bytes=BUILD_RECORD_BYTES
            )
            if raw_record is None:
                raise ValueError(
                    f"no {archive.dist_info}/{BUILD_RECORD_NAME}: the index needs the build "
                    "record `buildtools build` writes (torch version, accelerator)"
                )
    except NotRegularFileError as exc:
        raise PublishError(describe_os_error(exc)) from exc
    except ArchiveError as exc:
        raise PublishError(f"{path}: {exc.problem}") from exc
    except (OSError, ValueError) as exc:
        raise PublishError(f"{path}: {exc}") from exc
    try:
        record = parse_build_record(raw_record)
    except ValueError as exc:
        raise PublishError(f"{path}: {exc}") from exc
    name = headers["name"][0]
    version = headers["version"][0]
    try:
        torch = _public(record.torch)
        versions = record.torch_versions or [torch]
        public = {_public(v) for v in versions}
        torch_versions = tuple(public) if len(public) == 1 else tuple(sorted(public, key=Version))
    except (InvalidVersion, ValueError) as exc:
        raise PublishError(f"{path}: {exc}") from exc
    requires_python = next(iter(headers.get("requires-python", [])), None)
    wheel = IndexedWheel(
        filename=path.name,
        sha256=sha,
        size=size,
        name=name,
        version=version,
        requires_python=str(requires_python).strip() if requires_python else None,
        metadata_sha256=hashlib.sha256(metadata).hexdigest(),
        torch=torch,
        torch_versions=torch_versions,
        torch_specifier=_torch_spec(headers.get("requires-dist", [])),
        accelerator=record.accelerator.name,
        fingerprint=record.fingerprint,
    )
    if wheel_url_template is not None:
        wheel = replace(wheel, url=wheel_url(wheel_url_template, wheel))
    return WheelSource(
        wheel=wheel, path=path, metadata=metadata, size=st.st_size, mtime_ns=st.st_mtime_ns
    )


def read_wheels(
    paths: Sequence[Path],
    *,
    site: Path | None = None,
    wheel_url_template: str | None = None,
    verify: bool = False,
) -> list[WheelSource]:
    """`read_wheel` of each path, reusing the hashes buildtools recorded (see `hashes`).

    A wheel the site at `site` already publishes, as this very file (same size and mtime
    as the site's copy), is taken from the site's manifest without being opened: it is
    unchanged. Another wheel's hash comes from the build report beside it when that still
    matches. With `verify`, every wheel is read and hashed.
    """
    published: dict[str, IndexedWheel] = {}
    from_site: dict[str, KnownHash] = {}
    # the manifest is read only when the site hosts one of these names already
    if (
        site is not None
        and not verify
        and any((site / WHEELS_DIR / p.name).exists() for p in paths)
    ):
        try:
            wheels = read_manifest(site).wheels
        except PublishError:
            wheels = ()  # publish() reports a damaged site; here it only means no reuse
        published = {w.filename: w for w in wheels}
        from_site = manifest_hashes(site, wheels, (p.name for p in paths))
    reports: dict[Path, dict[str, KnownHash]] = {}
    out: list[WheelSource | None] = []
    to_read: list[tuple[int, _ReadTask]] = []
    for path in paths:
        if not verify and path.parent not in reports:
            reports[path.parent] = report_hashes(path.parent)
        st = _stat(path)
        if st is not None and trusted_sha256(from_site.get(path.name), st, verify=verify):
            out.append(
                WheelSource(
                    wheel=published[path.name],
                    path=path,
                    metadata=b"",  # unchanged: its .metadata file is published already
                    size=st.st_size,
                    mtime_ns=st.st_mtime_ns,
                )
            )
            continue
        known = None if verify else reports[path.parent].get(path.name)
        to_read.append((len(out), (path, wheel_url_template, known, verify)))
        out.append(None)
    for index, source in zip(
        (i for i, _ in to_read), _read_all([t for _, t in to_read]), strict=True
    ):
        out[index] = source
    return [s for s in out if s is not None]


_ReadTask = tuple[Path, "str | None", "KnownHash | None", bool]

PARALLEL_FROM = 2000
"""Wheels to open before reading them in parallel processes: below it, starting the
processes costs more than they save (a wheel takes ~0.2 ms to read)."""
_CHUNK = 500


def _read_chunk(tasks: Sequence[_ReadTask]) -> list[WheelSource]:
    return [read_wheel(p, wheel_url_template=t, known=k, verify=v) for p, t, k, v in tasks]


def _workers() -> int:
    """Processes for reading, or 1: forking is only safe from a single-threaded process
    (the CLI is; a test runner or an embedding application may not be)."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return 1
    return min(len(os.sched_getaffinity(0)), 8)


def _read_all(tasks: Sequence[_ReadTask]) -> list[WheelSource]:
    """`read_wheel` of each task, in order; large wheelhouses (thousands of wheels: opening
    each zip is Python work) in forked processes, one chunk of wheels each. The first
    error in task order is raised, as a sequential read would."""
    workers = _workers()
    if len(tasks) < PARALLEL_FROM or workers < 2:
        return _read_chunk(tasks)
    chunks = [tasks[i : i + _CHUNK] for i in range(0, len(tasks), _CHUNK)]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return [source for chunk in pool.map(_read_chunk, chunks) for source in chunk]


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def collect_wheels(paths: Sequence[Path]) -> list[Path]:
    """The wheels named, and every `*.whl` directly inside the directories named; sorted.
    A FIFO, device or socket (or a link to one) is refused by its type, named or found."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            with os.scandir(path) as entries:  # the entry's type, without a stat per file
                inside = [e for e in entries if e.name.endswith(".whl")]
            for entry in inside:
                if not entry.is_file(follow_symlinks=False):  # a link is stat'ed, once
                    _check_regular(Path(entry.path))
            found += sorted(path / e.name for e in inside)
        elif path.name.endswith(".whl") and (path.exists() or path.is_symlink()):
            _check_regular(path)
            found.append(path)
        else:
            raise PublishError(f"{path}: no such wheel or directory")
    return found


def _check_regular(path: Path) -> None:
    """PublishError unless `path` is a regular file (or a link to one): one stat, so a
    wheelhouse of 10,000 costs milliseconds; the reader checks the open file again."""
    try:
        mode = os.stat(path).st_mode  # noqa: PTH116 (the fast call)
    except OSError as exc:
        raise PublishError(describe_os_error(exc)) from None
    if not stat.S_ISREG(mode):
        raise PublishError(describe_os_error(NotRegularFileError(path, file_kind(mode))))
