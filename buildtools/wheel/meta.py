"""Rewrite a wheel's metadata: local version label, torch pin, build record, platform tag.

A wheel says what it was built for, so that `doctor` and the index can read it back:

- its version carries a local label, `1.2.0+pt211cu130` (an existing label is replaced);
- METADATA has exactly one unconditional `Requires-Dist: torch…`, the job's spec;
- a JSON **build record** lives at `<name>-<version>.dist-info/buildtools.json`.
  Inside the dist-info rather than the package because it is metadata, not code: it
  needs no knowledge of the import name, it is listed in RECORD like any metadata
  file, and at runtime `importlib.metadata.distribution(name).read_text("buildtools.json")`
  reads it back (that is what `doctor` and the index use).

The input wheel is never modified: the result is written to a temporary file in
`out_dir` and renamed into place. Output is deterministic: entries sorted (the
.dist-info last, RECORD last of all, as the wheel spec recommends), each entry keeps its
timestamp and permissions from the source zip, new entries take the source RECORD's
timestamp, and RECORD is regenerated with sha256 and sizes. With a SOURCE_DATE_EPOCH
(what `buildtools build` passes) every entry gets that date and a normalised mode, so a
rebuild of the same job elsewhere gives the same bytes.
"""

from __future__ import annotations

__all__ = [
    "BUILD_RECORD_BYTES",
    "BUILD_RECORD_NAME",
    "BUILD_RECORD_SCHEMA",
    "PlatformTag",
    "WheelName",
    "parse_build_record",
    "platform_tag_satisfies",
    "public_wheel",
    "read_build_record",
    "read_metadata",
    "relabel_wheel",
    "retag_wheel",
    "torch_requirements",
    "variant_wheel",
    "with_local_version",
]

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import re
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..ecosystem import load_ecosystem
from ..jsonfields import decode_json
from ..model import (
    BUILD_RECORD_SCHEMA,
    BuildRecord,
    BuildRecordError,
)
from .archive import open_wheel

BUILD_RECORD_NAME = "buildtools.json"
BUILD_RECORD_BYTES = 1 << 20  # a real one is < 1 KiB; JSON beyond this is refused unread

_LOCAL_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$", re.IGNORECASE)
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_DEFAULT_DATE = (1980, 1, 1, 0, 0, 0)
_ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the oldest date a zip entry holds
_VARIANT_JSON = "variant.json"  # PEP 825 variant metadata (wheel.variantprops)


@dataclass(frozen=True, kw_only=True)
class WheelName:
    """The five (or six) dash-separated fields of a wheel file name, kept as written."""

    name: str
    version: str
    build: str | None
    python: str
    abi: str
    platform: str

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        """Split `name-ver[-build]-py-abi-plat.whl`; ValueError if it is not a wheel name."""
        if not filename.endswith(".whl"):
            raise ValueError(f"{filename}: not a wheel file name (must end in .whl)")
        parts = filename[: -len(".whl")].split("-")
        if len(parts) == 5:
            name, version, py, abi, plat = parts
            build = None
        elif len(parts) == 6:
            name, version, build, py, abi, plat = parts
        else:
            raise ValueError(
                f"{filename}: not a wheel file name (expected name-version[-build]-python-abi-"
                "platform.whl)"
            )
        return cls(name=name, version=version, build=build, python=py, abi=abi, platform=plat)

    @property
    def filename(self) -> str:
        fields = [self.name, self.version]
        if self.build:
            fields.append(self.build)
        fields += [self.python, self.abi, self.platform]
        return "-".join(fields) + ".whl"

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(self.platform.split("."))


def with_local_version(version: str, local: str) -> str:
    """'1.2.0' or '1.2.0+old' with 'pt211cu130' → '1.2.0+pt211cu130' (PEP 440 normalized)."""
    if not _LOCAL_RE.match(local):
        raise ValueError(
            f"{local!r} is not a valid local version label: use letters, digits and '.', "
            "e.g. 'pt211cu130'"
        )
    try:
        public = Version(version).public
    except InvalidVersion as exc:
        raise ValueError(f"{version!r} is not a PEP 440 version") from exc
    return str(Version(f"{public}+{local}"))


def _torch_requirement(spec: str) -> Requirement:
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise ValueError(f"{spec!r} is not a requirement, e.g. 'torch==2.11.*': {exc}") from exc
    if canonicalize_name(req.name) != "torch":
        raise ValueError(f"{spec!r} must be a requirement on torch, e.g. 'torch==2.11.*'")
    return req


def _is_torch_line(value: str) -> bool:
    try:
        req = Requirement(value)
    except InvalidRequirement:
        return False
    if canonicalize_name(req.name) != "torch":
        return False
    # a torch requirement behind an extra ("torch; extra == 'gpu'") is the project's own
    return req.marker is None or "extra" not in str(req.marker)


