"""From files to a plan: read matrix.yaml and the knowledge base, probe the host facts the
matrix asks for (the Python running buildtools, `torch: current`), and call the pure planner.

Every command that plans (plan, build, ci matrix, ci github) goes through `load_plan`, so
they agree on where matrix.yaml is and what `python: host` means.
"""

from __future__ import annotations

__all__ = ["PlanRequest", "default_matrix_path", "host_python", "load_plan"]

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .knowledge import load_knowledge
from .matrix.config import load_matrix
from .planner import Plan, Selection, needs_current, plan
from .probe.current import probe_current_torch
from .process import ProcessRunner, SubprocessRunner


def host_python() -> str:
    """The X.Y of the interpreter running buildtools (what `python: host` means)."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def default_matrix_path(env: Mapping[str, str] | None = None) -> Path:
    """$BUILDTOOLS_MATRIX, else ./matrix.yaml."""
    env = env if env is not None else os.environ
    return Path(env.get("BUILDTOOLS_MATRIX", "matrix.yaml"))


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """What a command asks the planner for (the plan options every planning verb takes)."""

    matrix: Path | None = None
    profile: str | None = None
    only: tuple[str, ...] = ()
    strict: bool = False
    torch_axis: tuple[str, ...] | None = None
    torch_python: Path | None = None


def load_plan(
    request: PlanRequest,
    *,
    env: Mapping[str, str] | None = None,
    runner: ProcessRunner | None = None,
) -> tuple[Plan, Path]:
    """The plan of `request` and the project directory its matrix.yaml names."""
    env = dict(env if env is not None else os.environ)
    path = request.matrix or default_matrix_path(env)
    kb = load_knowledge()
    mf = load_matrix(path, knowledge=kb)
    torch_axis = list(request.torch_axis) if request.torch_axis is not None else None
    current = None
    if needs_current(mf, torch_axis):
        # a host fact, probed here so that the planner stays pure
        current = probe_current_torch(
            request.torch_python, runner=runner or SubprocessRunner(), env=env
        )
    result = plan(
        mf,
        kb,
        host_python=host_python(),
        current=current,
        selection=Selection(
            profile=request.profile,
            only=list(request.only),
            strict=request.strict,
            torch_axis=torch_axis,
        ),
    )
    return result, mf.project_dir
