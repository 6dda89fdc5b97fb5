"""The client side of a distributed build: one job's compile units sent to a scheduler.

A job that distributes compiles through its own sccache server (a Unix socket in a private
directory, its own config and compile cache), so that its counts are its own and no other
build or helper on the machine shares it:

- the host compiler: a directory of compiler-named scripts first on PATH, each running
  `sccache <the real compiler>` through `launcher.py`, which gives an unoptimized (`-O0`)
  unit a link to the compiler under another path instead: the job's sccache config marks
  those links `no_dist`, so such units compile here (their code would differ by a `nop`
  when compiled remotely, see `launcher`) and are counted apart (`kept_here`);
- nvcc: `PYTORCH_NVCC` is the same launcher, running `sccache nvcc --threads N -ccbin
  <host c++>` (the `no_dist` link when the unit's host code is unoptimized). sccache
  (>= 0.9) runs `nvcc --dryrun` and then each step itself; cicc and ptxas of every arch,
  and the host compile, are units it can send to a build server, and `--threads N` on the
  command line (where sccache reads it) runs N archs' steps at once. The host compiler is
  named by path because nvcc would otherwise find the sccache entry on PATH and call it from
  inside the sccache server, which refuses to act as a compiler there. `--threads` and
  `--keep` are taken out of NVCC_APPEND_FLAGS (sccache reads only the command line, and runs
  the dry run with its own `--keep`, so intermediate files are named after the source
  either way).

sccache falls back to a local compile for a unit whose server cannot be reached or dies
(`dist_errors` in its counts); an answer 4xx from the cluster (a wrong token) fails the
compile instead, so the build asks the scheduler first (`probe`) and distributes only when it
answers. The counts of where each unit ran come from the job's sccache server
(`--show-stats --stats-format json`: `dist_compiles` per server address, `dist_errors`,
`compilations`, cache hits), read before it is stopped; for units that fell back, the
reasons sccache logged (its WARN lines in the job's log) go with the counts into the note.
"""

from __future__ import annotations

__all__ = [
    "DIST_TOKEN_ENV",
    "DistTarget",
    "DistributedJob",
    "Fallbacks",
    "Launchers",
    "UnitCounts",
    "client_env",
    "fallbacks",
    "make_launchers",
    "nvcc_launcher",
    "parse_stats",
    "resolve_target",
    "strip_nvcc_flags",
]

import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..context import RunContext
from ..errors import ConfigError, ToolMissingError
from ..jsonfields import decode_json
from ..toolchain.ccachekeys import COMPILER_NAMES, masquerade_names
from .clusterconfig import check_token, client_config, parse_scheduler_url
from .schedstatus import SchedulerStatus, scheduler_status

DIST_TOKEN_ENV = "BUILDTOOLS_DIST_TOKEN"
IDLE_SECONDS = 900  # a job's sccache server left behind (a crash) exits after this idle time
SERVER_SECONDS = 60.0  # starting, asking and stopping the job's sccache server


@dataclass(frozen=True, kw_only=True)
class DistTarget:
    """A scheduler to send compile units to, and the client token it accepts."""

    url: str
    token: str


def resolve_target(
    url: str, env: Mapping[str, str], *, local: tuple[str, str] | None = None
) -> DistTarget:
    """The target of `--distribute URL`: the token from $BUILDTOOLS_DIST_TOKEN, else from the
    loopback cluster `dist up` recorded (`local`: its URL and token) when it is that URL;
    ConfigError naming both ways otherwise."""
    normal = parse_scheduler_url(url)
    token = env.get(DIST_TOKEN_ENV, "")
    if token:
        return DistTarget(url=normal, token=check_token(token, what=f"${DIST_TOKEN_ENV}"))
    if local is not None and parse_scheduler_url(local[0], what="the cluster record") == normal:
        return DistTarget(url=normal, token=check_token(local[1], what="the cluster record"))
    raise ConfigError(
        f"--distribute {normal}: no client token; set ${DIST_TOKEN_ENV} to the token of the "
        "scheduler's [client_auth] (a secret of the workflow), or start a loopback cluster "
        "with `buildtools dist up`, whose URL carries its own"
    )


