"""What one `buildtools build` run was asked for (the CLI fills it; the orchestrator reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import Backend
from ..knowledge import Knowledge
from ..process import ProcessRunner
from .ccache import CompilerCache
from .scheduler import HostResources

__all__ = ["BuildOptions"]


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    project_dir: Path
    wheelhouse: Path
    cache_dir: Path
    env: Mapping[str, str]
    fail_fast: bool = False
    max_jobs: int | None = None
    cuda_home: Path | None = None
    live: bool = True
    reproduce: str = ""
    matrix: str = "matrix.yaml"
    force: bool = False  # rebuild even when a wheel with the job's fingerprint exists
    index_site: Path | None = None  # a published site whose wheels count as built
    ccache: bool = True  # False: --no-ccache (each job's matrix build.ccache also counts)
    jobs: int | None = None  # jobs compiling at once (default: as the machine allows)
    host: HostResources | None = None  # cores and memory (default: this machine's)
    nvcc_threads: int = 1  # nvcc --threads of the job being built (the scheduler's choice)
    size_warning: int | None = None  # wheel-size thresholds (matrix.yaml build.size_*)
    size_error: int | None = None
    distribute: str | None = None  # an sccache-dist scheduler URL (--distribute)
    # the URL is matrix.yaml's build.distribute, not --distribute: a run with no client token
    # (a pull request from a fork gets no secrets) builds locally with a note
    distribute_by_default: bool = False


@dataclass(frozen=True, kw_only=True)
class BuildSession:
    """What every job of one `buildtools build` shares: the facts, the options, where the
    compiler runs, the process runner and the compiler cache (None: no compiler cache)."""

    kb: Knowledge
    opts: BuildOptions
    backend: Backend
    runner: ProcessRunner
    compiler_cache: CompilerCache | None = None
