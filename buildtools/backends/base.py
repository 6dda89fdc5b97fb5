"""The backend protocol: where the compiler runs, turning a job + toolchain into raw wheels."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Protocol

from packaging.version import InvalidVersion, Version

from ..context import RunContext
from ..ecosystem import load_ecosystem
from ..knowledge import Knowledge
from ..model import BuildJob
from ..process import ProcessRunner
from ..toolchain.envs import Toolchain

__all__ = [
    "JOB_CACHE_TOOL_VAR",
    "JOB_CCACHE_VAR",
    "JOB_UNITS_VAR",
    "JOB_WRAP_LOG_VAR",
    "NVCC_THREADS_VAR",
    "Backend",
    "nvcc_flags_env",
    "nvcc_keep_env",
    "nvcc_seed_env",
    "prefix_maps_env",
]

# What build_job tells a backend that does not use the host's toolchain (the docker
# backend), through the build environment it passes: the job's compiler cache directory,
# and the scheduler's `nvcc --threads` for the job's device code.
JOB_CCACHE_VAR = "BUILDTOOLS_JOB_CCACHE_DIR"
# ... and the tool that wraps the compilers with it (sccache or ccache)
JOB_CACHE_TOOL_VAR = "BUILDTOOLS_JOB_CACHE_TOOL"
NVCC_THREADS_VAR = "BUILDTOOLS_NVCC_THREADS"
# ... and, for a CUDA job whose nvcc goes through the wrapper, its log file and unit store
JOB_WRAP_LOG_VAR = "BUILDTOOLS_JOB_WRAP_LOG"
JOB_UNITS_VAR = "BUILDTOOLS_JOB_UNITS_DIR"


class Backend(Protocol):
    """Where the compiler runs: it turns a job + toolchain into raw wheel(s).

    `needs_host_toolkit`: the host toolchain compiles (else it holds torch only, for the
    checks). `repairs_inside`: build_raw returns wheels already repaired, so build_job
    skips the host repair (the docker backend repairs in the container, where the wheel's
    dependencies live).
    """

    name: str
    needs_host_toolkit: bool
    repairs_inside: bool

    def preflight(self, runner: ProcessRunner) -> None:
        """Raise ToolMissingError before any job when what the backend needs is missing."""
        ...

    def build_raw(
        self,
        job: BuildJob,
        toolchain: Toolchain,
        *,
        project_dir: Path,
        out_dir: Path,
        build_dir: Path,
        ctx: RunContext,
    ) -> list[Path]:
        """The raw wheel(s) of `job`, built with `ctx`'s processes, environment and log."""
        ...


def nvcc_flags_env(threads: int, env: Mapping[str, str]) -> dict[str, str]:
    """NVCC_APPEND_FLAGS with `--threads N` added to what `env` has (pure); {} for 1 thread.

    nvcc reads the variable itself, so torch's build (and its ninja file, and ccache's
    key) is unchanged: the threads change how fast device code compiles, not the output.
    A `--threads`/`-t` the user put there already wins.
    """
    current = env.get("NVCC_APPEND_FLAGS", "")
    if threads <= 1 or re.search(r"(^|\s)(--threads|-t)(\s|=|\d|$)", current):
        return {}
    return {"NVCC_APPEND_FLAGS": f"{current} --threads {threads}".strip()}


def prefix_maps_env(maps: Sequence[str], env: Mapping[str, str], *, device: bool) -> dict[str, str]:
    """CFLAGS/CXXFLAGS (and, for a CUDA build, NVCC_APPEND_FLAGS through `-Xcompiler`) with
    `OLD=NEW` path maps appended to what `env` has (pure): `-ffile-prefix-map` (gcc >= 8,
    clang >= 10: `__FILE__`, debug info) and `-fdebug-prefix-map` (older compilers' debug
    info). A map whose path has a space or a comma is left out: CFLAGS and -Xcompiler would
    split it."""
    maps = [m for m in maps if not any(c in m for c in " \t\n,")]
    flags = " ".join(f"-ffile-prefix-map={m} -fdebug-prefix-map={m}" for m in maps)
    out: dict[str, str] = {}
    for key in ("CFLAGS", "CXXFLAGS"):
        current = env.get(key, "")
        out[key] = f"{current} {flags}".strip() if flags not in current else current
    if device:
        host = " ".join(f"-Xcompiler -ffile-prefix-map={m}" for m in maps)
        current = env.get("NVCC_APPEND_FLAGS", "")
        out["NVCC_APPEND_FLAGS"] = f"{current} {host}".strip() if host not in current else current
    return out