def probe(target: DistTarget, env: Mapping[str, str]) -> SchedulerStatus | str:
    """The scheduler's status, or why it cannot be used (unreachable, token refused)."""
    return scheduler_status(target.url, target.token, env=env)


@dataclass(frozen=True, kw_only=True)
class UnitCounts:
    """Where one job's compile units ran (sccache's counts of its server)."""

    remote: Mapping[str, int] = field(default_factory=dict)  # server address → units
    local: int = 0  # compiled here (not distributable, fallen back, or no cluster)
    fell_back: int = 0  # sent to the cluster, failed there, compiled here instead
    kept_here: int = 0  # unoptimized units compiled here by design (`launcher`), in `local`
    # units the scheduler had no slot for (the budget counts this machine's cores too, so a
    # full cluster is expected): compiled here, in `local`, not in `fell_back`
    refused: int = 0
    cache_hits: int = 0
    failed: int = 0  # compiles that failed (the build says which)
    # why units fell back, as sccache logged it (`fallback_reasons`): "reason (n×)"
    fallback_reasons: tuple[str, ...] = ()

    @property
    def remote_total(self) -> int:
        return sum(self.remote.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "remote": dict(sorted(self.remote.items())),
            "remote_total": self.remote_total,
            "local": self.local,
            "fell_back": self.fell_back,
            "kept_here": self.kept_here,
            "refused": self.refused,
            "cache_hits": self.cache_hits,
            "failed": self.failed,
            "fallback_reasons": list(self.fallback_reasons),
        }

    def describe(self) -> str:
        where = ", ".join(f"{n} on {addr}" for addr, n in sorted(self.remote.items())) or "none"
        text = f"{self.remote_total} unit(s) remote ({where}), {self.local} local"
        if self.kept_here:
            text += f" ({self.kept_here} unoptimized, kept here: -O0 code differs remotely)"
        if self.refused:
            text += f" ({self.refused} while the cluster was full)"
        if self.fell_back:
            text += f" ({self.fell_back} fell back to local after the cluster failed them"
            text += f": {'; '.join(self.fallback_reasons)})" if self.fallback_reasons else ")"
        if self.cache_hits:
            text += f", {self.cache_hits} from the cache"
        return text


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def parse_stats(text: str) -> UnitCounts:
    """UnitCounts from `sccache --show-stats --stats-format json`; ValueError if not that."""
    # the JSON is one line; a client's log lines may come around it on the same output
    line = next((x for x in text.splitlines() if x.startswith("{")), text)
    data = decode_json(line, what="sccache --show-stats", max_bytes=1 << 20)
    stats = data.get("stats") if isinstance(data, dict) else None
    if not isinstance(stats, dict):
        raise ValueError("sccache --show-stats: no `stats` object")
    dist = stats.get("dist_compiles", {})
    if not isinstance(dist, dict):
        raise ValueError("sccache --show-stats: dist_compiles is not an object")
    remote = {str(k)[:100]: _count(v) for k, v in dist.items()}
    hits = stats.get("cache_hits", {})
    counts = hits.get("counts", {}) if isinstance(hits, dict) else {}
    compilations = _count(stats.get("compilations"))
    return UnitCounts(
        remote=remote,
        local=max(0, compilations - sum(remote.values())),
        fell_back=_count(stats.get("dist_errors")),
        cache_hits=sum(_count(v) for v in counts.values()) if isinstance(counts, dict) else 0,
        failed=_count(stats.get("compile_fails")),
    )


# sccache's WARN line for a unit it compiled here after the cluster could not:
# "[x.o]: Could not perform distributed compile, falling back to local: <reason>"
_FALLBACK_MARK = "falling back to local: "
_LOG_TAIL_BYTES = 4 << 20
_REASON_CHARS = 300