def _rewrite_metadata(text: str, *, version: str | None, torch_spec: str | None) -> str:
    lines = text.splitlines(keepends=True)
    end = next((i for i, line in enumerate(lines) if line in ("\n", "\r\n")), len(lines))
    head, body = lines[:end], lines[end:]
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    out: list[str] = []
    torch_at: int | None = None
    last_requires: int | None = None
    for line in head:
        key, sep, value = line.partition(":")
        if not sep or line[:1] in (" ", "\t"):
            out.append(line)
            continue
        field_name = key.strip().lower()
        if field_name == "version" and version is not None:
            out.append(f"Version: {version}{newline}")
            continue
        if field_name == "requires-dist" and torch_spec is not None:
            if _is_torch_line(value.strip()):
                if torch_at is None:
                    torch_at = len(out)
                    out.append(f"Requires-Dist: {torch_spec}{newline}")
                continue
            out.append(line)
            last_requires = len(out)
            continue
        out.append(line)
    if torch_spec is not None and torch_at is None:
        at = last_requires if last_requires is not None else len(out)
        out.insert(at, f"Requires-Dist: {torch_spec}{newline}")
    return "".join(out + body)


def _rewrite_wheel_file(text: str, platforms: Sequence[str]) -> str:
    out: list[str] = []
    seen: set[str] = set()
    newline = "\r\n" if text.endswith("\r\n") else "\n"
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "tag":
            py, abi, _plat = value.strip().split("-", 2)
            for plat in platforms:
                tag = f"{py}-{abi}-{plat}"
                if tag not in seen:
                    seen.add(tag)
                    out.append(f"Tag: {tag}")
            continue
        out.append(line)
    return newline.join(out) + newline


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def _zip_date(epoch: int) -> tuple[int, int, int, int, int, int]:
    """A zip entry's date for SOURCE_DATE_EPOCH (zip cannot store dates before 1980)."""
    moment = time.gmtime(max(epoch, _ZIP_EPOCH))
    return (
        moment.tm_year,
        moment.tm_mon,
        moment.tm_mday,
        moment.tm_hour,
        moment.tm_min,
        moment.tm_sec,
    )


def _normal_mode(external_attr: int) -> int:
    """rwxr-xr-x for an executable file, rw-r--r-- for any other: no umask in the wheel."""
    executable = (external_attr >> 16) & 0o111
    return (0o100755 if executable else 0o100644) << 16


