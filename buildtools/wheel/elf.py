"""ELF facts about one shared object, read with pyelftools (no subprocess).

What the checks and the repair step need to know about a `.so`: its SONAME, DT_NEEDED,
RPATH/RUNPATH, the dynamic symbols it exports and the ones it needs (with the version
node each needs, e.g. GLIBC_2.34), the CUDA/HIP device code it carries and for which
archs, and which C++ ABI its std::string symbols use.

`.dynsym` is decoded with `struct` rather than pyelftools' per-symbol objects: torch's
libtorch_cpu.so alone has 75k dynamic symbols, which pyelftools walks in ~1.7 s and
`struct.iter_unpack` in a small fraction of that. Results are cached per
(path, mtime, size), so a torch installation is scanned once per process.
"""

from __future__ import annotations

__all__ = [
    "CxxAbi",
    "DeviceCode",
    "ElfInfo",
    "UndefinedSymbol",
    "cxx_abi_of",
    "demangle",
    "inspect_elf",
    "is_elf",
    "parse_fatbin",
    "parse_offload_bundles",
    "strip_graft_hash",
]

import ctypes
import functools
import importlib
import io
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

CxxAbi = Literal["cxx11", "pre-cxx11", "mixed"]

ELF_MAGIC = b"\x7fELF"

# CUDA fatbin container, as nvcc writes it into `.nv_fatbin` (whole-program) and
# `__nv_relfatbin` (-rdc): a 16-byte header (magic, version, header size, payload size)
# followed by entries with a 64+ byte header each. Layout checked against nvcc 13.0
# output (tests/fixtures/cuda/); the entry header carries the arch, so compressed
# entries need no decompression.
FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
_FATBIN_KINDS = {1: "compute", 2: "sm", 8: "lto"}  # PTX, cubin (ELF), NVVM IR for LTO
_FATBIN_FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a, compute_100a
_FATBIN_FLAG_FAMILY = 0x200000  # sm_100f, compute_120f

# clang offload bundles in `.hip_fatbin`: "__CLANG_OFFLOAD_BUNDLE__", u64 count, then
# per entry u64 offset, u64 size, u64 id length, id ("hipv4-amdgcn-amd-amdhsa--gfx90a").
# "CCOB" marks a compressed bundle (zlib or zstd).
HIP_SECTIONS = (".hip_fatbin",)
_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_CCOB_MAGIC = b"CCOB"
_GFX_RE = re.compile(r"amdgcn-amd-amdhsa-+(gfx[0-9a-f]+)")

# auditwheel renames a grafted library "libc10.so" to "libc10-<8 hex of sha256>.so".
_GRAFT_RE = re.compile(r"^(?P<base>[^.]+)-[0-9a-f]{8}\.(?P<ext>so(?:\..*)?)$")

# Old-ABI std::string shows up demangled as "std::string" / "std::basic_string<...>";
# the cxx11 ABI puts everything string-like in the std::__cxx11 inline namespace.
_OLD_STRING_RE = re.compile(
    r"std::(?:string\b(?!_view)|basic_string<|basic_(?:i|o)?stringstream<|basic_stringbuf<)"
)

_STB_GLOBAL = 1
_STB_WEAK = 2
_STB_GNU_UNIQUE = 10
_STT_SECTION = 3
_STT_FILE = 4
_STV_HIDDEN = 2
_STV_INTERNAL = 1
_SHN_UNDEF = 0
_VERSYM_HIDDEN = 0x8000