def _fallbacks(log: Path, start: int) -> Counter[str]:
    try:
        with log.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(start, size - _LOG_TAIL_BYTES))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return Counter()
    seen: Counter[str] = Counter()
    for line in text.splitlines():
        if _FALLBACK_MARK in line:
            reason = line.split(_FALLBACK_MARK, 1)[1]
            reason = "".join(c if c.isprintable() else "?" for c in reason).strip()
            seen[reason[:_REASON_CHARS]] += 1
    return seen


def _kept(reason: str, kept: Collection[Path]) -> bool:
    """Whether `reason` is sccache's for a unit of a `no_dist` compiler of `kept`."""
    head, tail = "Toolchain distribution for ", " is disabled"
    if not (reason.startswith(head) and reason.endswith(tail)):
        return False
    return Path(reason[len(head) : -len(tail)].strip('"')) in kept


# sccache-dist's scheduler when every server's slots are taken
_FULL_MARK = "Insufficient capacity"


@dataclass(frozen=True)
class Fallbacks:
    """What sccache's log says of the units it compiled here instead of on the cluster."""

    reasons: tuple[str, ...] = ()  # "reason (n×)", the most frequent first
    kept: int = 0  # units of the launcher's `no_dist` compilers (unoptimized, by design)
    refused: int = 0  # units the scheduler had no slot for (the cluster was full)


def fallbacks(
    log: Path, *, start: int = 0, limit: int = 3, kept: Collection[Path] = ()
) -> Fallbacks:
    """What sccache's log (from byte `start`: this job's part) says of units it compiled
    here instead of on the cluster, in one read: the distinct reasons of the others, the
    most frequent first, each as "reason (n×)" (at most `limit`, each cut to a line of
    printable text); how many units were of the `kept` compilers (the launcher's `no_dist`
    links: unoptimized units, compiled here by design) and how many the scheduler refused
    for want of a free slot. Neither of those two is among the reasons. Empty when the log
    is missing or says none."""
    seen = _fallbacks(log, start)
    here = sum(n for r, n in seen.items() if _kept(r, kept))
    full = sum(n for r, n in seen.items() if r.startswith(_FULL_MARK))
    shown = [
        (r, n) for r, n in seen.most_common() if not _kept(r, kept) and not r.startswith(_FULL_MARK)
    ]
    return Fallbacks(tuple(f"{reason} ({n}×)" for reason, n in shown[:limit]), here, full)


def strip_nvcc_flags(value: str) -> tuple[str, int]:
    """NVCC_APPEND_FLAGS without `--threads N`/`-t N` and `--keep`/`--keep-dir D`, and the
    threads it asked for (1 when none)."""
    words = shlex.split(value)
    kept: list[str] = []
    threads = 1
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if name in ("--threads", "-t", "--keep-dir", "-keep-dir"):
            arg = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
            if name in ("--threads", "-t") and arg.isdigit():
                threads = max(1, int(arg))
            i += 1 if eq else 2
            continue
        if word in ("--keep", "-keep"):
            i += 1
            continue
        kept.append(word)
        i += 1
    return shlex.join(kept), threads


def _launch(launcher: Sequence[str], *args: str) -> str:
    """A launcher script's text: `launcher.py ARGS` with the compiler's arguments."""
    return f'#!/bin/sh\n# buildtools: {__name__}\nexec {shlex.join([*launcher, *args])} "$@"\n'