# nvcc's -frandom-seed, the same for every file (see nvcc_seed_env); which nvcc has the
# option is data/ecosystem.json's `nvcc_options_since`
NVCC_RANDOM_SEED = "torch-buildtools"


def nvcc_seed_env(env: Mapping[str, str], cuda_version: str | None) -> dict[str, str]:
    """NVCC_APPEND_FLAGS with `-frandom-seed=torch-buildtools` added (pure); {} when the flags
    name a seed already, or the CUDA version's nvcc has no such option (before 13.0).

    nvcc's module id names a `.cu` file's anonymous-namespace symbols in the host object and
    in the device code (`_GLOBAL__N__<path hash>_<len>_<name>_<suffix>`). For a file that
    defines no external function (all its kernels and functions in an anonymous namespace,
    registered through a static initialiser, as xformers' `matmul.cu`) cudafe++ ends the
    suffix with its own process id, so every build of the file differed (found on the GPU
    machine: two builds of xformers, `bench/distributed.py`'s `differences`). With a seed
    nvcc uses it instead ("to generate deterministically identical ptx and object files",
    `nvcc --help`). The module id still starts with the hash of the file's directory and its
    name, so two files of a build keep distinct ids with one seed. nvcc passes the seed to
    gcc/clang as well, where it replaces the random part of the names the host compiler
    must make unique.
    """
    try:
        since = Version(load_ecosystem().nvcc_options_since["-frandom-seed"])
        supported = cuda_version is not None and Version(cuda_version) >= since
    except InvalidVersion:
        supported = False
    current = env.get("NVCC_APPEND_FLAGS", "")
    if not supported or re.search(r"(^|\s)--?frandom-seed", current):
        return {}
    return {"NVCC_APPEND_FLAGS": f"{current} -frandom-seed={NVCC_RANDOM_SEED}".strip()}


def _cu_basenames_unique(project_dir: Path) -> bool:
    names = [
        p.name
        for p in project_dir.rglob("*.cu")
        if not {"build", ".git", ".nox", "dist"} & set(p.relative_to(project_dir).parts)
    ]
    return len(names) == len(set(names))


def nvcc_keep_env(
    keep_dir: PurePath, env: Mapping[str, str], *, project_dir: Path
) -> dict[str, str]:
    """NVCC_APPEND_FLAGS with `--keep --keep-dir keep_dir` added: nvcc then names its
    intermediate files after the source (`x.cudafe1.cpp`) instead of `tmpxft_<pid>_…`, a
    name that reaches the shared object's symbol table (its static initialiser and file
    symbol) and made two builds of one commit differ. {} when two `.cu` files of the project
    share a base name (their intermediate files would collide in one directory)."""
    if not _cu_basenames_unique(project_dir):
        return {}
    current = env.get("NVCC_APPEND_FLAGS", "")
    if "--keep" in current.split():
        return {}
    return {"NVCC_APPEND_FLAGS": f"{current} --keep --keep-dir {keep_dir}".strip()}


@dataclass(frozen=True, kw_only=True)
class BackendOptions:
    """What the command line says about where the compiler runs (all backends' options).

    Each field is a flag (`offline` is `--offline`); a backend takes only the ones its
    `BackendSpec.options` names, and `make_backend` refuses the others.
    """

    offline: bool = False
    base_image: str | None = None
    setup_emulation: bool = False
    max_jobs: int | None = None  # every backend: the compiler processes per job


@dataclass(frozen=True, kw_only=True)
class BackendSetting:
    """Where a backend is made: the facts, the cache and the environment it reads."""

    kb: Knowledge
    cache_dir: Path
    env: Mapping[str, str]