def _rewrite(
    wheel: Path,
    *,
    out_dir: Path,
    version: str | None = None,
    torch_spec: str | None = None,
    extra_files: Mapping[str, bytes] | None = None,
    platform_tag: str | None = None,
    source_date_epoch: int | None = None,
) -> Path:
    wname = WheelName.parse(wheel.name)
    new_name = wname
    if version is not None:
        new_name = replace(new_name, version=version.replace("-", "_"))
    if platform_tag is not None:
        new_name = replace(new_name, platform=platform_tag)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / new_name.filename
    if target.resolve() == wheel.resolve():
        raise ValueError(
            f"{wheel}: the rewritten wheel would replace its input; choose another out_dir"
        )

    with open_wheel(wheel) as src:
        infos = [src.info(name) for name in src.names]
        old_dist_info = src.dist_info
        prefix = old_dist_info[: -len(".dist-info")]
        dist_name, _, old_version = prefix.rpartition("-")
        new_version_dir = version.replace("-", "_") if version is not None else old_version
        new_dist_info = f"{dist_name}-{new_version_dir}.dist-info"
        old_data, new_data = f"{prefix}.data", f"{dist_name}-{new_version_dir}.data"
        record_name = f"{old_dist_info}/RECORD"
        date = next((i.date_time for i in infos if i.filename == record_name), None)
        if date is None:
            date = max((i.date_time for i in infos), default=_DEFAULT_DATE)
        fixed = _zip_date(source_date_epoch) if source_date_epoch is not None else None

        files: dict[str, tuple[bytes, zipfile.ZipInfo | None]] = {}
        for info in infos:
            top, _, rest = info.filename.partition("/")
            if top == old_dist_info:
                if rest == "RECORD" or rest in _SIGNATURES or rest == _VARIANT_JSON:
                    # regenerated below; signatures no longer match; a variant's metadata
                    # is only ever the one this rewrite is given
                    continue
                arcname = f"{new_dist_info}/{rest}"
            elif top == old_data:
                arcname = f"{new_data}/{rest}"
            else:
                arcname = info.filename
            files[arcname] = (src.read(info.filename, max_bytes=src.limits.member_bytes), info)

    meta_name = f"{new_dist_info}/METADATA"
    meta = files[meta_name][0].decode("utf-8")
    meta = _rewrite_metadata(meta, version=version, torch_spec=torch_spec)
    files[meta_name] = (meta.encode("utf-8"), files[meta_name][1])
    if platform_tag is not None:
        wheel_name = f"{new_dist_info}/WHEEL"
        if wheel_name not in files:
            raise ValueError(f"{wheel.name}: {old_dist_info}/WHEEL is missing")
        text = _rewrite_wheel_file(files[wheel_name][0].decode("utf-8"), new_name.platforms)
        files[wheel_name] = (text.encode("utf-8"), files[wheel_name][1])
    for rel, data in (extra_files or {}).items():
        arcname = f"{new_dist_info}/{rel}"
        files[arcname] = (data, files.get(arcname, (b"", None))[1])

    new_record = f"{new_dist_info}/RECORD"
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for arcname in _ordered(files, new_dist_info):
        data = files[arcname][0]
        writer.writerow((arcname, _record_hash(data), len(data)))
    writer.writerow((new_record, "", ""))
    files[new_record] = (buf.getvalue().encode("utf-8"), None)

    fd, tmp_name = tempfile.mkstemp(dir=out_dir, prefix=f".{new_name.filename}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as dst:
            for arcname in [*_ordered(files, new_dist_info), new_record]:
                data, origin = files[arcname]
                when = fixed or (origin.date_time if origin else date)
                zinfo = zipfile.ZipInfo(arcname, date_time=when)
                zinfo.create_system = 3
                attr = origin.external_attr if origin else 0o100644 << 16
                zinfo.external_attr = _normal_mode(attr) if fixed else attr
                zinfo.compress_type = zipfile.ZIP_DEFLATED
                dst.writestr(zinfo, data)
        tmp.chmod(0o644)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return target


def _ordered(files: Mapping[str, object], dist_info: str) -> list[str]:
    record = f"{dist_info}/RECORD"
    rest = sorted(n for n in files if not n.startswith(dist_info + "/"))
    meta = sorted(n for n in files if n.startswith(dist_info + "/") and n != record)
    return rest + meta


def relabel_wheel(
    wheel: Path,
    *,
    out_dir: Path,
    local_version: str,
    requires_dist_torch: str,
    build_record: Mapping[str, object],
    platform_tag: str | None = None,
    source_date_epoch: int | None = None,
) -> Path:
    """Write a copy of `wheel` into `out_dir` that says what it was built for; returns its path.

    The version becomes `<public>+<local_version>`, the unconditional torch
    requirement becomes `requires_dist_torch` (added if missing), `build_record` is
    written to `<dist-info>/buildtools.json`, and with `platform_tag` (e.g.
    'manylinux_2_28_x86_64', or a dotted set) the WHEEL tags and the file name are
    retagged too. With `source_date_epoch` the archive is reproducible: every entry gets
    that date and a normalised mode (0644, or 0755 when executable), in a fixed order, so
    the same files give the same bytes wherever and whenever they were built.
    """
    wname = WheelName.parse(wheel.name)
    version = with_local_version(wname.version.replace("_", "-"), local_version)
    spec = str(_torch_requirement(requires_dist_torch))
    try:
        record = json.dumps(dict(build_record), indent=2, sort_keys=True) + "\n"
    except (TypeError, ValueError) as exc:
        raise ValueError(f"build record is not JSON-serializable: {exc}") from exc
    return _rewrite(
        wheel,
        out_dir=out_dir,
        version=version,
        torch_spec=spec,
        extra_files={BUILD_RECORD_NAME: record.encode("utf-8")},
        platform_tag=platform_tag,
        source_date_epoch=source_date_epoch,
    )


def public_wheel(wheel: Path, *, out_dir: Path) -> Path:
    """A copy of `wheel` in `out_dir` without its local version label (PyPI refuses one).

    `1.2.0+pt213cu130` becomes `1.2.0` in the file name, METADATA and dist-info; the build
    record inside still says which torch and accelerator it was built for.
    """
    wname = WheelName.parse(wheel.name)
    try:
        public = Version(wname.version.replace("_", "-")).public
    except InvalidVersion as exc:
        raise ValueError(f"{wheel.name}: {wname.version!r} is not a PEP 440 version") from exc
    return _rewrite(wheel, out_dir=out_dir, version=public)


def variant_wheel(
    wheel: Path, *, out_dir: Path, local_version: str, label: str | None, variant_json: bytes
) -> Path:
    """A copy of `wheel` at version `<public>+<local_version>`: with `label`, a PEP 825
    variant wheel (`…-<platform>-<label>.whl`, `variant_json` as `*.dist-info/variant.json`);
    without, the plain wheel of that version (installers that know no variants take it).

    Only the version, the file name and that one file change: every other member keeps its
    bytes, date and mode, so the same input always gives the same bytes.
    """
    wname = WheelName.parse(wheel.name)
    if wname.build:
        raise ValueError(f"{wheel.name}: a wheel with a build tag gets no variant (PEP 825)")
    version = with_local_version(wname.version.replace("_", "-"), local_version)
    if not label:
        return _rewrite(wheel, out_dir=out_dir, version=version)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".variant-") as tmp:
        plain = _rewrite(
            wheel, out_dir=Path(tmp), version=version, extra_files={_VARIANT_JSON: variant_json}
        )
        # PEP 825: the label follows the platform tag
        return plain.replace(out_dir / f"{plain.name.removesuffix('.whl')}-{label}.whl")


