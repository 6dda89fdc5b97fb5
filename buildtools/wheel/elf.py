"""ELF facts about one shared object, read with pyelftools (no subprocess).

What the checks and the repair step need to know about a `.so`: its SONAME, DT_NEEDED,
RPATH/RUNPATH, the dynamic symbols it exports and the ones it needs (with the version
node each needs, e.g. GLIBC_2.34), the CUDA/HIP device code it carries and for which
archs, and which C++ ABI its std::string symbols use.

pyelftools reads the ELF header and the section headers; the tables are decoded here with
`struct`: torch's libtorch_cpu.so alone has 75k dynamic symbols, which pyelftools walks in
~1.7 s and `struct.iter_unpack` in a small fraction of that. An object may come from any
wheel, so every offset and size is checked against the file before it is read: the
section header table and each section must lie inside the file, a table is at most
`_TABLE_BYTES`, every string offset inside its table, every count within the bytes it
counts (a `.dynstr` claiming 2**64 bytes, or a version chain that loops, is refused as
"not a readable ELF", never read). The device code is read by `devicecode`, bounded too.
Results are cached per (path, mtime, size), so a torch installation is scanned once per
process.
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
    "inspect_elf_file",
    "is_elf",
    "parse_fatbin",
    "parse_offload_bundles",
    "python_init_symbol",
    "strip_graft_hash",
]

import ctypes
import functools
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from elftools.common.exceptions import ELFError
from elftools.construct import ConstructError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Section

from ..files import open_regular
from .devicecode import (
    FATBIN_SECTIONS,
    HIP_SECTIONS,
    DeviceEntry,
    bundle_ids,
    fatbin_archs,
    gfx_of,
    parse_fatbin,
    parse_offload_bundles,
)

CxxAbi = Literal["cxx11", "pre-cxx11", "mixed"]

ELF_MAGIC = b"\x7fELF"

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
    # each fatbin entry or bundle target read: its arch, bytes, compression
    entries: tuple[DeviceEntry, ...] = field(default=(), compare=False, repr=False)

    @property
    def sizes(self) -> tuple[tuple[str, int], ...]:
        """Bytes in the file per arch (CUDA: its fatbin entries' headers and payloads)."""
        total: dict[str, int] = {}
        for entry in self.entries:
            if entry.stored is not None:
                total[entry.arch] = total.get(entry.arch, 0) + entry.stored
        return tuple(sorted(total.items()))


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
    """True when `path` is a regular file (never a FIFO or device) starting with the ELF magic."""
    try:
        with open_regular(path) as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
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
def python_init_symbol(basename: str) -> str:
    """The symbol a shared object exports when it is the Python extension module its file
    names (`_C.cpython-312-x86_64-linux-gnu.so` → `PyInit__C`); one without it is a library
    (a torch op library, a dependency), not importable by name. A name that is not ASCII
    is looked up as PEP 489 says (`importdl.c`): `PyInitU_` and its Punycode, '-' as '_'
    (`café` → `PyInitU_caf_dma`)."""
    stem = basename.split(".", 1)[0]
    if stem.isascii():
        return f"PyInit_{stem}"
    return "PyInitU_" + stem.encode("punycode").decode("ascii").replace("-", "_")


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


# --- the ELF reader ----------------------------------------------------------------------


_TABLE_BYTES = 256 << 20  # one table read into memory (libtorch_cpu's .dynstr: ~10 MB)
_DT_NULL, _DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 0, 1, 14, 15, 29


class _File:
    """The object's bytes, read only where the file has them (`at` checks the range)."""

    def __init__(self, f: IO[bytes], size: int, elf: ELFFile) -> None:
        self.f = f
        self.size = size
        self.elf = elf
        self.endian = "<" if elf.little_endian else ">"
        self.sections = self._sections()

    def at(self, offset: int, size: int, what: str) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(
                f"{what}: {size:,} bytes at offset {offset:,} lie beyond the file's "
                f"{self.size:,} bytes"
            )
        if size > _TABLE_BYTES:
            raise ValueError(f"{what}: {size:,} bytes, more than {_TABLE_BYTES:,} to read")
        self.f.seek(offset)
        data = self.f.read(size)
        if len(data) != size:
            raise ValueError(f"{what}: the file ends before its {size:,} bytes")
        return data

    def _sections(self) -> list[Section]:
        """The section headers, each checked against the file before pyelftools reads them
        (it seeks to every offset they name, a name's too)."""
        header = self.elf.header
        is64 = self.elf.elfclass == 64
        entsize = 64 if is64 else 40
        shoff = header["e_shoff"]
        if shoff == 0:
            return []
        if header["e_shentsize"] != entsize or shoff + entsize > self.size:
            raise ValueError(
                f"its section header table (at offset {shoff:,}, entries of "
                f"{header['e_shentsize']} bytes) lies beyond the file's {self.size:,} bytes"
            )
        fmt = struct.Struct(self.endian + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII"))
        first = fmt.unpack(self.at(shoff, entsize, "its section header table"))
        count = header["e_shnum"] or first[5]  # e_shnum 0: the count is section 0's sh_size
        rows = self.at(shoff, count * entsize, f"its section header table ({count:,} entries)")
        table = [fmt.unpack_from(rows, i * entsize) for i in range(count)]
        index = header["e_shstrndx"]
        index = first[6] if index == 0xFFFF else index  # SHN_XINDEX: in section 0's sh_link
        if not 0 <= index < count:
            raise ValueError(f"its section name table is section {index} of {count}")
        names = b""
        for i in (index, *range(count)):
            _name, kind, _flags, _addr, offset, size = table[i][:6]
            if kind != 8 and offset + size > self.size:  # 8: SHT_NOBITS, no bytes in the file
                what = "the section name table" if i == index else f"section {_c(names, _name)!r}"
                raise ValueError(
                    f"{what}: {size:,} bytes at offset {offset:,} lie beyond the file's "
                    f"{self.size:,} bytes"
                )
            if i == index and not names:
                names = self.at(offset, size, "the section name table")
        return list(self.elf.iter_sections())

    def data(self, section: Section) -> bytes:
        return self.at(section["sh_offset"], section["sh_size"], f"section {section.name!r}")

    def linked_strings(self, section: Section) -> bytes:
        """The string table a section's sh_link names."""
        link = section["sh_link"]
        if not 0 < link < len(self.sections):
            raise ValueError(f"section {section.name!r} links to no section ({link})")
        return self.data(self.sections[link])

    def by_name(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def by_type(self, kind: str) -> Section | None:
        return next((s for s in self.sections if s["sh_type"] == kind), None)


def _c(table: bytes, offset: int) -> str:
    """The NUL-terminated string at `offset` of `table`, or '?' where there is none."""
    if not 0 <= offset < len(table):
        return "?"
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def _string(table: bytes, offset: int, what: str) -> str:
    if not 0 <= offset < len(table):
        raise ValueError(f"{what}: string offset {offset:,} beyond its table ({len(table):,})")
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def _dynamic(elf: _File) -> tuple[str | None, list[str], list[str], list[str]]:
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    section = elf.by_type("SHT_DYNAMIC")
    if section is None:
        return soname, needed, rpath, runpath
    data = elf.data(section)
    strings = elf.linked_strings(section)
    fmt = elf.endian + ("qQ" if elf.elf.elfclass == 64 else "iI")
    size = struct.calcsize(fmt)
    for tag, value in struct.iter_unpack(fmt, data[: len(data) // size * size]):
        if tag == _DT_NULL:
            break
        if tag == _DT_SONAME:
            soname = _string(strings, value, "DT_SONAME")
        elif tag == _DT_NEEDED:
            needed.append(_string(strings, value, "DT_NEEDED"))
        elif tag == _DT_RPATH:
            rpath.extend(p for p in _string(strings, value, "DT_RPATH").split(":") if p)
        elif tag == _DT_RUNPATH:
            runpath.extend(p for p in _string(strings, value, "DT_RUNPATH").split(":") if p)
    return soname, needed, rpath, runpath


def _version_needs(elf: _File) -> dict[int, tuple[str, str]]:
    """versym index → (version node, library) from .gnu.version_r (Elf_Verneed entries,
    each with its Elf_Vernaux chain; the same 16-byte layout in ELF32 and ELF64)."""
    out: dict[int, tuple[str, str]] = {}
    section = elf.by_type("SHT_GNU_verneed")
    if section is None:
        return out
    data = elf.data(section)
    strings = elf.linked_strings(section)
    need = struct.Struct(elf.endian + "HHIII")
    aux = struct.Struct(elf.endian + "IHHII")
    steps = len(data) // 16 + 1  # a chain that loops back cannot run for ever
    offset = 0
    for _ in range(section["sh_info"]):
        if offset + 16 > len(data) or steps <= 0:
            raise ValueError(".gnu.version_r: an entry lies outside the section")
        _version, count, file_at, aux_at, next_at = need.unpack_from(data, offset)
        library = _string(strings, file_at, ".gnu.version_r")
        at = offset + aux_at
        for _ in range(count):
            steps -= 1
            if at + 16 > len(data) or steps <= 0:
                raise ValueError(".gnu.version_r: an entry lies outside the section")
            _hash, _flags, other, name_at, aux_next = aux.unpack_from(data, at)
            out[other] = (_string(strings, name_at, ".gnu.version_r"), library)
            at += aux_next
        steps -= 1
        if not next_at:
            break
        offset += next_at
    return out


def _symbols(elf: _File) -> tuple[frozenset[str], tuple[UndefinedSymbol, ...]]:
    dynsym = elf.by_name(".dynsym")
    if dynsym is None or dynsym["sh_size"] == 0:
        return frozenset(), ()
    strings = elf.linked_strings(dynsym)
    raw = elf.data(dynsym)
    endian = elf.endian
    if elf.elf.elfclass == 64:
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

    versym_sec = elf.by_name(".gnu.version")
    versyms: tuple[int, ...] = ()
    if versym_sec is not None:
        vraw = elf.data(versym_sec)
        versyms = struct.unpack(f"{endian}{len(vraw) // 2}H", vraw[: len(vraw) // 2 * 2])
    needs = _version_needs(elf) if versyms else {}

    def name_at(offset: int) -> str:
        return _string(strings, offset, ".dynsym")

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
    undefined.sort(key=lambda u: (u.name, u.version or "", u.library or ""))
    return frozenset(exported), tuple(undefined)


def _device_code(elf: _File) -> tuple[DeviceCode | None, DeviceCode | None]:
    cuda_archs: set[str] = set()
    cuda_entries: list[DeviceEntry] = []
    cuda_complete = True
    has_cuda = False
    hip_ids: set[str] = set()
    hip_entries: list[DeviceEntry] = []
    hip_complete = True
    has_hip = False
    for section in elf.sections:
        if section["sh_type"] == "SHT_NOBITS" or section["sh_size"] == 0:
            continue
        start, length = section["sh_offset"], section["sh_size"]
        if section.name in FATBIN_SECTIONS:
            has_cuda = True
            archs, complete = fatbin_archs(elf.f, start, length, cuda_entries)
            cuda_archs |= archs
            cuda_complete &= complete
        elif section.name in HIP_SECTIONS:
            has_hip = True
            ids, complete = bundle_ids(elf.f, start, start + length, entries=hip_entries)
            hip_ids |= ids
            hip_complete &= complete
    cuda = (
        DeviceCode(
            kind="cuda",
            archs=frozenset(cuda_archs),
            complete=cuda_complete,
            entries=tuple(cuda_entries),
        )
        if has_cuda
        else None
    )
    hip = (
        DeviceCode(
            kind="hip",
            archs=frozenset(gfx_of(hip_ids)),
            complete=hip_complete,
            entries=tuple(hip_entries),
        )
        if has_hip
        else None
    )
    return cuda, hip


# what a malformed object makes pyelftools (or the checks above) raise
_MALFORMED = (
    ELFError,
    ConstructError,
    struct.error,
    ValueError,
    KeyError,
    IndexError,
    OverflowError,
)


def inspect_elf_file(f: IO[bytes], *, path: Path, size: int | None = None) -> ElfInfo:
    """ELF facts of the object open as `f` (seekable; `size` bytes, default its length);
    `path` names it in the facts and messages. ValueError when it is not a readable ELF
    shared object."""
    if size is None:
        size = f.seek(0, os.SEEK_END)
    f.seek(0)
    try:
        elf = _File(f, size, ELFFile(f))
        soname, needed, rpath, runpath = _dynamic(elf)
        exported, undefined = _symbols(elf)
        cuda, hip = _device_code(elf)
        machine = str(elf.elf["e_machine"])
    except _MALFORMED as exc:
        raise ValueError(f"{path}: not a readable ELF shared object ({exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: not a readable ELF shared object (nested too deep)") from None
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


def _inspect(path: Path) -> ElfInfo:
    with open_regular(path) as f:
        return inspect_elf_file(f, path=path, size=os.fstat(f.fileno()).st_size)


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
