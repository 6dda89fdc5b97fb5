"""Device code inside a shared object: CUDA fatbins and HIP (clang) offload bundles.

Read from the object's file, section by section, never whole: a `.nv_fatbin` or
`.hip_fatbin` can be most of a 1 GB library. Every count, size and offset in them comes
from the file and is bounded by the section it lies in; a compressed HIP bundle is
inflated only as far as its header needs (`_BUNDLE_HEADER_BYTES`), so a 4.9 KB bundle that
inflates to 2.2 GB costs 1 MiB. What cannot be read within those bounds makes the result
incomplete (`DeviceCode.complete`), never an error and never a hang.

Each piece of device code is also kept as a `DeviceEntry`: its arch, the bytes it takes in
the file, whether those bytes are compressed, and how large it is inflated (as its header
says; nothing is inflated to measure it). The device check lists the code a cell did not
promise by these sizes, and `wheel-size` sums them per arch (`devicesize`).
"""

from __future__ import annotations

__all__ = [
    "FATBIN_MAGIC",
    "FATBIN_SECTIONS",
    "HIP_SECTIONS",
    "DeviceEntry",
    "bundle_ids",
    "fatbin_archs",
    "gfx_of",
    "parse_fatbin",
    "parse_offload_bundles",
]

import importlib
import io
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

# CUDA fatbin container, as nvcc writes it into `.nv_fatbin` (whole-program) and
# `__nv_relfatbin` (-rdc): a 16-byte header (magic, version, header size, payload size)
# followed by entries with a 64+ byte header each: u16 kind, u16 version, u32 header size,
# u64 payload size (padded), u32 compressed size, ..., u32 arch at 28, u64 flags at 40,
# u64 inflated size at 56. Layout checked against nvcc 13.0 output (tests/fixtures/cuda/,
# make_fixtures.sh): the entry header carries the arch, so compressed entries need no
# decompression. A compressed entry has flag 0x2000 (LZ4: `--compress-mode=speed`) or
# 0x8000 (Zstd: PTX by default, cubins under `--compress-mode=size` or `balance`), and
# its header says its inflated size: the same object's sm_80 cubin is 3240 bytes
# uncompressed and 846 bytes with `--compress-mode=size`, whose header says 3240.
FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
_FATBIN_KINDS = {1: "compute", 2: "sm", 8: "lto"}  # PTX, cubin (ELF), NVVM IR for LTO
_FATBIN_FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a, compute_100a
_FATBIN_FLAG_FAMILY = 0x200000  # sm_100f, compute_120f
_FATBIN_FLAG_COMPRESSED = 0x2000 | 0x8000  # LZ4, Zstd
_FATBIN_ENTRY = 48  # the part of an entry header every entry must have
_FATBIN_INFLATED_AT = 56  # u64, in the 64-byte headers nvcc writes

# clang offload bundles in `.hip_fatbin`: "__CLANG_OFFLOAD_BUNDLE__", u64 count, then
# per entry u64 offset, u64 size, u64 id length, id ("hipv4-amdgcn-amd-amdhsa--gfx90a").
# "CCOB" marks a compressed bundle (zlib or zstd).
HIP_SECTIONS = (".hip_fatbin",)
_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_CCOB_MAGIC = b"CCOB"
_GFX_RE = re.compile(r"amdgcn-amd-amdhsa-+(gfx[0-9a-f]+)")

_ENTRIES_PER_SECTION = 1_000_000  # entry headers read in one section (real: thousands)
_BUNDLE_ENTRIES = 4096  # ids in one bundle (real: a few dozen targets)
_BUNDLE_ID_BYTES = 4096  # one id (real: < 100)
_BUNDLE_HEADER_BYTES = 1 << 20  # of a compressed bundle, inflated to read its ids
_CHUNK = 1 << 16


@dataclass(frozen=True, kw_only=True)
class DeviceEntry:
    """One piece of device code: a fatbin entry (cubin, PTX, LTO IR) or a bundle's target.

    `stored`: the bytes it takes in the file (CUDA: the entry's header and payload; HIP:
    its code object), None for a target of a compressed bundle, which is one stream for
    all targets. `compressed`: whether those bytes are compressed. `inflated`: its
    payload's bytes uncompressed, as its header says (None when the header does not say).
    """

    arch: str  # sm_90a, compute_120, lto_80; gfx942
    stored: int | None
    compressed: bool
    inflated: int | None


def _read_at(f: IO[bytes], offset: int, size: int) -> bytes:
    f.seek(offset)
    return f.read(size)


