"""A torch.yaml row for a release the knowledge base does not have yet, from the index.

What the index can tell (the release's Pythons, free-threaded ones, manylinux tags, the
CUDA of the PyPI wheel and its cuda-toolkit pin, per Linux platform) is filled in from it.
What it cannot (the CUDA/ROCm variants built on download.pytorch.org, the C++ standard and
ABI, the stable ABI, cpp_extension's arch lists) is copied from the newest known release
and the row is marked `confirmed: false` with a note naming each copied field, for a
maintainer to confirm from the sources docs/sources.md lists.
"""

from __future__ import annotations

__all__ = ["propose_row"]

import io
from typing import Any

from packaging.version import Version
from ruamel.yaml import YAML

from ..errors import KnowledgeError
from ..knowledge import Knowledge, TorchRelease
from .served import ServedRelease

# fields the index cannot tell: copied from the newest known release
_COPIED = (
    "cuda",
    "rocm",
    "cxx11_abi",
    "cxx_std",
    "stable_abi",
    "py_limited_api",
    "cuda_archs",
    "cuda_arch_names",
    "cuda_arch_native",
)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def propose_row(kb: Knowledge, release: ServedRelease) -> str:
    """The YAML of a new torch.yaml row for `release` (KnowledgeError when it cannot be)."""
    v = Version(release.version)
    minor = f"{v.major}.{v.minor}"
    if minor in kb.torch:
        raise KnowledgeError(
            f"torch {minor} has a row already; `buildtools knowledge --check-index` says what "
            f"differs for {release.version}"
        )
    x86 = release.platforms.get("linux_x86_64")
    arm = release.platforms.get("linux_aarch64")
    if x86 is None:
        raise KnowledgeError(f"the index serves no linux_x86_64 wheel of torch {release.version}")
    base: TorchRelease = list(kb.torch.values())[-1]
    row: dict[str, Any] = {"minor": minor, "patches": [release.version]}
    row["python"] = list(x86.pythons)
    if x86.free_threaded:
        row["free_threaded"] = list(x86.free_threaded)
    for field in _COPIED[:2]:
        row[field] = _plain(getattr(base, field))
    cuda = list(row["cuda"])
    if x86.cuda and x86.cuda not in cuda:
        cuda.append(x86.cuda)
    row["cuda"] = sorted(cuda, key=Version)
    row["pypi_cuda"] = x86.cuda
    if x86.cuda_toolkit:
        row["pypi_cuda_toolkit"] = x86.cuda_toolkit
    row["platform_tag"] = x86.tags[0] if len(x86.tags) == 1 else base.platform_tag
    for field in _COPIED[2:]:
        row[field] = _plain(getattr(base, field))
    aarch64: dict[str, Any] = {}
    if arm is not None:
        if arm.pythons != x86.pythons:
            aarch64["python"] = list(arm.pythons)
        if arm.free_threaded != x86.free_threaded:
            aarch64["free_threaded"] = list(arm.free_threaded)
        a_cuda = list(base.aarch64.cuda)
        if arm.cuda and arm.cuda not in a_cuda:
            a_cuda.append(arm.cuda)
        aarch64["cuda"] = sorted(a_cuda, key=Version)
        aarch64["pypi_cuda"] = arm.cuda
        aarch64["platform_tag"] = arm.tags[0] if len(arm.tags) == 1 else base.aarch64.platform_tag
        aarch64["cxx11_abi"] = base.aarch64.cxx11_abi
        aarch64["source"] = (
            f"V1 range read of the PyPI linux_aarch64 wheel's METADATA ({arm.metadata_of}); "
            f"R2 PyPI file names; CUDA variants copied from torch {base.minor}"
        )
        aarch64["confirmed"] = False
        aarch64["note"] = f"cuda and cxx11_abi copied from torch {base.minor}: confirm them."
    row["aarch64"] = aarch64
    row["source"] = (
        f"R2 PyPI file names of {release.version} (Python tags, manylinux tags); V1 range read "
        f"of the PyPI linux_x86_64 wheel's METADATA ({x86.metadata_of})"
    )
    row["confirmed"] = False
    row["note"] = (
        f"Proposed by ci/propose-torch-release.py from the package index. Copied from torch "
        f"{base.minor}, not read from {release.version}: {', '.join(_COPIED)} (the CUDA/ROCm "
        "variants of download.pytorch.org, the C++ standard and ABI, the stable ABI and "
        "cpp_extension's arch lists); confirm each (R1, R12, R14) and drop confirmed: false."
    )
    try:
        TorchRelease.model_validate(row)
    except ValueError as exc:
        raise KnowledgeError(
            f"the proposed row for {release.version} does not validate: {exc}"
        ) from None
    yaml = YAML()
    yaml.default_flow_style = None
    yaml.width = 100
    out = io.StringIO()
    yaml.dump([row], out)
    return "".join(
        "  " + line if line.strip() else line for line in out.getvalue().splitlines(True)
    )
