"""The one reader of wheel archives: every verb that opens a wheel opens it here, bounded.

A wheel handed to `check`, `index`, `smoke` or `repair` may come from anywhere, so before
any member is read the archive must be what pip would install, within limits that keep
a crafted one from costing more than a real one:

- the file is a regular file (`files.open_regular`: no FIFO, device or link to /dev/zero);
- its central directory is at most `ArchiveLimits.central_directory` bytes, read once;
- at most `members` members; each name valid UTF-8 (flagged so), at most `name_bytes`
  long with components of at most 255 bytes, no control character, not absolute, no
  `..` and no backslash (`files.check_member_names`), never twice;
- regular files and directories only: a symbolic link member (unzip recreates it; `_C.so`
  → a system file) is refused as unsafe, a FIFO or device member as malformed;
- stored or deflated only (pip's zipfile reads bzip2, lzma; a method Python lacks, PPMd,
  raised NotImplementedError here), never encrypted;
- each member at most `member_bytes` uncompressed, all of them at most `total_bytes`, and
  a member above `ratio_floor` inflates at most `ratio` times its compressed size (a 2 MB
  wheel whose METADATA inflates to 2.2 GB is refused before a byte is inflated); members'
  data may not overlap one another or the directory (how a non-recursive zip bomb
  multiplies one compressed kernel);
- a member is read only through `read` (into memory, at most what the caller allows) or
  `copy` (streamed, in chunks): both check the CRC-32 and the length it claims;
- the wheel as pip requires it: its file name `name-version[-build]-py-abi-plat.whl` with
  a PEP 508 project name (ASCII letters, digits, `._-`), exactly one top-level
  `NAME-VERSION.dist-info` of that name and version (PEP 503 name, PEP 440 version),
  holding METADATA, WHEEL and RECORD, and METADATA's Name and Version the same again.

Problems raise `ArchiveError` (a ValueError: the index refuses the wheel with exit 10,
`check` fails it with exit 9) or, for a member that names a place outside the wheel (an
absolute or `..` path, a link), `UnsafeArtefactError` (exit 15); the message starts with
the wheel's file name.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_LIMITS",
    "ArchiveError",
    "ArchiveLimits",
    "WheelArchive",
    "metadata_fields",
    "open_wheel",
    "project_name_problem",
]

import hashlib
import io
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from ..errors import UnsafeArtefactError
from ..files import check_member_names, open_regular
from .distinfo import (
    ESCAPED_NAME_RE,
    _canonical,
    _same_version,
    metadata_fields,
    project_name_problem,
)


class ArchiveError(ValueError):
    """A wheel archive is malformed, over a limit, or not what pip would install; the
    message starts with the wheel's file name, `problem` is the rest."""

    def __init__(self, problem: str, path: Path | None = None) -> None:
        super().__init__(f"{path.name}: {problem}" if path is not None else problem)
        self.problem = problem
        self.path = path


@dataclass(frozen=True, kw_only=True)
class ArchiveLimits:
    """What one wheel may cost. The defaults take every wheel of the PyTorch ecosystem
    (torch's own: ~15,000 members, its largest library ~1.5 GB, compressed 3-5 times)."""

    members: int = 50_000
    central_directory: int = 16 << 20  # bytes; read into memory whole, by zipfile
    member_bytes: int = 4 << 30  # uncompressed, one member
    total_bytes: int = 16 << 30  # uncompressed, every member together
    ratio: int = 200  # uncompressed / compressed, for a member above ratio_floor
    ratio_floor: int = 1 << 20  # smaller members may compress as well as they can
    name_bytes: int = 1024  # a member name, UTF-8
    text_bytes: int = 8 << 20  # METADATA, WHEEL, RECORD and the like, read into memory


DEFAULT_LIMITS = ArchiveLimits()

# the general-purpose bit flags zipfile would refuse late or not at all
_ENCRYPTED = 0x1
_PATCHED = 0x20
_STRONG_ENCRYPTION = 0x40
_UTF8 = 0x800
_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
_METHOD_NAMES = {12: "bzip2", 14: "lzma", 93: "zstd", 95: "xz", 98: "PPMd", 99: "AES"}
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_LOCAL_HEADER = 30
_CHUNK = 1 << 20
_IN_MEMORY = 16 << 20  # an archive up to this size is read once, whole

_WHEEL_VERSION_RE = re.compile(rb"^Wheel-Version:([^\r\n]*)", re.MULTILINE | re.IGNORECASE)


