"""What one `buildtools build` run was asked for (the CLI fills it; the orchestrator reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..backends.base import Backend
from ..knowledge import Knowledge
from ..matrix.config import BuildSettings
from ..model import BuildJob, CompilerCacheTool
from ..process import ProcessRunner
from .compilercache import CompilerCache, job_tool
from .compileunits import Watch, unwatched
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
    # the compiler cache asked for on the command line (--compiler-cache): "none" for no
    # cache, None for each job's own (matrix build.compiler_cache)
    compiler_cache: CompilerCacheTool | Literal["none"] | None = None
    jobs: int | None = None  # jobs compiling at once (default: as the machine allows)
    host: HostResources | None = None  # cores and memory (default: this machine's)
    nvcc_threads: int = 1  # nvcc --threads of the job being built (the scheduler's choice)
    # matrix.yaml `build:`: the checks read its wheel-size thresholds (Expectation.of)
    settings: BuildSettings = field(default_factory=BuildSettings)
    distribute: str | None = None  # an sccache-dist scheduler URL (--distribute)
    # the URL is matrix.yaml's build.distribute, not --distribute: a run with no client token
    # (a pull request from a fork gets no secrets) builds locally with a note
    distribute_by_default: bool = False
    # the least seconds between two plain progress lines on one compiling job (CI logs)
    progress_interval: float = 30.0


@dataclass(frozen=True, kw_only=True)
class BuildSession:
    """What every job of one `buildtools build` shares: the facts, the options, where the
    compiler runs, the process runner and the compiler cache (None: no compiler cache)."""

    kb: Knowledge
    opts: BuildOptions
    backend: Backend
    runner: ProcessRunner
    compiler_cache: CompilerCache | None = None  # the job's (build_job), None: no cache
    # every compiler cache the run's jobs use, by tool (build_plan finds them once)
    compiler_caches: Mapping[str, CompilerCache] = field(default_factory=dict)
    watch: Watch = unwatched  # follows a job's compile (progress.Progress.watch)

    def cache_for(self, job: BuildJob) -> CompilerCache | None:
        """The compiler cache that wraps `job`'s compilers (None: none)."""
        tool = job_tool(job, self.opts.compiler_cache)
        return self.compiler_caches.get(tool) if tool else None