def _write(path: Path, text: str) -> None:
    """`text` into the executable `path`, atomically and only when it changed."""
    if path.is_file() and not path.is_symlink() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    tmp.replace(path)


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() and link.readlink() == target:
        return
    tmp = link.with_name(f".{link.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.replace(link)


@dataclass(frozen=True, kw_only=True)
class Launchers:
    """A distributing job's compiler entries (`launcher`): `bin` goes first on PATH; `here`
    holds a link to each real compiler, which the job's sccache config marks `no_dist`."""

    bin: Path
    here: Path
    compilers: Mapping[str, Path] = field(default_factory=dict)  # name → the real compiler

    @property
    def no_dist(self) -> tuple[Path, ...]:
        return tuple(self.here / name for name in sorted(self.compilers))

    @property
    def nvcc(self) -> Path:
        return self.bin / "nvcc-launch"


def make_launchers(
    work: Path, sccache: Path, *, path: str, names: Sequence[str] = COMPILER_NAMES
) -> Launchers:
    """The compiler entries of a distributing job (idempotent): for each compiler name found
    on `path` (`names`: `masquerade_names`, the ones CC/CXX give included), a script that
    runs `launcher.py` (an unoptimized unit goes to the `here` link); a name with no
    compiler behind it links to sccache, which then says so."""
    found = {name: shutil.which(name, path=path) for name in names}
    launchers = Launchers(
        bin=work / "bin",
        here=work / "here",
        compilers={name: Path(real) for name, real in found.items() if real is not None},
    )
    launchers.bin.mkdir(parents=True, exist_ok=True)
    launchers.here.mkdir(parents=True, exist_ok=True)
    script = [sys.executable, "-I", str(Path(__file__).with_name("launcher.py"))]
    for name in names:
        entry = launchers.bin / name
        real = launchers.compilers.get(name)
        if real is None:
            _link(entry, sccache)
            continue
        _link(launchers.here / name, real)
        _write(entry, _launch(script, "cc", str(sccache), str(real), str(launchers.here / name)))
    return launchers


def nvcc_launcher(
    launchers: Launchers, sccache: Path, nvcc: Path, *, threads: int, host: str
) -> str:
    """PYTORCH_NVCC of a distributing CUDA job: the script that runs sccache on nvcc with
    `-ccbin` the host compiler `host` (by name: found on PATH), or its `here` link when the
    unit's host code is unoptimized."""
    real = launchers.compilers.get(host)
    if real is None:
        raise ToolMissingError(f"{host}: no host compiler on PATH for nvcc (-ccbin)")
    script = [sys.executable, "-I", str(Path(__file__).with_name("launcher.py"))]
    args = ("nvcc", str(sccache), str(real), str(launchers.here / host), str(nvcc), str(threads))
    _write(launchers.nvcc, _launch(script, *args))
    return shlex.quote(str(launchers.nvcc))


@dataclass(frozen=True, kw_only=True)
class ClientPaths:
    """One job's sccache server: its config, socket, cache and log."""

    launchers: Launchers
    conf: Path
    socket: Path
    cache: Path
    log: Path
    toolchains: Path


def client_env(
    env: Mapping[str, str],
    paths: ClientPaths,
    *,
    sccache: Path,
    cuda_home: Path | None,
) -> dict[str, str]:
    """The variables that send `env`'s compiles through the job's sccache server (pure):
    what to set over `env`, which is the job's environment without a compiler cache."""
    path = env.get("PATH", os.defpath)
    out = {
        "PATH": os.pathsep.join((str(paths.launchers.bin), path)),
        "SCCACHE_CONF": str(paths.conf),
        "SCCACHE_CACHED_CONF": str(paths.conf.with_name("cached-config")),
        "SCCACHE_SERVER_UDS": str(paths.socket),
        "SCCACHE_DIR": str(paths.cache),
        "SCCACHE_IDLE_TIMEOUT": str(IDLE_SECONDS),
        "SCCACHE_ERROR_LOG": str(paths.log),
        "SCCACHE_LOG": env.get("SCCACHE_LOG", "warn"),
        "TORCH_NO_COMPILER_WRAPPER": "1",
        "CCACHE_DISABLE": "1",
    }
    if cuda_home is not None:
        host = "c++" if "c++" in paths.launchers.compilers else "g++"
        remaining, threads = strip_nvcc_flags(env.get("NVCC_APPEND_FLAGS", ""))
        out["NVCC_APPEND_FLAGS"] = remaining
        out["PYTORCH_NVCC"] = nvcc_launcher(
            paths.launchers, sccache, cuda_home / "bin" / "nvcc", threads=threads, host=host
        )
    return out


class DistributedJob:
    """One job's sccache server: `env(...)` while it builds, `counts` after."""

    def __init__(self, sccache: Path, paths: ClientPaths, env: dict[str, str]) -> None:
        self.sccache = sccache
        self.paths = paths
        self.env = env
        self.counts: UnitCounts | None = None
        self.problem: str | None = None  # why the counts could not be read


@contextmanager
def distributed_job(
    target: DistTarget | None,
    base_env: Mapping[str, str],
    *,
    sccache: Path,
    work: Path,
    cache: Path | None,
    cuda_home: Path | None,
    ctx: RunContext,
) -> Iterator[DistributedJob]:
    """Start the job's sccache server (its config in `work`, its compile cache in `cache`,
    or a throwaway one in `work` when None; no cluster when `target` is None: every unit
    compiles here), yield it, read its counts, stop it."""
    # a private directory (0700) for the socket (its path must be short) and the config,
    # which holds the token: removed when the job ends, never left in a cache directory
    # that CI may save and a later run read
    socket_dir = Path(tempfile.mkdtemp(prefix="bt-sccache-"))
    paths = ClientPaths(
        launchers=make_launchers(
            work,
            sccache,
            path=base_env.get("PATH", os.defpath),
            names=masquerade_names(base_env),
        ),
        conf=socket_dir / "client.toml",
        socket=socket_dir / "server.sock",
        cache=cache if cache is not None else socket_dir / "cache",  # throwaway
        log=work / "sccache.log",
        toolchains=work.parent / "toolchains",
    )
    config = client_config(
        target.url if target else None,
        target.token if target else "",
        toolchain_cache=paths.toolchains,
        no_dist=paths.launchers.no_dist,
    )
    fd = os.open(paths.conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(config)
    # sccache sends a unit's environment to the build server: never the token (it is in
    # the 0600 config)
    base = {k: v for k, v in base_env.items() if k != DIST_TOKEN_ENV}
    env = {**base, **client_env(base, paths, sccache=sccache, cuda_home=cuda_home)}
    job = DistributedJob(sccache, paths, env)
    runner, log = ctx.processes, ctx.stream
    # the log is the job directory's, kept between builds: this build's part starts here
    log_start = paths.log.stat().st_size if paths.log.is_file() else 0
    started = runner.run([str(sccache), "--start-server"], env=env, log=log, timeout=SERVER_SECONDS)
    if not started.ok:
        shutil.rmtree(socket_dir, ignore_errors=True)
        raise ToolMissingError(f"{sccache} --start-server failed (see {log.name})")
    try:
        yield job
        stats = runner.run(
            [str(sccache), "--show-stats", "--stats-format", "json"],
            env=env,
            capture=True,
            timeout=SERVER_SECONDS,
        )
        try:
            job.counts = parse_stats(stats.output)
        except ValueError as exc:
            job.problem = str(exc)
        if job.counts is not None and job.counts.fell_back:
            seen = fallbacks(paths.log, start=log_start, kept=paths.launchers.no_dist)
            here = min(job.counts.fell_back, seen.kept)
            full = min(job.counts.fell_back - here, seen.refused)
            job.counts = dataclasses.replace(
                job.counts,
                fell_back=job.counts.fell_back - here - full,
                kept_here=here,
                refused=full,
                fallback_reasons=seen.reasons,
            )
    finally:
        runner.run([str(sccache), "--stop-server"], env=env, log=log, timeout=SERVER_SECONDS)
        shutil.rmtree(socket_dir, ignore_errors=True)