def _shown(name: str) -> str:
    """A member name for a message: quoted, and cut short when it is long."""
    return repr(name) if len(name) <= 100 else repr(name[:60]) + f"… ({len(name):,} characters)"


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def _central_directory(fh: BinaryIO, size: int, limits: ArchiveLimits) -> tuple[int, int]:
    """(members the end record announces, where the central directory starts); the
    directory's size checked before zipfile reads it whole."""
    tail_len = min(size, 22 + 0xFFFF)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    at = tail.rfind(_EOCD)
    if at < 0 or at + 22 > len(tail):
        raise ArchiveError("not a zip archive (no end of central directory: truncated?)")
    count, cd_size = struct.unpack_from("<xxxxxxxxxxHI", tail, at)
    eocd = size - tail_len + at
    if at >= 20 and tail[at - 20 : at - 16] == _EOCD64_LOCATOR:
        (record_at,) = struct.unpack_from("<Q", tail, at - 12)
        if record_at + 56 > size:
            raise ArchiveError("not a zip archive (its zip64 end record lies past the end)")
        fh.seek(record_at)
        record = fh.read(56)
        if record[:4] != _EOCD64:
            raise ArchiveError("not a zip archive (bad zip64 end record)")
        count, cd_size = struct.unpack_from("<QQ", record, 32)
        eocd = record_at
    if cd_size > limits.central_directory or cd_size > eocd:
        raise ArchiveError(
            f"its central directory is {_size(cd_size)} (at most "
            f"{_size(limits.central_directory)}; the file is {_size(size)})"
        )
    if count > limits.members:
        raise ArchiveError(f"{count:,} members (at most {limits.members:,})")
    return count, eocd - cd_size


def _member_problem(info: zipfile.ZipInfo, limits: ArchiveLimits) -> str | None:
    """What makes one directory entry unacceptable by itself, or None (links: not here)."""
    name = info.filename
    if info.orig_filename != name:
        return "has a NUL in its name"
    if not name.isascii():
        if not info.flag_bits & _UTF8:
            return "has a name that is not marked UTF-8 (zip reads it as cp437)"
        encoded = len(name.encode("utf-8", "surrogatepass"))
    else:
        encoded = len(name)
    if encoded > limits.name_bytes:
        return f"has a name of {encoded:,} bytes (at most {limits.name_bytes:,})"
    if encoded > 255 and any(
        len(p.encode("utf-8", "surrogatepass")) > 255 for p in name.split("/")
    ):
        return "has a path component longer than 255 bytes"
    if info.flag_bits & (_ENCRYPTED | _STRONG_ENCRYPTION):
        return "is encrypted (pip cannot install it)"
    if info.flag_bits & _PATCHED:
        return "is compressed patch data"
    if info.compress_type not in _METHODS:
        method = _METHOD_NAMES.get(info.compress_type, "unknown")
        return f"uses compression method {info.compress_type} ({method}): only stored and deflate"
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind in _KINDS:
        return f"is {_KINDS[kind]}: a wheel holds regular files only"
    if name.endswith("/"):
        if kind not in (0, stat.S_IFDIR) or info.file_size:
            return "is a directory entry with contents"
        return None
    if kind == stat.S_IFDIR:
        return "is marked a directory but its name does not end in '/'"
    size = info.file_size
    if size > limits.member_bytes:
        return f"inflates to {_size(size)} (at most {_size(limits.member_bytes)} a member)"
    if info.compress_type == zipfile.ZIP_STORED and size != info.compress_size:
        return "is stored but its sizes differ"
    if size > limits.ratio_floor and size > limits.ratio * info.compress_size:
        return (
            f"inflates {size // max(info.compress_size, 1):,} times ({_size(info.compress_size)} "
            f"to {_size(size)}; at most {limits.ratio} times): a zip bomb?"
        )
    return None


@dataclass(frozen=True, kw_only=True)
class _Name:
    """The fields of a wheel file name the structure is checked against."""

    project: str
    version: str


def _file_name(filename: str) -> _Name:
    if not filename.endswith(".whl"):
        raise ArchiveError("not a wheel file name (must end in .whl)")
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6) or not all(parts):
        raise ArchiveError(
            "not a wheel file name (expected name-version[-build]-python-abi-platform.whl)"
        )
    problem = project_name_problem(parts[0])
    if problem is None and not ESCAPED_NAME_RE.fullmatch(parts[0]):
        problem = (
            f"{parts[0]!r} is not a project name as a file name spells it (letters and "
            "digits, single '_' or '.' between them; PEP 427)"
        )
    if problem is not None:
        raise ArchiveError(f"its file name: {problem}")
    return _Name(project=parts[0], version=parts[1])