def _find(f: IO[bytes], needles: tuple[bytes, ...], start: int, end: int) -> tuple[int, int]:
    """(offset, which needle) of the first of `needles` in f[start:end], or (-1, -1)."""
    longest = max(len(n) for n in needles)
    pos = start
    while pos < end:
        data = _read_at(f, pos, min(_CHUNK + longest - 1, end - pos))
        hits = [(i, k) for k, n in enumerate(needles) if (i := data.find(n)) >= 0]
        if hits:
            i, k = min(hits)
            return pos + i, k
        if len(data) < longest:
            break
        pos += _CHUNK
    return -1, -1


def fatbin_archs(
    f: IO[bytes], start: int, length: int, entries: list[DeviceEntry] | None = None
) -> tuple[set[str], bool]:
    """Archs of the fatbin containers in f[start:start+length], and whether all were read;
    `entries` (when given) gains each entry read: its arch, bytes and compression."""
    archs: set[str] = set()
    complete = True
    end = start + length
    magic = struct.pack("<I", FATBIN_MAGIC)
    budget = _ENTRIES_PER_SECTION
    pos, _ = _find(f, (magic,), start, end)
    if pos < 0 and length:
        complete = False
    while 0 <= pos < end:
        head = _read_at(f, pos, 16)
        if len(head) < 16:
            complete = False
            break
        _magic, _version, header_size, fat_size = struct.unpack("<IHHQ", head)
        entry = pos + header_size
        stop = min(entry + fat_size, end)
        while entry + _FATBIN_ENTRY <= stop:
            budget -= 1
            if budget < 0:
                return archs, False
            eh = _read_at(f, entry, _FATBIN_INFLATED_AT + 8)
            if len(eh) < _FATBIN_ENTRY:
                complete = False
                break
            kind, _ev, entry_header_size, payload = struct.unpack_from("<HHIQ", eh, 0)
            (arch,) = struct.unpack_from("<I", eh, 28)
            (flags,) = struct.unpack_from("<Q", eh, 40)
            if entry_header_size < _FATBIN_ENTRY:
                complete = False
                break
            prefix = _FATBIN_KINDS.get(kind)
            if prefix is None:
                complete = False
            else:
                suffix = ""
                if flags & _FATBIN_FLAG_ARCH_SPECIFIC:
                    suffix = "a"
                elif flags & _FATBIN_FLAG_FAMILY:
                    suffix = "f"
                name = f"{prefix}_{arch}{suffix}"
                archs.add(name)
                if entries is not None:
                    entries.append(_fatbin_entry(name, eh, flags, stop - entry))
            entry += entry_header_size + payload
        pos, _ = _find(f, (magic,), max(stop, pos + 4), end)
    return archs, complete


def _fatbin_entry(name: str, head: bytes, flags: int, left: int) -> DeviceEntry:
    """The entry `name` whose header is `head`, with `left` bytes of the section from it."""
    header_size, payload = struct.unpack_from("<IQ", head, 4)
    compressed = bool(flags & _FATBIN_FLAG_COMPRESSED)
    inflated: int | None = payload
    if compressed:
        inflated = None
        if header_size >= _FATBIN_INFLATED_AT + 8 and len(head) >= _FATBIN_INFLATED_AT + 8:
            inflated = struct.unpack_from("<Q", head, _FATBIN_INFLATED_AT)[0] or None
    return DeviceEntry(
        arch=name,
        stored=max(0, min(header_size + payload, left)),
        compressed=compressed,
        inflated=inflated,
    )


def parse_fatbin(data: bytes) -> frozenset[str]:
    """Archs in CUDA fatbin data: {'sm_80', 'sm_90a', 'compute_120', 'lto_80', ...}."""
    archs, _ = fatbin_archs(io.BytesIO(data), 0, len(data))
    return frozenset(archs)


def _inflate_prefix(f: IO[bytes], start: int, end: int, method: int) -> bytes | None:
    """At most `_BUNDLE_HEADER_BYTES` of the compressed payload in f[start:end]; None when
    it cannot be inflated (a zstd payload without the optional zstandard module)."""
    limit = _BUNDLE_HEADER_BYTES
    if method == 0:  # llvm::compression::Format::Zlib
        inflate = zlib.decompressobj()
        out = bytearray()
        pos = start
        pending = b""
        try:
            while len(out) < limit and not inflate.eof:
                if not pending:
                    pending = _read_at(f, pos, min(_CHUNK, end - pos)) if pos < end else b""
                    if not pending:
                        break
                    pos += len(pending)
                out += inflate.decompress(pending, limit - len(out))
                pending = inflate.unconsumed_tail
        except zlib.error:
            pass
        return bytes(out) or None
    try:  # Zstd, ROCm's default: only with the optional python-zstandard module
        zstandard = importlib.import_module("zstandard")
        f.seek(start)
        reader = zstandard.ZstdDecompressor().stream_reader(_Window(f, end), read_size=_CHUNK)
        data: bytes = reader.read(limit)
        return data
    except Exception:
        return None


