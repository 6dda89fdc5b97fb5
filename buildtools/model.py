"""The shared vocabulary: Accelerator, Cell, BuildJob, Finding (frozen records)."""

from __future__ import annotations

__all__ = [
    "ABI_MODES",
    "PLATFORMS",
    "AbiMode",
    "Accelerator",
    "BuildJob",
    "Cell",
    "Finding",
    "Severity",
    "Toolkit",
]

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Literal

AbiMode = Literal["per-python", "abi3", "stable"]
ABI_MODES: tuple[AbiMode, ...] = ("per-python", "abi3", "stable")
PLATFORMS: tuple[str, ...] = ("linux_x86_64", "linux_aarch64")
DEFAULT_PLATFORM = "linux_x86_64"

_ACCEL_RE = re.compile(r"^(?:(?P<cpu>cpu)|cu(?P<cuda>\d{3,4})|rocm(?P<rocm>\d+\.\d+(?:\.\d+)?))$")


@dataclass(frozen=True, kw_only=True, order=True)
class Accelerator:
    """`cpu`, `cuXYZ` (CUDA X.YZ → e.g. cu130 is 13.0, cu126 is 12.6) or `rocmX.Y`."""

    name: str
    kind: Literal["cpu", "cuda", "rocm"]
    version: str | None

    @classmethod
    def parse(cls, name: str) -> Accelerator:
        """Parse an accelerator name; raises ValueError with the allowed forms."""
        m = _ACCEL_RE.match(name)
        if m is None:
            raise ValueError(
                f"{name!r} is not an accelerator; allowed: 'cpu', 'cuXYZ' (e.g. cu126, cu130), "
                "'rocmX.Y' (e.g. rocm6.4)"
            )
        if m["cpu"]:
            return cls(name="cpu", kind="cpu", version=None)
        if m["cuda"]:
            digits = m["cuda"]
            return cls(name=name, kind="cuda", version=f"{digits[:-1]}.{digits[-1]}")
        return cls(name=name, kind="rocm", version=m["rocm"])

    @property
    def is_device(self) -> bool:
        return self.kind != "cpu"


def python_tag(python: str) -> str:
    """'3.12' → 'cp312'."""
    return "cp" + python.replace(".", "")


@dataclass(frozen=True, kw_only=True, order=True)
class Cell:
    """One point of the support matrix."""

    torch: str
    accelerator: str
    python: str
    platform: str = DEFAULT_PLATFORM
    # `torch: current`: the torch of the running environment (`torch` is its exact
    # torch.__version__, e.g. "2.13.0+cpu" or "2.13.0a0+git1a2b3c4"), not an index release.
    current: bool = False

    @property
    def id(self) -> str:
        """Stable, readable id: torch2.11.0-cu130-cp312 (platform suffix when not x86_64).

        A `torch: current` cell says so: torch2.13.0+cpu-current-cpu-cp311.
        """
        marker = "-current" if self.current else ""
        base = f"torch{self.torch}{marker}-{self.accelerator}-{python_tag(self.python)}"
        if self.platform != DEFAULT_PLATFORM:
            base += "-" + self.platform.removeprefix("linux_")
        return base


@dataclass(frozen=True, kw_only=True)
class Toolkit:
    """What compiles device code: CUDA/ROCm version, PyPI packages pinned, arch list."""

    kind: Literal["cuda", "rocm"]
    version: str
    arch_list: str
    pip_packages: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BuildJob:
    """One build that covers one or more cells; every field is derived by the planner."""

    id: str
    cells: tuple[Cell, ...]
    abi: AbiMode
    torch: str
    torch_versions: tuple[str, ...]
    accelerator: str
    pythons: tuple[str, ...]
    platform: str
    torch_requirement: str
    requires_dist: str
    toolkit: Toolkit | None
    image: str
    platform_tag: str
    local_version: str
    cxx11_abi: bool
    env: tuple[tuple[str, str], ...]
    runner: str | tuple[str, ...]
    smoke_runner: str | tuple[str, ...] | None
    repair: Literal["auto", "skip", "command"]
    repair_command: tuple[str, ...] = ()
    repair_excludes: tuple[str, ...] = ()
    torch_index: str | None = None
    smoke: str | None = None
    # "current": build against the torch of the environment of `current_python` (no torch
    # install; a venv that sees that environment's site-packages), see docs/matrix.md.
    torch_source: Literal["index", "current"] = "index"
    current_python: str | None = None
    # compiler cache (ccache) for this job's compiles; matrix `build.ccache: false` turns it off
    ccache: bool = True

    @property
    def build_python(self) -> str:
        """The interpreter the job builds with (the oldest of its Pythons)."""
        return self.pythons[0]

    @property
    def cell_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.cells)

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def to_json(self) -> dict[str, Any]:
        """The plan of one job as GitHub Actions' matrix consumes it (flat, JSON-serialisable)."""
        return {
            "id": self.id,
            "cells": list(self.cell_ids),
            "abi": self.abi,
            "torch": self.torch,
            "torch_versions": list(self.torch_versions),
            "accelerator": self.accelerator,
            "python": self.build_python,
            "pythons": list(self.pythons),
            "platform": self.platform,
            "platform_tag": self.platform_tag,
            "image": self.image,
            "runner": list(self.runner) if isinstance(self.runner, tuple) else self.runner,
            "smoke_runner": list(self.smoke_runner)
            if isinstance(self.smoke_runner, tuple)
            else self.smoke_runner,
            "torch_requirement": self.torch_requirement,
            "torch_source": self.torch_source,
            "requires_dist": self.requires_dist,
            "local_version": self.local_version,
            "arch_list": self.toolkit.arch_list if self.toolkit else None,
            "toolkit": list(self.toolkit.pip_packages) if self.toolkit else [],
            "env": dict(self.env),
            "repair": self.repair,
            # the job's compiler cache is $BUILDTOOLS_CCACHE_DIR/<ccache_key> (else
            # <cache dir>/ccache/<ccache_key>): what a CI job restores and saves; null: no cache
            "ccache_key": self.id if self.ccache else None,
        }


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One result of a check: a code, a severity and a sentence a maintainer can act on."""

    code: str
    severity: Severity
    message: str
    path: str | None = None
    details: tuple[str, ...] = field(default=())
