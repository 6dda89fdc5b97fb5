"""A wheel's METADATA from the index without downloading the wheel.

PEP 658: where the index offers the metadata file (`core-metadata`), it is read from
`<wheel url>.metadata` and checked against its sha256. Otherwise (torch's files on PyPI
offer none) three HTTP range requests read only what is needed of the zip: its last 64 KiB
(the end-of-central-directory record and, for a wheel written by the usual tools, the
central-directory entries of its `.dist-info`, which come last), then the one member.
Where the METADATA entry is not in that tail, the central directory itself is read
(about 1 MiB for a torch wheel), never the whole file.

Every number read from the zip is checked against the file's size before it is used; a
member larger than `MAX_METADATA` or one whose CRC does not match is refused.
"""

from __future__ import annotations

__all__ = ["MAX_METADATA", "TAIL", "read_metadata"]

import hashlib
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import NetworkError
from ..http import Http
from .simple import IndexFile

TAIL = 64 << 10  # bytes read from the end of a wheel first
MAX_METADATA = 4 << 20  # a METADATA file larger than this is not a real one
MAX_CENTRAL_DIRECTORY = 32 << 20
_EOCD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_METADATA_RE = re.compile(r"^[^/]+\.dist-info/METADATA$")
_CONTENT_RANGE_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


@dataclass(frozen=True, kw_only=True)
class _Entry:
    name: str
    method: int
    crc: int
    compressed: int
    size: int
    offset: int
    length: int  # bytes of this central-directory entry


def _bad(url: str, what: str) -> NetworkError:
    return NetworkError(f"{url}: not a readable wheel: {what}")


