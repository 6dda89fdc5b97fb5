"""How many bytes of a shared object's CUDA device code each arch takes (`wheel-size`).

The fatbin layout (entries with a header that names the arch) is read by
`elf.parse_fatbin`; this module only walks the entries of each fatbin section and hands
each one to it alone, so the arch names come from one place. Sizes are the entries' own
(header and payload, compressed when nvcc compressed them): what dropping an arch saves.
"""

from __future__ import annotations

__all__ = ["cuda_sizes"]

import struct
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from .elf import FATBIN_MAGIC, FATBIN_SECTIONS, parse_fatbin

_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, payload size
_ENTRY = struct.Struct("<HHIQ")  # kind, version, entry header size, payload size
_MAX_ENTRIES = 1_000_000


def _walk(data: bytes, sizes: dict[str, int]) -> None:
    magic = struct.pack("<I", FATBIN_MAGIC)
    pos = data.find(magic)
    while pos >= 0 and pos + _HEADER.size <= len(data):
        _, version, header_size, fat_size = _HEADER.unpack_from(data, pos)
        entry = pos + header_size
        stop = min(entry + fat_size, len(data))
        count = 0
        while entry + _ENTRY.size <= stop and count < _MAX_ENTRIES:
            _, _, entry_header, payload = _ENTRY.unpack_from(data, entry)
            if entry_header == 0:
                break
            length = min(entry_header + payload, stop - entry)
            alone = _HEADER.pack(FATBIN_MAGIC, version, _HEADER.size, length)
            for arch in parse_fatbin(alone + data[entry : entry + length]):
                sizes[arch] = sizes.get(arch, 0) + length
            entry += entry_header + payload
            count += 1
        pos = data.find(magic, max(stop, pos + 4))


def cuda_sizes(path: Path) -> dict[str, int]:
    """{'sm_90': bytes, 'compute_120': bytes, …} of the CUDA fatbins in one ELF file."""
    sizes: dict[str, int] = {}
    try:
        with path.open("rb") as fh:
            elf = ELFFile(fh)
            for name in FATBIN_SECTIONS:
                section = elf.get_section_by_name(name)
                if section is not None and section["sh_type"] != "SHT_NOBITS":
                    fh.seek(section["sh_offset"])
                    _walk(fh.read(section["sh_size"]), sizes)
    except (OSError, ELFError, struct.error):
        return sizes
    return sizes