class _Bytes:
    """Where member data is read from: the whole archive in memory (a small one, read once)
    or the open file (pread, never past its end)."""

    def __init__(self, fh: BinaryIO, size: int, data: bytes | None) -> None:
        self._fd = fh.fileno()
        self._data = data
        self.size = size

    def at(self, offset: int, n: int) -> bytes:
        if offset < 0 or n <= 0 or offset >= self.size:
            return b""
        if self._data is not None:
            return self._data[offset : offset + n]
        return os.pread(self._fd, min(n, self.size - offset), offset)


class WheelArchive:
    """An open wheel whose directory and structure passed the checks; see the module.

    Members are read here, not by zipfile (which only parses the directory): each one's
    local header must name the member its directory entry names, with the same method and
    no encryption; its data must lie inside the file; and it must inflate to exactly the
    length and CRC-32 its entry claims, no byte beyond that length ever being produced.
    """

    def __init__(
        self,
        path: Path,
        fh: BinaryIO,
        zf: zipfile.ZipFile,
        limits: ArchiveLimits,
        data: bytes | None,
        st: os.stat_result,
    ) -> None:
        self.path = path
        self.limits = limits
        self._fh = fh
        self._zf = zf
        self.stat = st  # of the file as opened (size, mtime)
        self._bytes = _Bytes(fh, self.stat.st_size, data)
        self._data = data
        self._members: dict[str, zipfile.ZipInfo] = {}
        self._verified: set[str] = set()  # members read to their end, length and CRC right
        self.dist_info = ""
        self.metadata = b""
        self.fields: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ what it holds

    @property
    def names(self) -> list[str]:
        """Every member that is a file (directory entries left out), in archive order."""
        return list(self._members)

    def info(self, name: str) -> zipfile.ZipInfo:
        """The directory entry of member `name` (KeyError when there is none)."""
        return self._members[name]

    def __contains__(self, name: object) -> bool:
        return name in self._members

    # ------------------------------------------------------------------ reading

    def _problem(self, name: str, what: str) -> ArchiveError:
        return ArchiveError(f"member {_shown(name)} {what}", self.path)

    def _data_at(self, info: zipfile.ZipInfo) -> int:
        """Where member `info`'s data starts, its local header checked against its entry."""
        name = info.filename
        head = self._bytes.at(info.header_offset, _LOCAL_HEADER)
        if len(head) < _LOCAL_HEADER or head[:4] != b"PK\x03\x04":
            raise self._problem(name, "has no local header where the directory says")
        flags, method = struct.unpack_from("<HH", head, 6)
        name_len, extra_len = struct.unpack_from("<HH", head, 26)
        encoding = "utf-8" if info.flag_bits & _UTF8 or info.orig_filename.isascii() else "cp437"
        local = self._bytes.at(info.header_offset + _LOCAL_HEADER, name_len)
        if local != info.orig_filename.encode(encoding, "surrogateescape"):
            raise self._problem(name, "has a local header naming another member")
        if flags & (_ENCRYPTED | _STRONG_ENCRYPTION) or method != info.compress_type:
            raise self._problem(name, "has a local header that contradicts its directory entry")
        start = int(info.header_offset) + _LOCAL_HEADER + name_len + extra_len
        if start + info.compress_size > self._bytes.size:
            raise self._problem(name, "has data past the end of the file (truncated?)")
        return int(start)

    def chunks(self, name: str) -> Iterator[bytes]:
        """Member `name` in chunks (of at most 1 MiB read from a large archive), inflated
        never beyond the length its entry claims; its length and CRC-32 checked when the
        last chunk has been taken. KeyError when there is no such member."""
        info = self._members[name]
        size = info.file_size
        pos = self._data_at(info)
        left = info.compress_size
        deflated = info.compress_type == zipfile.ZIP_DEFLATED
        inflate = zlib.decompressobj(-15)
        step = left if self._data is not None else _CHUNK
        produced = crc = 0
        try:
            while left > 0 or inflate.unconsumed_tail:
                if inflate.unconsumed_tail:
                    raw = inflate.unconsumed_tail
                else:
                    raw = self._bytes.at(pos, min(left, step))
                    if not raw:
                        raise self._problem(name, "has data past the end of the file")
                    pos += len(raw)
                    left -= len(raw)
                out = inflate.decompress(raw, size - produced + 1) if deflated else raw
                produced += len(out)
                if produced > size:
                    raise self._problem(name, f"inflates to more than the {size:,} bytes it claims")
                crc = zlib.crc32(out, crc)
                if out:
                    yield out
            if deflated and not inflate.eof:
                raise self._problem(name, "is corrupt (its deflate stream is cut short)")
        except zlib.error as exc:
            raise self._problem(name, f"is corrupt ({exc})") from None
        if produced != size:
            raise self._problem(name, f"holds {produced:,} bytes, not {size:,}")
        if crc != info.CRC:
            raise self._problem(name, f"is corrupt (Bad CRC-32 for file {_shown(name)})")
        self._verified.add(name)

    def read(self, name: str, *, max_bytes: int | None = None) -> bytes:
        """Member `name` whole, in memory: at most `max_bytes` (default `text_bytes`), its
        CRC-32 and length checked. KeyError when there is no such member."""
        info = self._members[name]
        limit = self.limits.text_bytes if max_bytes is None else max_bytes
        if info.file_size > limit:
            raise self._problem(name, f"is {_size(info.file_size)} (at most {_size(limit)} here)")
        if self._data is None:
            return b"".join(self.chunks(name))
        # in memory: the same checks as `chunks`, in one step (a wheel's small members)
        start = self._data_at(info)
        raw = self._data[start : start + info.compress_size]
        if info.compress_type == zipfile.ZIP_DEFLATED:
            inflate = zlib.decompressobj(-15)
            try:
                out = inflate.decompress(raw, info.file_size + 1)
            except zlib.error as exc:
                raise self._problem(name, f"is corrupt ({exc})") from None
            if len(out) > info.file_size or inflate.unconsumed_tail:
                raise self._problem(
                    name, f"inflates to more than the {info.file_size:,} bytes it claims"
                )
            if not inflate.eof:
                raise self._problem(name, "is corrupt (its deflate stream is cut short)")
        else:
            out = raw
        if len(out) != info.file_size:
            raise self._problem(name, f"holds {len(out):,} bytes, not {info.file_size:,}")
        if zlib.crc32(out) != info.CRC:
            raise self._problem(name, f"is corrupt (Bad CRC-32 for file {_shown(name)})")
        self._verified.add(name)
        return out

    def read_optional(self, name: str, *, max_bytes: int | None = None) -> bytes | None:
        """`read`, or None when the wheel has no such member."""
        return self.read(name, max_bytes=max_bytes) if name in self._members else None

    def copy(self, name: str, out: IO[bytes]) -> int:
        """Stream member `name` into `out` (see `chunks`); the bytes written."""
        written = 0
        for chunk in self.chunks(name):
            out.write(chunk)
            written += len(chunk)
        return written

    def verify(self) -> None:
        """Inflate every member and check its CRC-32 and length (what pip does as it
        installs): a wheel with a corrupt member is refused here, not on a user's machine."""
        for name in self._members:
            if name not in self._verified:  # read whole already: checked then
                for _chunk in self.chunks(name):
                    pass

    def sha256(self) -> tuple[str, int]:
        """The sha256 and size of the archive file itself (as opened)."""
        if self._data is not None:
            return hashlib.sha256(self._data).hexdigest(), len(self._data)
        digest = hashlib.sha256()
        size = 0
        self._fh.seek(0)
        while chunk := self._fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
        return digest.hexdigest(), size

    # ------------------------------------------------------------------ checking

    def _check_members(self, announced: int, directory_at: int) -> None:
        infos = self._zf.infolist()
        limits = self.limits
        if len(infos) > limits.members or len(infos) != announced:
            raise ArchiveError(
                f"its directory holds {len(infos):,} members, its end record says "
                f"{announced:,} (at most {limits.members:,})",
                self.path,
            )
        check_member_names((i.filename for i in infos), what=self.path.name)
        total = 0
        members = self._members
        for info in infos:
            name = info.filename
            if stat.S_ISLNK(info.external_attr >> 16):
                raise UnsafeArtefactError(
                    f"{self.path.name}: member {_shown(name)} is a symbolic link (unpacked, it "
                    "would point anywhere); refusing to write or read it"
                )
            problem = _member_problem(info, limits)
            if problem is not None:
                raise self._problem(name, problem)
            if name.endswith("/"):
                continue
            if name in members:
                raise self._problem(name, "appears twice (which one would pip install?)")
            members[name] = info
            total += info.file_size
        if total > limits.total_bytes:
            raise ArchiveError(
                f"its members inflate to {_size(total)} together (at most "
                f"{_size(limits.total_bytes)})",
                self.path,
            )
        # each member's data ends before the next member's header and the directory (its
        # local header is at least 30 bytes and its name: a lower bound of where data ends)
        ordered = sorted(infos, key=lambda i: i.header_offset)
        bounds = [i.header_offset for i in ordered[1:]] + [directory_at] if ordered else []
        if ordered and ordered[0].header_offset < 0:  # an end record that lies about offsets
            raise self._problem(ordered[0].filename, "lies before the start of the archive")
        for info, following in zip(ordered, bounds, strict=True):
            end = info.header_offset + _LOCAL_HEADER + len(info.orig_filename) + info.compress_size
            if end > following:
                raise self._problem(
                    info.filename, "overlaps another member's data or the directory (a zip bomb?)"
                )

    def _check_structure(self) -> None:
        wheel = self.path
        expected = _file_name(wheel.name)
        tops = {n.partition("/")[0] for n in self._members}
        dist_infos = sorted(t for t in tops if t.endswith(".dist-info"))
        if len(dist_infos) != 1:
            found = ", ".join(dist_infos) if dist_infos else "none"
            raise ArchiveError(
                f"expected exactly one top-level NAME-VERSION.dist-info directory, "
                f"found {found}; is it a wheel?"
            )
        dist_info = dist_infos[0]
        stem = dist_info[: -len(".dist-info")]
        name, sep, version = stem.partition("-")
        if (
            not sep
            or "-" in version
            or project_name_problem(name) is not None
            or _canonical(name) != _canonical(expected.project)
            or not _same_version(version, expected.version)
        ):
            raise ArchiveError(
                f"its {dist_info} is not {expected.project}-{expected.version}"
                ".dist-info: another project or version than the file name; pip refuses such a wheel"
            )
        missing = [f for f in ("METADATA", "WHEEL", "RECORD") if f"{dist_info}/{f}" not in self]
        if missing:
            raise ArchiveError(f"{dist_info} has no {', '.join(missing)}; pip refuses such a wheel")
        self.dist_info = dist_info
        said = _WHEEL_VERSION_RE.search(self.read(f"{dist_info}/WHEEL"))
        wheel_version = said[1].decode("ascii", "replace").strip() if said else ""
        if not wheel_version.startswith("1."):
            raise ArchiveError(
                f"{dist_info}/WHEEL says Wheel-Version {wheel_version or 'nothing'}, "
                "pip installs 1.x only"
            )
        self.metadata = self.read(f"{dist_info}/METADATA")
        self.fields = metadata_fields(self.metadata)
        meta_name = (self.fields.get("name") or [""])[0]
        meta_version = (self.fields.get("version") or [""])[0]
        problem = project_name_problem(meta_name)
        if problem is not None:
            raise ArchiveError(f"METADATA's Name: {problem}", wheel)
        if _canonical(meta_name) != _canonical(expected.project) or not _same_version(
            meta_version, expected.version
        ):
            raise ArchiveError(
                f"METADATA says {meta_name} {meta_version}, the file name "
                f"{expected.project} {expected.version}; pip refuses such a wheel"
            )


