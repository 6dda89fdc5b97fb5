"""From files to a plan: read matrix.yaml and the knowledge base, probe the host facts the
matrix asks for (the Python running buildtools, `torch: current`), and call the pure planner.

Every command that plans (plan, build, ci matrix, ci github) goes through `load_plan`, so
they agree on where matrix.yaml is and what `python: host` means.
"""

from __future__ import annotations

__all__ = ["PlanRequest", "default_matrix_path", "host_python", "load_plan", "served_torch"]

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .cachedir import default_cache_dir
from .context import RunContext
from .ecosystem import load_ecosystem
from .errors import NetworkError
from .http import Http, UrllibHttp
from .knowledge import load_knowledge
from .matrix.config import MatrixFile, is_range, load_matrix
from .planner import Plan, Selection, ServedTorch, needs_current, plan
from .probe.runningtorch import probe_current_torch
from .process import ProcessRunner, SubprocessRunner
from .torchindex import IndexReader, served_releases, served_versions

# how long the index's answer about torch is reused by `plan` (a release day moves it)
SERVED_MAX_AGE = 3600.0


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


def _has_range(mf: MatrixFile, torch_axis: Sequence[str] | None) -> bool:
    values = torch_axis if torch_axis is not None else mf.matrix.axes.torch
    return any(is_range(v) for v in values)


def served_torch(
    env: Mapping[str, str], *, http: Http | None = None
) -> tuple[ServedTorch | None, str | None]:
    """The torch releases the package index serves, or None and why it was not asked.

    Cached for an hour under the cache directory; an expired copy answers (and says its
    age) when the index cannot be reached. `BUILDTOOLS_OFFLINE=1` does not ask;
    `BUILDTOOLS_PACKAGE_INDEX` names another PEP 691 index.
    """
    if env.get("BUILDTOOLS_OFFLINE") == "1":
        return None, "BUILDTOOLS_OFFLINE=1"
    reader = IndexReader(
        http or UrllibHttp(timeout=15),
        index_url=env.get("BUILDTOOLS_PACKAGE_INDEX") or load_ecosystem().package_index,
        cache_dir=default_cache_dir(env),
        max_age=SERVED_MAX_AGE,
    )
    try:
        releases, answer = served_releases(reader, metadata=False, stale_ok=True)
    except NetworkError as exc:
        return None, str(exc)
    asked = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(answer.fetched))
    stale = "; the index is unreachable now" if answer.stale else ""
    source = f"{answer.page.url} (asked {asked}{stale})"
    return ServedTorch(versions=served_versions(releases), source=source), None


def load_plan(
    request: PlanRequest,
    *,
    env: Mapping[str, str] | None = None,
    runner: ProcessRunner | None = None,
    http: Http | None = None,
) -> tuple[Plan, Path]:
    """The plan of `request` and the project directory its matrix.yaml names.

    A torch range is resolved against what the package index serves (asked through
    `http`, cached; see `served_torch`): a host fact, like `torch: current`.
    """
    env = dict(env if env is not None else os.environ)
    path = request.matrix or default_matrix_path(env)
    kb = load_knowledge()
    mf = load_matrix(path, knowledge=kb)
    torch_axis = list(request.torch_axis) if request.torch_axis is not None else None
    current = None
    if needs_current(mf, torch_axis):
        # a host fact, probed here so that the planner stays pure
        current = probe_current_torch(
            request.torch_python, ctx=RunContext(processes=runner or SubprocessRunner(), env=env)
        )
    served, offline_reason = None, None
    if _has_range(mf, torch_axis):
        served, offline_reason = served_torch(env, http=http)
    result = plan(
        mf,
        kb,
        host_python=host_python(),
        current=current,
        served=served,
        offline_reason=offline_reason,
        selection=Selection(
            profile=request.profile,
            only=list(request.only),
            strict=request.strict,
            torch_axis=torch_axis,
        ),
    )
    return result, mf.project_dir
