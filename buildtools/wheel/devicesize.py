"""How much CUDA device code an ELF file carries per arch (what `check`'s wheel-size finding
lists, and what `build.cuda_compress` changes).

The fatbin entries are walked by `elf` as it reads the object (`devicecode.fatbin_archs`,
bounded by the file and its sections): each arch's bytes are its entries' headers and
payloads (`DeviceCode.sizes`). This module reads them for a file on disk.
"""

from __future__ import annotations

__all__ = ["cuda_sizes"]

from pathlib import Path

from .elf import inspect_elf


def cuda_sizes(path: Path) -> dict[str, int]:
    """{'sm_90': bytes, 'compute_120': bytes, …} of the CUDA fatbins in one ELF file (empty
    when it has none, or is no readable ELF)."""
    try:
        cuda = inspect_elf(path).cuda
    except (OSError, ValueError):
        return {}
    return dict(cuda.sizes) if cuda is not None else {}
