"""How much device code an ELF file carries per arch (what `check`'s wheel-size finding
lists, what the device check says of code the cell did not promise, and what
`build.cuda_compress` changes).

The fatbin entries and offload-bundle targets are walked by `elf` as it reads the object
(`devicecode.fatbin_archs`, `devicecode.bundle_ids`, bounded by the file and its sections),
each kept as a `devicecode.DeviceEntry`: its bytes in the file, whether they are compressed,
and its inflated size as its header says. This module sums them per arch (`arch_sizes`,
`ArchSize`, which says in words which of its bytes are compressed), and reads them for a
file on disk (`cuda_sizes`).
"""

from __future__ import annotations

__all__ = ["ArchSize", "arch_sizes", "cuda_sizes"]

from dataclasses import dataclass
from pathlib import Path

from .elf import DeviceCode, inspect_elf


@dataclass(frozen=True, kw_only=True)
class ArchSize:
    """One arch's device code in one object, summed over its entries.

    `stored`: bytes in the file of the entries whose bytes are known (a target of a
    compressed offload bundle shares one stream with the others: `shared` counts those);
    `compressed`: how many of the `entries` are stored compressed; `inflated`: their bytes
    uncompressed as the headers say (None when one does not say).
    """

    arch: str
    stored: int
    entries: int
    compressed: int
    shared: int
    inflated: int | None

    def __str__(self) -> str:
        """'3768 bytes', '1016 bytes compressed, 3704 inflated', '…, 1 of 2 entries
        compressed, …', '4560 bytes inflated, in a compressed bundle'."""
        inflated = (
            "inflated size not stated" if self.inflated is None else f"{self.inflated} inflated"
        )
        if self.shared == self.entries:
            if self.inflated is None:
                return "in a compressed bundle, inflated size not stated"
            return f"{self.inflated} bytes inflated, in a compressed bundle"
        text = f"{self.stored} bytes"
        if self.compressed == self.entries:
            text += f" compressed, {inflated}"
        elif self.compressed:
            text += f", {self.compressed} of {self.entries} entries compressed, {inflated}"
        if self.shared:
            text += f", and {self.shared} more in a compressed bundle"
        return text


def arch_sizes(code: DeviceCode) -> dict[str, ArchSize]:
    """{arch: its bytes} of one object's device code, over every entry of that arch."""
    out: dict[str, ArchSize] = {}
    for entry in code.entries:
        was = out.get(entry.arch)
        inflated = entry.inflated
        if was is not None:
            inflated = None if was.inflated is None or inflated is None else was.inflated + inflated
        out[entry.arch] = ArchSize(
            arch=entry.arch,
            stored=(was.stored if was else 0) + (entry.stored or 0),
            entries=(was.entries if was else 0) + 1,
            compressed=(was.compressed if was else 0) + entry.compressed,
            shared=(was.shared if was else 0) + (entry.stored is None),
            inflated=inflated,
        )
    return out


def cuda_sizes(path: Path) -> dict[str, int]:
    """{'sm_90': bytes, 'compute_120': bytes, …} of the CUDA fatbins in one ELF file (empty
    when it has none, or is no readable ELF)."""
    try:
        cuda = inspect_elf(path).cuda
    except (OSError, ValueError):
        return {}
    return dict(cuda.sizes) if cuda is not None else {}
