"""The shared objects a check looks at: read from a wheel, or handed in by doctor.

A wheel's shared objects are streamed out of the archive one at a time (`wheel.archive`:
bounded, CRC-checked), into memory up to `IN_MEMORY` bytes, else into one temporary file
that is removed before the next: a check never unpacks the wheel, and costs at most its
largest shared object on disk.
"""

from __future__ import annotations

__all__ = [
    "IN_MEMORY",
    "WheelElf",
    "describe_device_code",
    "extract_elves",
    "is_grafted",
    "read_elves",
]

import contextlib
import io
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from ..archive import WheelArchive, open_wheel
from ..elf import ELF_MAGIC, ElfInfo, inspect_elf_file, strip_graft_hash

IN_MEMORY = 64 << 20
"""A shared object up to this size is read into memory; a larger one into a temporary file."""


@dataclass(frozen=True, kw_only=True)
class WheelElf:
    """One ELF shared object, by its path inside the wheel (or the install root)."""

    arcname: str
    info: ElfInfo
    grafted: bool  # in a top-level *.libs/ dir, or renamed with auditwheel's hash

    @property
    def basename(self) -> str:
        return PurePosixPath(self.arcname).name


def is_grafted(arcname: str) -> bool:
    """True for a library auditwheel grafted: in a top-level `*.libs/`, or hash-renamed."""
    parts = PurePosixPath(arcname).parts
    base = parts[-1]
    return (len(parts) > 1 and parts[0].endswith(".libs")) or strip_graft_hash(base) != base


def _is_so_name(name: str) -> bool:
    base = PurePosixPath(name).name
    return base.endswith(".so") or ".so." in base


def _inspect_member(archive: WheelArchive, name: str, scratch: Path | None) -> ElfInfo | None:
    """The ELF facts of member `name`, or None when it does not start with the ELF magic."""
    size = archive.info(name).file_size
    with contextlib.ExitStack() as stack:
        out: IO[bytes] = (
            io.BytesIO()
            if size <= IN_MEMORY
            else stack.enter_context(tempfile.TemporaryFile(dir=scratch, prefix="buildtools-elf-"))
        )
        archive.copy(name, out)
        out.seek(0)
        if out.read(4) != ELF_MAGIC:
            return None
        return inspect_elf_file(out, path=Path(name), size=size)


def read_elves(archive: WheelArchive, *, scratch: Path | None = None) -> list[WheelElf]:
    """Every ELF `*.so*` in the open wheel, sorted by name (`scratch`: where a large one is
    written while it is read; default the system's temporary directory)."""
    out: list[WheelElf] = []
    for name in sorted(archive.names):
        if not _is_so_name(name):
            continue
        info = _inspect_member(archive, name, scratch)
        if info is not None:
            out.append(WheelElf(arcname=name, info=info, grafted=is_grafted(name)))
    return out


def extract_elves(wheel: Path, into: Path | None = None) -> list[WheelElf]:
    """Every ELF `*.so*` in `wheel` (`read_elves`); `into`: where a large one is written
    (made when missing)."""
    if into is not None:
        into.mkdir(parents=True, exist_ok=True)
    with open_wheel(wheel) as archive:
        return read_elves(archive, scratch=into)


def _arch_order(arch: str) -> tuple[str, int, str]:
    """sm_75 before sm_100; gfx90a before gfx942 (the number, then the rest)."""
    match = re.match(r"^([a-z_]*?)(\d+)(.*)$", arch)
    return (match[1], int(match[2]), match[3]) if match else (arch, 0, "")


def describe_device_code(elf: WheelElf) -> str:
    """What device code one shared object carries, in words: 'CUDA sm_80 sm_90, PTX
    compute_90', 'ROCm gfx90a gfx942', or 'no device code'; '(some unreadable)' when the
    reader could not read all of it."""
    parts: list[str] = []
    for label, code in (("CUDA", elf.info.cuda), ("ROCm", elf.info.hip)):
        if code is None:
            continue
        cubins = sorted((a for a in code.archs if not a.startswith("compute_")), key=_arch_order)
        ptx = sorted((a for a in code.archs if a.startswith("compute_")), key=_arch_order)
        text = f"{label} {' '.join(cubins) or '(no cubin)'}"
        text += f", PTX {' '.join(ptx)}" if ptx else ", no PTX" if label == "CUDA" else ""
        parts.append(text + ("" if code.complete else " (some unreadable)"))
    return "; ".join(parts) or "no device code"