def retag_wheel(wheel: Path, *, out_dir: Path, platform_tag: str) -> Path:
    """Copy `wheel` into `out_dir` with its platform tag replaced (WHEEL, RECORD, file name).

    This is what pytorch/test-infra does instead of auditwheel: nothing is grafted and
    nothing is verified here; the static checks report what the binaries really need.
    """
    return _rewrite(wheel, out_dir=out_dir, platform_tag=platform_tag)


def read_metadata(wheel: Path) -> dict[str, list[str]]:
    """The METADATA headers of `wheel`: lower-cased field name → values in order."""
    with open_wheel(wheel) as archive:
        text = archive.metadata.decode("utf-8", errors="replace")
    msg = HeaderParser().parsestr(text)
    out: dict[str, list[str]] = {}
    for key, value in msg.items():
        out.setdefault(key.lower(), []).append(str(value).strip())
    return out


def torch_requirements(wheel: Path) -> list[str]:
    """The unconditional `Requires-Dist: torch…` values in `wheel`'s METADATA."""
    return [v for v in read_metadata(wheel).get("requires-dist", []) if _is_torch_line(v)]


def parse_build_record(raw: bytes | str, *, where: str = BUILD_RECORD_NAME) -> BuildRecord:
    """The build record in `raw` (the bytes of a `buildtools.json`).

    Raises ValueError when it is not JSON, and BuildRecordError (a ValueError) listing
    every problem when it is JSON but not a valid record; `where` starts both messages.
    """
    # BuildRecord.from_json type-checks every field it keeps: that bounds the depth it uses
    data = decode_json(raw, what=where, max_bytes=BUILD_RECORD_BYTES, max_depth=None)
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not a JSON object")
    try:
        return BuildRecord.from_json(data)
    except BuildRecordError as exc:
        raise BuildRecordError(exc.problems, where=where) from None


def read_build_record(wheel: Path) -> BuildRecord | None:
    """The build record inside `wheel`, or None when it has none.

    Raises ValueError (see `parse_build_record`) when the record exists but is invalid.
    """
    with open_wheel(wheel) as archive:
        where = f"{archive.dist_info}/{BUILD_RECORD_NAME}"
        raw = archive.read_optional(where, max_bytes=BUILD_RECORD_BYTES)
    return None if raw is None else parse_build_record(raw, where=where)


_POLICY_TAG_RE = re.compile(
    r"^(?P<family>manylinux|musllinux)_(?P<major>\d+)_(?P<minor>\d+)_(?P<arch>.+)$"
)


@dataclass(frozen=True, kw_only=True)
class PlatformTag:
    """One platform tag split into family, libc version and arch ('linux' has no version)."""

    family: str
    libc: tuple[int, int] | None
    arch: str

    @classmethod
    def parse(cls, tag: str) -> PlatformTag:
        m = _POLICY_TAG_RE.match(tag)
        if m:
            return cls(family=m["family"], libc=(int(m["major"]), int(m["minor"])), arch=m["arch"])
        base, _, arch = tag.partition("_")
        legacy = load_ecosystem().manylinux_aliases
        if base in legacy and arch:
            return cls(family="manylinux", libc=legacy[base], arch=arch)
        if base == "linux" and arch:
            return cls(family="linux", libc=None, arch=arch)
        raise ValueError(
            f"{tag!r} is not a Linux platform tag; expected e.g. 'manylinux_2_28_x86_64', "
            "'musllinux_1_2_x86_64' or 'linux_x86_64'"
        )


def platform_tag_satisfies(actual: str, promised: str) -> bool:
    """True when a wheel tagged `actual` (a tag or a dotted set) installs wherever `promised` does.

    'manylinux_2_17_x86_64' satisfies a promised 'manylinux_2_28_x86_64' (older glibc
    floor, wider reach); 'manylinux_2_34_x86_64' and 'linux_x86_64' do not.
    """
    want = PlatformTag.parse(promised)
    for tag in actual.split("."):
        try:
            have = PlatformTag.parse(tag)
        except ValueError:
            continue
        if have.arch != want.arch:
            continue
        if want.family == "linux":
            return True
        if (
            have.family == want.family
            and have.libc is not None
            and want.libc is not None
            and have.libc <= want.libc
        ):
            return True
    return False
