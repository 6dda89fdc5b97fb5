"""The compatibility knowledge base: facts about torch, CUDA and ROCm, read from buildtools/data.

`base` holds the validated rows and the `Knowledge` that answers questions about them;
`loading` reads and checks the YAML files.
"""

from __future__ import annotations

__all__ = [
    "DATA_DIR",
    "Aarch64Release",
    "CudaRelease",
    "ImageRule",
    "Knowledge",
    "NeverBundle",
    "RocmRelease",
    "TorchRelease",
    "load_knowledge",
]

from .base import (
    DATA_DIR,
    Aarch64Release,
    CudaRelease,
    ImageRule,
    Knowledge,
    NeverBundle,
    RocmRelease,
    TorchRelease,
)
from .loading import load_knowledge