@dataclass(frozen=True, kw_only=True, order=True)
class UndefinedSymbol:
    """A global, non-weak dynamic symbol the object needs from somewhere else."""

    name: str
    version: str | None = None  # version node required, e.g. "GLIBC_2.34"
    library: str | None = None  # the DT_NEEDED entry that version node belongs to

    @property
    def demangled(self) -> str:
        return demangle(self.name)

    def __str__(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name


@dataclass(frozen=True, kw_only=True)
class DeviceCode:
    """Device code carried by an object: CUDA ("sm_80", "compute_120") or HIP ("gfx90a").

    `complete` is False when some of it could not be read (a compressed HIP bundle
    without a zstd module, an unknown fatbin layout): then `archs` is a lower bound.
    """

    kind: Literal["cuda", "hip"]
    archs: frozenset[str]
    complete: bool = True


@dataclass(frozen=True, kw_only=True)
class ElfInfo:
    """What buildtools knows about one ELF shared object."""

    path: Path
    machine: str
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    exported: frozenset[str] = field(repr=False)
    undefined: tuple[UndefinedSymbol, ...] = field(repr=False)
    cuda: DeviceCode | None
    hip: DeviceCode | None
    cxx_abi: CxxAbi | None

    @property
    def cuda_archs(self) -> frozenset[str]:
        return self.cuda.archs if self.cuda else frozenset()

    @property
    def hip_archs(self) -> frozenset[str]:
        return self.hip.archs if self.hip else frozenset()

    @property
    def has_device_code(self) -> bool:
        return self.cuda is not None or self.hip is not None


def is_elf(path: Path) -> bool:
    """True when `path` is a regular file starting with the ELF magic."""
    try:
        with path.open("rb") as f:
            return f.read(4) == ELF_MAGIC
    except (IsADirectoryError, FileNotFoundError, PermissionError):
        return False


def strip_graft_hash(name: str) -> str:
    """'libc10-bd5b4540.so' → 'libc10.so'; names auditwheel did not rename come back as is."""
    m = _GRAFT_RE.match(name)
    return f"{m['base']}.{m['ext']}" if m else name


# --- demangling --------------------------------------------------------------------------
# cxxfilt does exactly this, but it locates libstdc++ with ctypes.util.find_library at
# import time, which runs `ldconfig -p`/`gcc` as subprocesses outside the ProcessRunner (and trips
# the unit-test tripwire when imported lazily). libstdc++.so.6 is the one SONAME every
# glibc Linux that runs a torch extension has, so load it directly.


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> tuple[Any, Any] | None:
    try:
        libcxx = ctypes.CDLL("libstdc++.so.6")
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    fn = libcxx.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = libc.free
    free.argtypes = [ctypes.c_void_p]
    free.restype = None
    return fn, free


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """Demangle an Itanium C++ symbol ('_ZN3c10…' → 'c10::…'); other names come back as is."""
    if not name.startswith("_Z"):
        return name
    funcs = _cxa_demangle()
    if funcs is None:
        return name
    fn, free = funcs
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if not ptr:
        return name
    try:
        out = ctypes.string_at(ptr)
    finally:
        free(ptr)
    return out.decode(errors="replace") if status.value == 0 else name


def cxx_abi_of(symbols: Iterable[str]) -> CxxAbi | None:
    """Which libstdc++ string ABI these (mangled) symbols use; None when none mentions a string."""
    new = old = False
    for sym in symbols:
        if not sym.startswith("_Z"):
            continue
        if "__cxx11" in sym:
            new = True
            continue
        # cheap prefilter before demangling: old-ABI strings mangle as "Ss" or "basic_string"
        if "Ss" not in sym and "string" not in sym:
            continue
        if _OLD_STRING_RE.search(demangle(sym)):
            old = True
    if new and old:
        return "mixed"
    if new:
        return "cxx11"
    if old:
        return "pre-cxx11"
    return None


# --- device code -------------------------------------------------------------------------


def _read_at(f: IO[bytes], offset: int, size: int) -> bytes:
    f.seek(offset)
    return f.read(size)


def _find(f: IO[bytes], needle: bytes, start: int, end: int) -> int:
    """Offset of the next `needle` in f[start:end], or -1 (reads in chunks)."""
    chunk = 1 << 16
    pos = start
    while pos < end:
        data = _read_at(f, pos, min(chunk + len(needle) - 1, end - pos))
        i = data.find(needle)
        if i >= 0:
            return pos + i
        if len(data) < len(needle):
            return -1
        pos += chunk
    return -1


def _fatbin_archs(f: IO[bytes], start: int, length: int) -> tuple[set[str], bool]:
    archs: set[str] = set()
    complete = True
    end = start + length
    magic = struct.pack("<I", FATBIN_MAGIC)
    pos = _find(f, magic, start, end)
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
        while entry + 48 <= stop:
            eh = _read_at(f, entry, 48)
            kind, _ev, entry_header_size, payload = struct.unpack_from("<HHIQ", eh, 0)
            (arch,) = struct.unpack_from("<I", eh, 28)
            (flags,) = struct.unpack_from("<Q", eh, 40)
            if entry_header_size == 0:
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
                archs.add(f"{prefix}_{arch}{suffix}")
            entry += entry_header_size + payload
        pos = _find(f, magic, max(stop, pos + 4), end)
    return archs, complete


def parse_fatbin(data: bytes) -> frozenset[str]:
    """Archs in CUDA fatbin data: {'sm_80', 'sm_90a', 'compute_120', 'lto_80', ...}."""
    archs, _ = _fatbin_archs(io.BytesIO(data), 0, len(data))
    return frozenset(archs)


def _decompress_ccob(blob: bytes) -> bytes | None:
    """Decompress a clang compressed offload bundle (CCOB v1-v3); None if not possible."""
    if len(blob) < 24:
        return None
    version, method = struct.unpack_from("<HH", blob, 4)
    if version == 1:
        header = 4 + 2 + 2 + 4 + 8
    elif version == 2:
        header = 4 + 2 + 2 + 4 + 4 + 8
    else:
        header = 4 + 2 + 2 + 8 + 8 + 8
    payload = blob[header:]
    if method == 0:  # llvm::compression::Format::Zlib
        try:
            return zlib.decompress(payload)
        except zlib.error:
            return None
    try:  # Zstd, ROCm's default: only with the optional python-zstandard module
        zstandard = importlib.import_module("zstandard")
        out: bytes = zstandard.ZstdDecompressor().decompressobj().decompress(payload)
        return out
    except Exception:
        return None


def _ccob_size(data: bytes, at: int) -> int:
    """Total size of the compressed bundle at `at` (0 for v1, which does not record it)."""
    if at + 16 > len(data):
        return 0
    (version,) = struct.unpack_from("<H", data, at + 4)
    if version == 2:
        return int(struct.unpack_from("<I", data, at + 8)[0])
    if version >= 3:
        return int(struct.unpack_from("<Q", data, at + 8)[0])
    return 0


def _bundle_ids(data: bytes) -> tuple[set[str], bool]:
    ids: set[str] = set()
    complete = True
    pos = 0
    while True:
        i = data.find(_BUNDLE_MAGIC, pos)
        j = data.find(_CCOB_MAGIC, pos)
        if i < 0 and j < 0:
            break
        if j >= 0 and (i < 0 or j < i):
            total = _ccob_size(data, j)
            inner = _decompress_ccob(data[j : j + total] if total else data[j:])
            if inner is None:
                complete = False
            else:
                more, ok = _bundle_ids(inner)
                ids |= more
                complete &= ok
            pos = j + total if total else j + len(_CCOB_MAGIC)
            continue
        off = i + len(_BUNDLE_MAGIC)
        if off + 8 > len(data):
            complete = False
            break
        (count,) = struct.unpack_from("<Q", data, off)
        off += 8
        for _ in range(count):
            if off + 24 > len(data):
                complete = False
                break
            _eoff, _esize, idlen = struct.unpack_from("<QQQ", data, off)
            off += 24
            ids.add(data[off : off + idlen].decode("ascii", errors="replace"))
            off += idlen
        pos = off
    return ids, complete


def parse_offload_bundles(data: bytes) -> frozenset[str]:
    """GPU targets in `.hip_fatbin` data: {'gfx90a', 'gfx942', ...} (host entries dropped)."""
    ids, _ = _bundle_ids(data)
    return frozenset(_gfx_of(ids))


def _gfx_of(ids: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for bundle_id in ids:
        m = _GFX_RE.search(bundle_id)
        if m:
            out.add(m[1])
    return out


# --- the ELF reader ----------------------------------------------------------------------


def _dynamic(elf: ELFFile) -> tuple[str | None, list[str], list[str], list[str]]:
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    for section in elf.iter_sections():
        if not isinstance(section, DynamicSection):
            continue
        for tag in section.iter_tags():
            kind = tag.entry.d_tag
            # pyelftools sets the decoded string as an attribute named after the tag
            if kind == "DT_SONAME":
                soname = str(getattr(tag, "soname", ""))
            elif kind == "DT_NEEDED":
                needed.append(str(getattr(tag, "needed", "")))
            elif kind == "DT_RPATH":
                rpath.extend(p for p in str(getattr(tag, "rpath", "")).split(":") if p)
            elif kind == "DT_RUNPATH":
                runpath.extend(p for p in str(getattr(tag, "runpath", "")).split(":") if p)
        break
    return soname, needed, rpath, runpath


def _version_needs(elf: ELFFile) -> dict[int, tuple[str, str]]:
    """versym index → (version node, library) from .gnu.version_r."""
    out: dict[int, tuple[str, str]] = {}
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for verneed, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    out[int(aux["vna_other"])] = (str(aux.name), str(verneed.name))
    return out


def _symbols(f: IO[bytes], elf: ELFFile) -> tuple[frozenset[str], tuple[UndefinedSymbol, ...]]:
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is None or dynsym["sh_size"] == 0:
        return frozenset(), ()
    strtab = elf.get_section(dynsym["sh_link"])
    strings = _read_at(f, strtab["sh_offset"], strtab["sh_size"])
    raw = _read_at(f, dynsym["sh_offset"], dynsym["sh_size"])
    endian = "<" if elf.little_endian else ">"
    if elf.elfclass == 64:
        fmt = endian + "IBBHQQ"  # name, info, other, shndx, value, size
        entsize = 24
        rows = (
            (r[0], r[1], r[2], r[3])
            for r in struct.iter_unpack(fmt, raw[: len(raw) // entsize * entsize])
        )
    else:
        fmt = endian + "IIIBBH"  # name, value, size, info, other, shndx
        entsize = 16
        rows = (
            (r[0], r[3], r[4], r[5])
            for r in struct.iter_unpack(fmt, raw[: len(raw) // entsize * entsize])
        )

    versym_sec = elf.get_section_by_name(".gnu.version")
    versyms: tuple[int, ...] = ()
    if versym_sec is not None:
        vraw = _read_at(f, versym_sec["sh_offset"], versym_sec["sh_size"])
        versyms = struct.unpack(f"{endian}{len(vraw) // 2}H", vraw[: len(vraw) // 2 * 2])
    needs = _version_needs(elf) if versyms else {}

    def name_at(offset: int) -> str:
        end = strings.find(b"\0", offset)
        return strings[offset : end if end >= 0 else len(strings)].decode("utf-8", "replace")

    exported: set[str] = set()
    undefined: list[UndefinedSymbol] = []
    for index, (st_name, st_info, st_other, st_shndx) in enumerate(rows):
        if index == 0 or st_name == 0:
            continue
        bind = st_info >> 4
        typ = st_info & 0xF
        if st_shndx == _SHN_UNDEF:
            if bind != _STB_GLOBAL:
                continue  # weak references may stay unresolved
            version = library = None
            if index < len(versyms):
                need = needs.get(versyms[index] & ~_VERSYM_HIDDEN)
                if need is not None:
                    version, library = need
            undefined.append(
                UndefinedSymbol(name=name_at(st_name), version=version, library=library)
            )
            continue
        if bind not in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE):
            continue
        if typ in (_STT_SECTION, _STT_FILE):
            continue
        if (st_other & 0x3) in (_STV_HIDDEN, _STV_INTERNAL):
            continue
        exported.add(name_at(st_name))
    return frozenset(exported), tuple(sorted(undefined))


def _device_code(f: IO[bytes], elf: ELFFile) -> tuple[DeviceCode | None, DeviceCode | None]:
    cuda_archs: set[str] = set()
    cuda_complete = True
    has_cuda = False
    hip_ids: set[str] = set()
    hip_complete = True
    has_hip = False
    for section in elf.iter_sections():
        if section["sh_type"] == "SHT_NOBITS" or section["sh_size"] == 0:
            continue
        if section.name in FATBIN_SECTIONS:
            has_cuda = True
            archs, complete = _fatbin_archs(f, section["sh_offset"], section["sh_size"])
            cuda_archs |= archs
            cuda_complete &= complete
        elif section.name in HIP_SECTIONS:
            has_hip = True
            ids, complete = _bundle_ids(_read_at(f, section["sh_offset"], section["sh_size"]))
            hip_ids |= ids
            hip_complete &= complete
    cuda = (
        DeviceCode(kind="cuda", archs=frozenset(cuda_archs), complete=cuda_complete)
        if has_cuda
        else None
    )
    hip = (
        DeviceCode(kind="hip", archs=frozenset(_gfx_of(hip_ids)), complete=hip_complete)
        if has_hip
        else None
    )
    return cuda, hip


def _inspect(path: Path) -> ElfInfo:
    with path.open("rb") as f:
        try:
            elf = ELFFile(f)
            soname, needed, rpath, runpath = _dynamic(elf)
            exported, undefined = _symbols(f, elf)
            cuda, hip = _device_code(f, elf)
            machine = str(elf["e_machine"])
        except (ELFError, struct.error, ValueError) as exc:
            raise ValueError(f"{path}: not a readable ELF shared object ({exc})") from exc
    return ElfInfo(
        path=path,
        machine=machine,
        soname=soname,
        needed=tuple(needed),
        rpath=tuple(rpath),
        runpath=tuple(runpath),
        exported=exported,
        undefined=undefined,
        cuda=cuda,
        hip=hip,
        cxx_abi=_abi_of(undefined),
    )


def _abi_of(undefined: Iterable[UndefinedSymbol]) -> CxxAbi | None:
    # What matters is the ABI of the symbols that cross into torch; libstdc++ itself
    # exports both ABIs and a cxx11 binary may still touch old-ABI internals
    # (libtorch_python.so references std::string::_Rep::_S_empty_rep_storage).
    syms = list(undefined)
    abi = cxx_abi_of(s.name for s in syms if s.library != "libstdc++.so.6")
    return abi if abi is not None else cxx_abi_of(s.name for s in syms)


@functools.lru_cache(maxsize=4096)
def _inspect_cached(path: str, mtime_ns: int, size: int) -> ElfInfo:
    return _inspect(Path(path))


def inspect_elf(path: Path) -> ElfInfo:
    """ELF facts for `path`, cached per (path, mtime, size); ValueError if not ELF."""
    st = path.stat()
    return _inspect_cached(str(path), st.st_mtime_ns, st.st_size)