@contextmanager
def open_wheel(path: Path, *, limits: ArchiveLimits = DEFAULT_LIMITS) -> Iterator[WheelArchive]:
    """Open the wheel at `path` and check it (see the module); ArchiveError (or
    UnsafeArtefactError, or an OSError naming the path) when it is not to be read."""
    fh = open_regular(path)
    try:
        try:
            st = os.fstat(fh.fileno())
            size = st.st_size
            if size == 0:
                raise ArchiveError("an empty file, not a zip archive")
            data = fh.read(size) if size <= _IN_MEMORY else None  # one read, if small
            source: BinaryIO = io.BytesIO(data) if data is not None else fh
            announced, directory_at = _central_directory(source, size, limits)
            try:
                zf = zipfile.ZipFile(source)
            except (
                zipfile.BadZipFile, zlib.error, EOFError, struct.error, ValueError,
                NotImplementedError,  # "zip file version 6.4": what zipfile cannot read
            ) as exc:  # fmt: skip
                said = str(exc) if len(str(exc)) <= 160 else str(exc)[:160] + "…"
                raise ArchiveError(f"not a readable zip archive ({said})") from None
            archive = WheelArchive(path, fh, zf, limits, data, st)
            archive._check_members(announced, directory_at)
            archive._check_structure()
        except ArchiveError as exc:
            if exc.path is None:
                raise ArchiveError(exc.problem, path) from None
            raise
        yield archive
    finally:
        fh.close()