def _zip64_values(extra: bytes, wanted: list[bool]) -> list[int]:
    """The ZIP64 extended-information values present for the fields marked 0xFFFFFFFF."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, pos)
        if tag == 0x0001:
            data = extra[pos + 4 : pos + 4 + size]
            count = sum(wanted)
            if len(data) < 8 * count:
                break
            return list(struct.unpack_from(f"<{count}Q", data))
        pos += 4 + size
    raise ValueError("a ZIP64 field without its extended-information record")


def _entry(buf: bytes, pos: int) -> _Entry:
    """The central-directory entry at `pos` of `buf`; ValueError when it is not one."""
    if buf[pos : pos + 4] != _CENTRAL or pos + 46 > len(buf):
        raise ValueError("no central-directory entry here")
    (_, _, _, flags, method, _, _, crc, csize, usize, nlen, elen, clen, _, _, _, off) = (
        struct.unpack_from("<IHHHHHHIIIHHHHHII", buf, pos)
    )
    end = pos + 46 + nlen + elen + clen
    if end > len(buf):
        raise ValueError("a central-directory entry runs past the data read")
    raw_name = buf[pos + 46 : pos + 46 + nlen]
    name = raw_name.decode("utf-8" if flags & 0x800 else "cp437")
    extra = buf[pos + 46 + nlen : pos + 46 + nlen + elen]
    wanted = [usize == 0xFFFFFFFF, csize == 0xFFFFFFFF, off == 0xFFFFFFFF]
    if any(wanted):
        values = iter(_zip64_values(extra, wanted))
        usize = next(values) if wanted[0] else usize
        csize = next(values) if wanted[1] else csize
        off = next(values) if wanted[2] else off
    return _Entry(
        name=name,
        method=method,
        crc=crc,
        compressed=csize,
        size=usize,
        offset=off,
        length=end - pos,
    )


def _chain(buf: bytes, pos: int, end: int) -> Iterator[_Entry]:
    """Entries from `pos` to exactly `end` of `buf`; ValueError when they do not tile it."""
    while pos < end:
        entry = _entry(buf, pos)
        yield entry
        pos += entry.length
    if pos != end:
        raise ValueError("entries do not end where the central directory ends")


def _directory(url: str, tail: bytes, tail_start: int, total: int) -> tuple[int, int]:
    """(offset, size) of the central directory, from the end records in `tail`."""
    at = tail.rfind(_EOCD, max(0, len(tail) - (22 + 0xFFFF)))
    if at < 0 or at + 22 > len(tail):
        raise _bad(url, "no end-of-central-directory record in its last bytes")
    _, _, _, _, _, size, offset, _ = struct.unpack_from("<IHHHHIIH", tail, at)
    if offset == 0xFFFFFFFF or size == 0xFFFFFFFF:
        loc = at - 20
        if loc < 0 or tail[loc : loc + 4] != _ZIP64_LOCATOR:
            raise _bad(url, "a ZIP64 archive without its locator")
        (record,) = struct.unpack_from("<Q", tail, loc + 8)
        rel = record - tail_start
        if rel < 0 or tail[rel : rel + 4] != _ZIP64_EOCD:
            raise _bad(url, "the ZIP64 end record is not where its locator says")
        if rel + 56 > loc:  # a locator pointing into the file's last bytes (or at itself)
            raise _bad(url, "the ZIP64 end record runs into its locator (56 bytes needed)")
        size, offset = struct.unpack_from("<QQ", tail, rel + 40)
        end = record
    else:
        end = tail_start + at
    if offset + size != end or end > total:
        raise _bad(url, "the central directory's offset and size do not add up")
    return offset, size


def _find_in_tail(tail: bytes, tail_start: int, cd_offset: int, cd_end: int) -> _Entry | None:
    """The METADATA entry among the central-directory entries inside `tail`, if there."""
    first = max(0, cd_offset - tail_start)
    end = cd_end - tail_start
    pos = tail.find(_CENTRAL, first)
    while 0 <= pos < end:
        try:
            entries = list(_chain(tail, pos, end))
        except (ValueError, struct.error, UnicodeDecodeError):
            pos = tail.find(_CENTRAL, pos + 1)
            continue
        hits = [e for e in entries if _METADATA_RE.match(e.name)]
        return hits[0] if len(hits) == 1 else None
    return None


def _total(url: str, answer_headers: dict[str, str], known: int | None, got: int) -> int:
    match = _CONTENT_RANGE_RE.match(answer_headers.get("content-range", ""))
    if match:
        return int(match[3])
    if known is not None:
        return known
    raise _bad(url, "the server gave no Content-Range and the index no size")


def _member(url: str, http: Http, entry: _Entry, total: int) -> bytes:
    if entry.compressed > MAX_METADATA or entry.size > MAX_METADATA:
        raise _bad(url, f"{entry.name} is larger than {MAX_METADATA} bytes")
    want = 30 + len(entry.name.encode()) + entry.compressed + 1024
    stop = min(entry.offset + want, total) - 1
    if entry.offset >= total:
        raise _bad(url, f"{entry.name}: its offset lies past the end of the file")
    data = http.get(url, byte_range=(entry.offset, stop), max_bytes=want).body
    if data[:4] != _LOCAL or len(data) < 30:
        raise _bad(url, f"{entry.name}: no local header at its offset")
    nlen, elen = struct.unpack_from("<HH", data, 26)
    start = 30 + nlen + elen
    if start + entry.compressed > len(data):
        more = http.get(
            url,
            byte_range=(entry.offset, min(entry.offset + start + entry.compressed, total) - 1),
            max_bytes=start + entry.compressed,
        )
        data = more.body
    raw = data[start : start + entry.compressed]
    if entry.method == 0:
        content = raw
    elif entry.method == 8:
        inflater = zlib.decompressobj(-15)
        try:
            content = inflater.decompress(raw, MAX_METADATA + 1)
        except zlib.error as exc:
            raise _bad(url, f"{entry.name} does not inflate ({exc})") from None
        if len(content) > MAX_METADATA:
            raise _bad(url, f"{entry.name} inflates past {MAX_METADATA} bytes")
    else:
        raise _bad(url, f"{entry.name}: compression method {entry.method} is not read")
    if len(content) != entry.size or zlib.crc32(content) != entry.crc:
        raise _bad(url, f"{entry.name}: size or CRC does not match its directory entry")
    return content


def _pep658(file: IndexFile, http: Http) -> bytes:
    url = file.url + ".metadata"
    body = http.get(url, max_bytes=MAX_METADATA).body
    expected = file.core_metadata_sha256
    if expected is not None and hashlib.sha256(body).hexdigest() != expected:
        raise NetworkError(f"{url}: sha256 does not match the index's core-metadata hash")
    return body


def read_metadata(file: IndexFile, http: Http) -> str:
    """The METADATA text of a wheel on the index (PEP 658 where offered, else range reads)."""
    if file.core_metadata:
        body = _pep658(file, http)
    else:
        url = file.url
        answer = http.get(url, byte_range=(-TAIL, None), max_bytes=TAIL)
        tail = answer.body
        total = _total(url, dict(answer.headers), file.size, len(tail))
        tail_start = total - len(tail)
        if file.size is not None and file.size != total:
            raise _bad(url, f"the server says {total} bytes, the index {file.size}")
        try:  # the server's bytes: any field may lie; a lie is one line, never struct.error
            cd_offset, cd_size = _directory(url, tail, tail_start, total)
        except struct.error as exc:
            raise _bad(url, f"its end records: {exc}") from None
        entry = _find_in_tail(tail, tail_start, cd_offset, cd_offset + cd_size)
        if entry is None:
            if cd_size > MAX_CENTRAL_DIRECTORY:
                raise _bad(url, f"a central directory of {cd_size} bytes")
            directory = http.get(
                url, byte_range=(cd_offset, cd_offset + cd_size - 1), max_bytes=cd_size
            ).body
            try:
                hits = [e for e in _chain(directory, 0, cd_size) if _METADATA_RE.match(e.name)]
            except (ValueError, struct.error, UnicodeDecodeError) as exc:
                raise _bad(url, f"its central directory: {exc}") from None
            if len(hits) != 1:
                raise _bad(url, f"{len(hits)} .dist-info/METADATA members (expected one)")
            entry = hits[0]
        body = _member(url, http, entry, total)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise NetworkError(f"{file.url}: METADATA is not UTF-8") from None
