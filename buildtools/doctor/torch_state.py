"""The installed torch as the doctor sees it: its files, whether it imports, what it ships.

Everything here is about torch itself, before any extension is judged against it: the
target the binary checks compare with, problems of torch's own installation, and the
distributions torch brings along (nvidia-*, cuda-toolkit…), which are not extensions.
"""

from __future__ import annotations

__all__ = ["TorchState", "torch_cxx11_abi", "torch_distributions", "torch_state"]

from dataclasses import dataclass

from packaging.utils import canonicalize_name

from ..errors import ToolchainError
from ..model import Finding, Severity
from ..probe.hostenv import EnvSnapshot
from ..wheel.checks import TorchTarget, load_torch_target
from ..wheel.repair import scan_torch_libs


@dataclass(frozen=True, kw_only=True)
class TorchState:
    """torch's files read as a check target (None: no torch, or an incomplete one)."""

    target: TorchTarget | None
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    sonames: frozenset[str]  # the libraries torch and its dependencies ship


def torch_state(snapshot: EnvSnapshot) -> TorchState:
    """torch as a target for the binary checks, and what is wrong with torch itself."""
    torch = snapshot.torch
    findings: list[Finding] = []
    notes: list[str] = []
    if torch is None:
        return TorchState(target=None, findings=(), notes=(), sonames=frozenset())
    target: TorchTarget | None = None
    try:
        target = load_torch_target(torch.site_packages)
    except ToolchainError as exc:
        findings.append(
            Finding(
                code="torch-install",
                severity=Severity.ERROR,
                message=f"the torch installation is incomplete: {exc}; reinstall torch",
                path=str(torch.site_packages),
            )
        )
    if torch.imported is False:
        findings.append(
            Finding(
                code="torch-import",
                severity=Severity.ERROR,
                message=f"`import torch` fails: {torch.import_error}. Fix torch first (a "
                "package that puts its own libtorch/libc10 on the loader's path is one cause; "
                "the packages below say whether they do).",
            )
        )
    elif torch.imported is None:
        notes.append("torch was not imported (--no-import): GPUs and the import itself unknown")
    sonames: frozenset[str] = frozenset()
    if target is not None:
        sonames = frozenset(scan_torch_libs(target.site_packages).sonames)
    return TorchState(target=target, findings=tuple(findings), notes=tuple(notes), sonames=sonames)


def torch_distributions(snapshot: EnvSnapshot) -> frozenset[str]:
    """torch and the distributions it pulls in (nvidia-*, cuda-toolkit…): not extensions."""
    torch = snapshot.torch
    if torch is None:
        return frozenset({"torch"})
    try:
        libs = scan_torch_libs(torch.site_packages)
    except ToolchainError:
        return frozenset({"torch"})
    return frozenset(canonicalize_name(d) for d in libs.distributions) | {"torch"}


def torch_cxx11_abi(snapshot: EnvSnapshot, target: TorchTarget | None) -> bool | None:
    """torch's C++ ABI: as the import reported it, else as its libraries say."""
    torch = snapshot.torch
    if torch is not None and torch.cxx11_abi is not None:
        return torch.cxx11_abi
    return target.cxx11_abi if target is not None else None
