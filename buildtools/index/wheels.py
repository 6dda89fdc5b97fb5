"""Reading the wheels to publish: hash, METADATA and build record, checked against the name.

The only module of the index that opens a wheel; everything after it works on the
`IndexedWheel` record it returns.
"""

from __future__ import annotations

__all__ = ["WheelSource", "collect_wheels", "read_wheel", "wheel_url"]

import hashlib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from email.parser import BytesHeaderParser
from pathlib import Path
from urllib.parse import quote

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import PublishError
from ..files import check_member_names
from ..wheel.meta import BUILD_RECORD_NAME, WheelName, parse_build_record
from .manifest import IndexedWheel


@dataclass(frozen=True, kw_only=True)
class WheelSource:
    """A wheel to publish: its record, where it is, and its METADATA bytes (PEP 658)."""

    wheel: IndexedWheel
    path: Path
    metadata: bytes


def _sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _dist_info(names: Iterable[str]) -> str | None:
    found = {
        n.split("/", 1)[0]
        for n in names
        if n.count("/") == 1
        and n.endswith("/METADATA")
        and n.split("/", 1)[0].endswith(".dist-info")
    }
    return found.pop() if len(found) == 1 else None


def _torch_spec(requires: Iterable[str]) -> str | None:
    """The unconditional torch requirement of METADATA's Requires-Dist, as one specifier."""
    specs: list[str] = []
    for value in requires:
        try:
            req = Requirement(value)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "torch" and (
            req.marker is None or "extra" not in str(req.marker)
        ):
            specs.append(str(req.specifier))
    return ",".join(s for s in specs if s) or None


def wheel_url(template: str, wheel: IndexedWheel) -> str:
    """Fill a `--wheel-url` template for one wheel."""
    return template.format(
        filename=quote(wheel.filename, safe=""),
        project=wheel.project,
        version=wheel.version,
        public_version=Version(wheel.version).public,
    )


def read_wheel(path: Path, *, wheel_url_template: str | None = None) -> WheelSource:
    """Hash `path` and read its METADATA and build record; PublishError names what is wrong."""
    try:
        wname = WheelName.parse(path.name)
        sha, size = _sha256(path)
        with zipfile.ZipFile(path) as zf:
            check_member_names(zf.namelist(), what=path.name)  # a zip-slip wheel is refused
            dist_info = _dist_info(zf.namelist())
            if dist_info is None:
                raise ValueError("no single top-level *.dist-info/METADATA; is it a wheel?")
            metadata = zf.read(f"{dist_info}/METADATA")
            try:
                raw_record = zf.read(f"{dist_info}/{BUILD_RECORD_NAME}")
            except KeyError:
                raise ValueError(
                    f"no {dist_info}/{BUILD_RECORD_NAME}: the index needs the build record "
                    "`buildtools build` writes (torch version, accelerator)"
                ) from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise PublishError(f"{path}: {exc}") from exc
    try:
        record = parse_build_record(raw_record)
    except ValueError as exc:
        raise PublishError(f"{path}: {exc}") from exc
    headers = BytesHeaderParser().parsebytes(metadata)
    name, version = str(headers.get("Name", "")).strip(), str(headers.get("Version", "")).strip()
    try:
        consistent = canonicalize_name(name) == canonicalize_name(wname.name) and Version(
            version
        ) == Version(wname.version)
        torch = Version(record.torch).public
        versions = record.torch_versions or [torch]
        torch_versions = tuple(sorted({Version(v).public for v in versions}, key=Version))
    except (InvalidVersion, ValueError) as exc:
        raise PublishError(f"{path}: {exc}") from exc
    if not consistent:
        raise PublishError(
            f"{path}: METADATA says {name} {version}, the file name {wname.name} "
            f"{wname.version}; pip refuses such a wheel"
        )
    requires_python = headers.get("Requires-Python")
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
        torch_specifier=_torch_spec(str(v) for v in headers.get_all("Requires-Dist", [])),
        accelerator=record.accelerator.name,
        fingerprint=record.fingerprint,
    )
    if wheel_url_template is not None:
        wheel = replace(wheel, url=wheel_url(wheel_url_template, wheel))
    return WheelSource(wheel=wheel, path=path, metadata=metadata)


def collect_wheels(paths: Sequence[Path]) -> list[Path]:
    """The wheels named, and every `*.whl` directly inside the directories named; sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(path.glob("*.whl"))
        elif path.is_file() and path.name.endswith(".whl"):
            found.append(path)
        else:
            raise PublishError(f"{path}: no such wheel or directory")
    return found
