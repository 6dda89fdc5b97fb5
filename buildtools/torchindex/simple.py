"""A project's files on a package index, from its PEP 691 JSON simple page.

The page is hostile until checked: every file entry is validated (a wheel file name that
parses, an https/http URL, a sha256 of 64 hex digits, a size) and an entry that fails is
reported, never half-read. The page's own `versions` list is not trusted (a mirror may
serve a stale one); releases are derived from the files themselves.
"""

from __future__ import annotations

__all__ = ["SIMPLE_JSON", "IndexFile", "ProjectPage", "parse_simple_json"]

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from ..errors import NetworkError
from ..jsonfields import decode_json

# PEP 691: the JSON form of the simple API, asked for with this Accept header
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_URL_RE = re.compile(r"^https?://[^\s\"'<>\\`]+$")


@dataclass(frozen=True, kw_only=True)
class IndexFile:
    """One wheel of a project as the index lists it."""

    filename: str
    url: str
    sha256: str
    size: int | None
    version: Version
    build: tuple[int, str] | tuple[()]
    tags: frozenset[Tag]
    yanked: bool = False
    # PEP 658/714: the METADATA is served at url + '.metadata', with this sha256 if given
    core_metadata: bool = False
    core_metadata_sha256: str | None = None

    @property
    def platforms(self) -> frozenset[str]:
        return frozenset(t.platform for t in self.tags)


@dataclass(frozen=True, kw_only=True)
class ProjectPage:
    """The wheels of one project on one index; sdists and other files are not kept."""

    name: str
    url: str
    files: tuple[IndexFile, ...]

    def releases(self) -> dict[Version, tuple[IndexFile, ...]]:
        """Final releases (no pre-, dev- or yanked-only ones) → their non-yanked wheels."""
        out: dict[Version, list[IndexFile]] = {}
        for f in self.files:
            if f.yanked or f.version.is_prerelease or f.version.is_devrelease:
                continue
            out.setdefault(f.version, []).append(f)
        return {v: tuple(out[v]) for v in sorted(out)}


def _core_metadata(entry: Mapping[str, Any]) -> tuple[bool, str | None]:
    # PEP 714 renamed data-dist-info-metadata to core-metadata; both may appear
    value = entry.get("core-metadata", entry.get("data-dist-info-metadata", False))
    if isinstance(value, dict):
        digest = value.get("sha256")
        return True, digest if isinstance(digest, str) and _SHA256_RE.match(digest) else None
    return bool(value is True), None


def _file(entry: Any, base: str) -> IndexFile | None:
    """One `files` entry as an IndexFile; None for a non-wheel; ValueError when malformed."""
    if not isinstance(entry, dict):
        raise ValueError("a file entry is not an object")
    name = entry.get("filename")
    if not isinstance(name, str) or "/" in name or "\\" in name:
        raise ValueError(f"filename: {name!r} is not a file name")
    if not name.endswith(".whl"):
        return None
    try:
        _, version, build, tags = parse_wheel_filename(name)
    except InvalidWheelFilename as exc:
        raise ValueError(f"{name}: {exc}") from None
    url = entry.get("url")
    if not isinstance(url, str):
        raise ValueError(f"{name}: url: missing")
    if not _URL_RE.match(url):
        raise ValueError(f"{name}: url: {url!r} is not an absolute http(s) URL")
    hashes = entry.get("hashes")
    digest = hashes.get("sha256") if isinstance(hashes, dict) else None
    if not isinstance(digest, str) or not _SHA256_RE.match(digest):
        raise ValueError(f"{name}: hashes.sha256: expected 64 hexadecimal digits")
    size = entry.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise ValueError(f"{name}: size: expected a byte count")
    yanked = entry.get("yanked", False)
    has_metadata, metadata_sha = _core_metadata(entry)
    return IndexFile(
        filename=name,
        url=url,
        sha256=digest,
        size=size,
        version=version,
        build=build,
        tags=tags,
        yanked=bool(yanked),
        core_metadata=has_metadata,
        core_metadata_sha256=metadata_sha,
    )


def parse_simple_json(body: bytes, *, url: str, project: str) -> ProjectPage:
    """The wheels a PEP 691 page lists; NetworkError naming the URL and the entry otherwise."""
    try:
        data = decode_json(body, what="the page")
    except ValueError as exc:
        raise NetworkError(f"{url}: not a PEP 691 JSON page ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise NetworkError(f"{url}: not a PEP 691 JSON page (no 'files' list)")
    meta = data.get("meta")
    version = meta.get("api-version") if isinstance(meta, dict) else None
    if not isinstance(version, str) or not version.startswith("1."):
        raise NetworkError(f"{url}: meta.api-version {version!r}: only version 1.x is understood")
    name = data.get("name")
    if not isinstance(name, str) or canonicalize_name(name) != canonicalize_name(project):
        raise NetworkError(f"{url}: the page is for {name!r}, not {project!r}")
    files: list[IndexFile] = []
    for i, entry in enumerate(data["files"]):
        try:
            found = _file(entry, url)
        except ValueError as exc:
            raise NetworkError(f"{url}: files[{i}]: {exc}") from None
        if found is not None:
            if canonicalize_name(found.filename.split("-")[0]) != canonicalize_name(project):
                raise NetworkError(f"{url}: files[{i}]: {found.filename} is not a {project} wheel")
            files.append(found)
    return ProjectPage(name=name, url=url, files=tuple(files))
