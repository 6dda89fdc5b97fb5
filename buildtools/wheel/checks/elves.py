"""The shared objects a check looks at: extracted from a wheel, or handed in by doctor."""

from __future__ import annotations

__all__ = ["WheelElf", "describe_device_code", "extract_elves", "is_grafted"]

import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ...files import check_member_names, safe_join
from ..elf import ELF_MAGIC, ElfInfo, inspect_elf, strip_graft_hash


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


def extract_elves(wheel: Path, into: Path) -> list[WheelElf]:
    """Every ELF `*.so*` in `wheel`, unpacked under `into` (pyelftools reads files, not zips)."""
    out: list[WheelElf] = []
    with zipfile.ZipFile(wheel) as zf:
        check_member_names(zf.namelist(), what=wheel.name)  # a zip-slip wheel: nothing unpacked
        for member in sorted(zf.infolist(), key=lambda i: i.filename):
            if member.is_dir() or not _is_so_name(member.filename):
                continue
            with zf.open(member) as fh:
                if fh.read(4) != ELF_MAGIC:
                    continue
            dest = safe_join(into, member.filename, what=f"{wheel.name}: member")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as fh, dest.open("wb") as out_fh:
                shutil.copyfileobj(fh, out_fh, 1 << 20)
            out.append(
                WheelElf(
                    arcname=member.filename,
                    info=inspect_elf(dest),
                    grafted=is_grafted(member.filename),
                )
            )
    return out


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
