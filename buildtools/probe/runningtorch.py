"""`torch: current`: the torch of the running environment, as the planner and toolchain use it.

The planner stays pure: the caller probes the environment here and hands the resulting
`TorchInstall` (with the interpreter, its Python version and platform filled in) to `plan`.
"""

from __future__ import annotations

__all__ = ["current_torch", "probe_current_torch", "site_dirs_for_pth"]

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..context import RunContext
from ..errors import ToolchainError
from ..torchinstall import TorchInstall
from .hostenv import EnvSnapshot, probe_environment


def current_torch(snapshot: EnvSnapshot, *, cxx11_abi: bool | None = None) -> TorchInstall:
    """The `torch: current` facts of an environment; ToolchainError when it has no usable torch.

    `cxx11_abi` is what the caller read from libc10 when torch did not say (no import); when
    neither says, the C++11 ABI (every torch since 2.7) is assumed.
    """
    torch = snapshot.torch
    if torch is None:
        raise ToolchainError(
            f"torch: current: {snapshot.python} has no torch; run buildtools with the "
            "interpreter of the environment that has it, or pass --torch-python PATH"
        )
    if torch.imported is False:
        raise ToolchainError(
            f"torch: current: `import torch` fails in {snapshot.python}: {torch.import_error}; "
            "`buildtools doctor` explains why"
        )
    try:
        Version(torch.version)
    except InvalidVersion:
        raise ToolchainError(
            f"torch: current: torch reports version {torch.version!r}, not a PEP 440 version"
        ) from None
    abi = torch.cxx11_abi if torch.cxx11_abi is not None else cxx11_abi
    return replace(
        torch,
        python=snapshot.python,
        python_version=snapshot.python_version,
        platform=snapshot.platform,
        cxx11_abi=True if abi is None else abi,
    )


def site_dirs_for_pth(snapshot: EnvSnapshot) -> Sequence[Path]:
    """The directories a `.pth` must add so another venv imports this environment's torch."""
    dirs: list[Path] = []
    if snapshot.torch is not None:
        dirs.append(snapshot.torch.site_packages)
    dirs += [d for d in snapshot.site_dirs if d not in dirs]
    return dirs


def probe_current_torch(
    python: Path | None,
    *,
    ctx: RunContext,
) -> TorchInstall:
    """The torch of `python`'s environment (default: $BUILDTOOLS_TORCH_PYTHON, else this one)."""
    if python is None:
        python = Path(ctx.env.get("BUILDTOOLS_TORCH_PYTHON") or sys.executable)
    snapshot = probe_environment(python, ctx=ctx, files=False)
    return current_torch(snapshot)
