"""Named members of a wheel on the index, read by HTTP range requests, never the wheel.

What the stable-ABI facts need of a torch release is a few headers (kilobytes) and the
dynamic symbol tables of two libraries (`libtorch_cpu.so`, `libtorch_cuda.so`: 118 MB and
332 MB compressed in a 0.5 GB wheel). `listing` reads the central directory (the end
records, then the directory itself, as `remote` does for METADATA); `read_small` reads one
member into memory; `extract` streams one member by ranges of `chunk` bytes through an
inflater into a file, so neither the wheel nor the compressed member is ever held whole.
Every member is checked against its directory entry (size and CRC-32) before it is used;
a member over the caller's cap is refused before a byte of it is read.
"""

from __future__ import annotations

__all__ = ["Member", "extract", "listing", "read_small"]

import io
import struct
import zlib
from dataclasses import dataclass
from typing import IO

from ..http import Http
from .remote import TAIL, _bad, _chain, _directory, _Entry, _total
from .simple import IndexFile

_LOCAL = b"PK\x03\x04"
_MAX_DIRECTORY = 32 << 20
_LOCAL_SLACK = 64 << 10  # a local header's name and extra field, read with its member


@dataclass(frozen=True, kw_only=True)
class Member:
    """One member of a remote wheel: its name, sizes, CRC and where its local header is."""

    name: str
    method: int
    crc: int
    compressed: int
    size: int
    offset: int
    total: int  # the wheel's size, which every offset is checked against


def listing(file: IndexFile, http: Http) -> tuple[Member, ...]:
    """Every member of `file` (its central directory, read by two range requests)."""
    url = file.url
    answer = http.get(url, byte_range=(-TAIL, None), max_bytes=TAIL)
    tail = answer.body
    total = _total(url, dict(answer.headers), file.size, len(tail))
    if file.size is not None and file.size != total:
        raise _bad(url, f"the server says {total} bytes, the index {file.size}")
    try:
        offset, size = _directory(url, tail, total - len(tail), total)
    except struct.error as exc:
        raise _bad(url, f"its end records: {exc}") from None
    if size > _MAX_DIRECTORY:
        raise _bad(url, f"a central directory of {size} bytes")
    start = total - len(tail)
    if offset >= start:
        directory = tail[offset - start : offset - start + size]
    else:
        directory = http.get(url, byte_range=(offset, offset + size - 1), max_bytes=size).body
    try:
        entries = list(_chain(directory, 0, size))
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise _bad(url, f"its central directory: {exc}") from None
    return tuple(_member(url, e, total) for e in entries)


def _member(url: str, entry: _Entry, total: int) -> Member:
    if entry.offset + entry.compressed > total:
        raise _bad(url, f"{entry.name}: its directory entry points past the end of the file")
    return Member(
        name=entry.name,
        method=entry.method,
        crc=entry.crc,
        compressed=entry.compressed,
        size=entry.size,
        offset=entry.offset,
        total=total,
    )


def _data_start(url: str, http: Http, member: Member) -> tuple[int, bytes]:
    """(absolute offset of the member's data, the bytes after its local header read with it)."""
    stop = min(member.offset + 30 + _LOCAL_SLACK, member.total) - 1
    head = http.get(url, byte_range=(member.offset, stop), max_bytes=stop - member.offset + 1).body
    if head[:4] != _LOCAL or len(head) < 30:
        raise _bad(url, f"{member.name}: no local header at its offset")
    nlen, elen = struct.unpack_from("<HH", head, 26)
    skip = 30 + nlen + elen
    if skip > len(head):
        raise _bad(url, f"{member.name}: a local header longer than {_LOCAL_SLACK} bytes")
    return member.offset + skip, head[skip:]


def _inflater(url: str, member: Member) -> zlib._Decompress | None:
    if member.method == 0:
        return None
    if member.method == 8:
        return zlib.decompressobj(-15)
    raise _bad(url, f"{member.name}: compression method {member.method} is not read")


def extract(
    file: IndexFile, http: Http, member: Member, dest: IO[bytes], *, max_size: int, chunk: int
) -> None:
    """`member` of `file` inflated into `dest` (its size at most `max_size`), read by ranges
    of `chunk` compressed bytes; its size and CRC-32 checked against the directory."""
    url = file.url
    if member.size > max_size:
        raise _bad(url, f"{member.name} is {member.size} bytes, over the {max_size} read")
    start, first = _data_start(url, http, member)
    end = start + member.compressed  # exclusive
    if end > member.total:
        raise _bad(url, f"{member.name}: its data runs past the end of the file")
    inflater = _inflater(url, member)
    crc = written = 0
    pos = start
    pending = first[: member.compressed]
    while True:
        if pending:
            pos += len(pending)
            try:
                out = inflater.decompress(pending) if inflater is not None else pending
            except zlib.error as exc:
                raise _bad(url, f"{member.name} does not inflate ({exc})") from None
            written += len(out)
            if written > member.size:
                raise _bad(url, f"{member.name} inflates past the {member.size} bytes it claims")
            crc = zlib.crc32(out, crc)
            dest.write(out)
        if pos >= end:
            break
        stop = min(pos + chunk, end) - 1
        pending = http.get(url, byte_range=(pos, stop), max_bytes=stop - pos + 1).body
        if not pending:
            raise _bad(url, f"{member.name}: the server sent no bytes at offset {pos}")
    if inflater is not None:
        tail = inflater.flush()
        written += len(tail)
        crc = zlib.crc32(tail, crc)
        dest.write(tail)
    if written != member.size or crc != member.crc:
        raise _bad(url, f"{member.name}: size or CRC does not match its directory entry")


def read_small(file: IndexFile, http: Http, member: Member, *, max_size: int) -> bytes:
    """`member` of `file` in memory (a header: kilobytes), at most `max_size` bytes."""
    buf = io.BytesIO()
    extract(file, http, member, buf, max_size=max_size, chunk=max(member.compressed, 1))
    return buf.getvalue()
