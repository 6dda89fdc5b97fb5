"""The compiler cache: ccache in front of the host compiler and nvcc, one cache per toolchain.

What torch's cpp_extension honours (read in torch 2.11 and 2.13):

- the host compiler of the ninja build is `$CXX`, else `c++` looked up on PATH; torch
  >= 2.13 also prepends `ccache`/`sccache` by itself when one is on PATH
  (`_wrap_compiler`), unless `TORCH_NO_COMPILER_WRAPPER` is set;
- nvcc is `$PYTORCH_NVCC` when set (a command line: `ccache /…/nvcc` works), else
  `$CUDA_HOME/bin/nvcc`; nvcc's own host compiler is `-ccbin $CC` or `g++` on PATH;
- setuptools links with the `c++`/`gcc` of sysconfig, also looked up on PATH.

So one mechanism covers every torch version: a directory of ccache "masquerade" links
(`c++`, `g++`, `gcc`, `cc`, … → ccache) first on PATH, `PYTORCH_NVCC="ccache nvcc"` for CUDA
jobs, and `TORCH_NO_COMPILER_WRAPPER=1` so torch >= 2.13 does not wrap a second time (and a
`--no-ccache` build uses no cache at all, even where ccache is installed).

Keying: the cache directory is per job (`<BUILDTOOLS_CCACHE_DIR or cache>/ccache/<job id>`),
which is the toolchain of the plan (torch × accelerator × Python × platform). Correctness
does not depend on the directory: ccache's own hash covers the compiler (its size and
mtime), every argument (include paths, defines, arch flags) and the preprocessed source or
every include file's content. The split keeps one toolchain's objects from evicting
another's and maps one-to-one onto a CI job's cache (restore `ccache/<job id>`).
`CCACHE_BASEDIR` is the project directory and `CCACHE_NOHASHDIR` is set, and the local
backend compiles in the project's `build/torch-buildtools/<tree>` (`backends.local`), so the
paths ccache rewrites are the same relative ones in every checkout: a second checkout of the
same source (another worktree, a CI workspace) hits the same entries, and the objects are
the same bytes (the prefix maps of `build.environment.reproducible_env` cover both forms).
"""

from __future__ import annotations

__all__ = [
    "CCACHE_INSTALL_HINT",
    "MASQUERADE_NAMES",
    "CompilerCache",
    "ccache_dir",
    "ccache_env",
    "ccache_root",
    "find_ccache",
    "make_masquerade",
    "no_ccache_env",
]

import os
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..model import BuildJob

CCACHE_INSTALL_HINT = (
    "apt-get install -y ccache (Debian/Ubuntu), dnf install ccache (Fedora/RHEL/manylinux "
    "images), brew install ccache (macOS)"
)
MASQUERADE_NAMES = ("cc", "c++", "gcc", "g++", "clang", "clang++")


@dataclass(frozen=True, kw_only=True)
class CompilerCache:
    """ccache as found on this host, and where its per-job caches live."""

    program: Path
    root: Path  # BUILDTOOLS_CCACHE_DIR, else <cache dir>/ccache

    @property
    def masquerade(self) -> Path:
        """The directory of compiler-named links to ccache (put first on PATH)."""
        return self.root / "bin"

    def dir_for(self, job: BuildJob) -> Path:
        return ccache_dir(self.root, job)


def ccache_root(cache_dir: Path, env: Mapping[str, str]) -> Path:
    """Where the compiler caches live: $BUILDTOOLS_CCACHE_DIR, else <cache dir>/ccache."""
    if env.get("BUILDTOOLS_CCACHE_DIR"):
        return Path(env["BUILDTOOLS_CCACHE_DIR"])
    return cache_dir / "ccache"


def ccache_dir(root: Path, job: BuildJob) -> Path:
    """The job's cache: one per toolchain of the plan (the job id names it)."""
    return root / job.id


def find_ccache(env: Mapping[str, str]) -> Path | None:
    """ccache on env's PATH, or None."""
    found = shutil.which("ccache", path=env.get("PATH", os.defpath))
    return Path(found) if found else None


def make_masquerade(cache: CompilerCache) -> Path:
    """Create (idempotently) the directory of compiler-named links to ccache."""
    directory = cache.masquerade
    directory.mkdir(parents=True, exist_ok=True)
    for name in MASQUERADE_NAMES:
        link = directory / name
        if link.is_symlink() and link.readlink() == cache.program:
            continue
        tmp = directory / f".{name}.tmp{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(cache.program)
        tmp.replace(link)
    return directory


def ccache_env(
    job: BuildJob,
    cache: CompilerCache,
    *,
    project_dir: Path,
    cuda_home: Path | None,
    path: str,
) -> dict[str, str]:
    """The variables that put ccache in front of every compiler of `job` (pure).

    `path` is the build's PATH before the masquerade directory is put in front of it.
    """
    env = {
        "CCACHE_DIR": str(cache.dir_for(job)),
        "CCACHE_BASEDIR": str(project_dir.resolve()),
        # with -g (Python's CFLAGS have it) ccache hashes the working directory; another
        # checkout of the same source must hit (only the debug info's comp_dir differs)
        "CCACHE_NOHASHDIR": "1",
        "PATH": os.pathsep.join(p for p in (str(cache.masquerade), path) if p),
        "TORCH_NO_COMPILER_WRAPPER": "1",
    }
    if job.accelerator.kind == "cuda" and cuda_home is not None:
        env["PYTORCH_NVCC"] = shlex.join([str(cache.program), str(cuda_home / "bin" / "nvcc")])
    return env


def no_ccache_env() -> dict[str, str]:
    """No compiler cache at all: not ours, not torch's own wrapper, not a ccache on PATH."""
    return {"TORCH_NO_COMPILER_WRAPPER": "1", "CCACHE_DISABLE": "1"}