class _Window(io.RawIOBase):
    """The file `f` from its current position up to `end`, as a readable stream."""

    def __init__(self, f: IO[bytes], end: int) -> None:
        self._f = f
        self._end = end

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        left = self._end - self._f.tell()
        return self._f.read(left if size < 0 else min(size, left)) if left > 0 else b""


def _ccob(f: IO[bytes], at: int, end: int) -> tuple[bytes | None, int | None]:
    """The inflated start of the compressed bundle (CCOB v1-v3) at `at`, and where it ends
    (None for v1, which does not say)."""
    head = _read_at(f, at, 32)
    if len(head) < 24:
        return None, None
    version, method = struct.unpack_from("<HH", head, 4)
    total = 0
    if version == 1:
        header = 4 + 2 + 2 + 4 + 8
    elif version == 2:
        header = 4 + 2 + 2 + 4 + 4 + 8
        total = int(struct.unpack_from("<I", head, 8)[0])
    else:
        header = 4 + 2 + 2 + 8 + 8 + 8
        total = int(struct.unpack_from("<Q", head, 8)[0]) if len(head) >= 16 else 0
    stop = min(at + total, end) if total > header else None
    return _inflate_prefix(f, at + header, stop or end, method), stop


def bundle_ids(
    f: IO[bytes],
    start: int,
    end: int,
    *,
    depth: int = 0,
    entries: list[DeviceEntry] | None = None,
) -> tuple[set[str], bool]:
    """The ids of the offload bundles in f[start:end], and whether all could be read;
    `entries` (when given) gains each GPU target's code object: its gfx and bytes (a
    compressed bundle's as its header says, inflated)."""
    ids: set[str] = set()
    complete = True
    pos = start
    while pos < end:
        at, which = _find(f, (_BUNDLE_MAGIC, _CCOB_MAGIC), pos, end)
        if at < 0:
            break
        if which == 1:
            inner, stop = _ccob(f, at, end)
            if inner is None or depth > 0:
                complete = False
            else:
                more, ok = bundle_ids(
                    io.BytesIO(inner), 0, len(inner), depth=depth + 1, entries=entries
                )
                ids |= more
                complete &= ok
            pos = stop if stop is not None else at + len(_CCOB_MAGIC)
            continue
        off = at + len(_BUNDLE_MAGIC)
        raw = _read_at(f, off, 8)
        if len(raw) < 8 or off + 8 > end:
            complete = False
            break
        (count,) = struct.unpack("<Q", raw)
        off += 8
        if count > _BUNDLE_ENTRIES:
            complete = False
            count = _BUNDLE_ENTRIES
        for _ in range(count):
            entry = _read_at(f, off, 24)
            if len(entry) < 24 or off + 24 > end:
                complete = False
                break
            eoff, esize, idlen = struct.unpack("<QQQ", entry)
            off += 24
            if idlen > _BUNDLE_ID_BYTES or off + idlen > end:
                complete = False
                break
            bundle_id = _read_at(f, off, idlen).decode("ascii", errors="replace")
            ids.add(bundle_id)
            off += idlen
            if entries is not None and (gfx := gfx_of((bundle_id,))):
                if depth > 0:  # inside a compressed bundle: the header's word, inflated
                    entries.append(
                        DeviceEntry(arch=min(gfx), stored=None, compressed=True, inflated=esize)
                    )
                else:
                    stored = max(0, min(esize, end - (at + eoff)))
                    complete &= stored == esize
                    entries.append(
                        DeviceEntry(arch=min(gfx), stored=stored, compressed=False, inflated=stored)
                    )
        pos = max(off, at + len(_BUNDLE_MAGIC))
    return ids, complete


def parse_offload_bundles(data: bytes) -> frozenset[str]:
    """GPU targets in `.hip_fatbin` data: {'gfx90a', 'gfx942', ...} (host entries dropped)."""
    ids, _ = bundle_ids(io.BytesIO(data), 0, len(data))
    return frozenset(gfx_of(ids))


def gfx_of(ids: Iterable[str]) -> set[str]:
    """The gfx targets named by bundle ids."""
    out: set[str] = set()
    for bundle_id in ids:
        m = _GFX_RE.search(bundle_id)
        if m:
            out.add(m[1])
    return out
