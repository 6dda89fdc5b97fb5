"""The torch a wheel must work with, read from its installation without importing it."""

from __future__ import annotations

__all__ = ["TorchTarget", "load_torch_target"]

from dataclasses import dataclass
from pathlib import Path

from ...errors import ToolchainError
from ...probe.hostenv import read_torch_install
from ...process import ProcessRunner
from ..elf import inspect_elf


@dataclass(frozen=True, kw_only=True)
class TorchTarget:
    """One installed torch a wheel must work with: the checks' view of a `TorchInstall`, with
    the C++ ABI read from its libc10."""

    version: str
    site_packages: Path
    cuda: str | None = None
    hip: str | None = None
    cxx11_abi: bool = True

    @property
    def label(self) -> str:
        return f"torch {self.version}"


def _c10_cxx11(libc10: Path) -> bool:
    exported = inspect_elf(libc10).exported
    ctors = [s for s in exported if s.startswith("_ZN3c105ErrorC")]
    if ctors:
        return any("__cxx11" in s for s in ctors)
    return any("__cxx11" in s for s in exported)


def load_torch_target(site_packages: Path, *, runner: ProcessRunner | None = None) -> TorchTarget:
    """Describe the torch installed in `site_packages` without importing it.

    The probe reads torch/version.py (`__version__`, `cuda`, `hip`); the C++ ABI comes from
    libc10.so's c10::Error constructor. With a `runner`, a torch whose version.py cannot
    be read is asked directly (`import torch` by that environment's interpreter).
    """
    site_packages = site_packages.resolve()
    torch = read_torch_install(site_packages, runner=runner)
    if torch is None:
        raise ToolchainError(
            f"{site_packages}: no readable torch/version.py; install the target torch there "
            "(pip install torch==X.Y.Z --target or into the job's venv)"
        )
    libc10 = site_packages / "torch" / "lib" / "libc10.so"
    if not libc10.is_file():
        raise ToolchainError(f"{libc10}: missing; the torch installation is incomplete")
    return TorchTarget(
        version=torch.version,
        site_packages=site_packages,
        cuda=torch.cuda,
        hip=torch.hip,
        cxx11_abi=_c10_cxx11(libc10),
    )
