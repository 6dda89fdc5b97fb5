"""What a compiling job is doing, read from what its build leaves: its log, ninja's log, /proc.

torch's cpp_extension compiles with `ninja -v`. When its output is not a terminal (a job's
log), ninja prints `[finished/total] command` as each unit *ends*, and appends each unit's
start and end (ms) to `.ninja_log` in its build directory. setuptools without ninja
compiles one unit at a time and prints each compiler command before it runs it. Neither
says which units run now: those are the children of the job's ninja (the ninja whose
working directory is the job's object directory), read from /proc, with nvcc's own steps
below them (cicc and ptxas name the arch they compile; nvcc goes through its `-gencode`
targets in their order). Nothing is added to a compiler's command line.

Everything read here is hostile: a log line is capped, a malformed entry is skipped, a
process that ends while it is read is skipped, and no error here fails a build.
"""

from __future__ import annotations

__all__ = [
    "NINJA_STATUS",
    "CompileWatch",
    "RunningUnit",
    "UnitProgress",
    "UnitTracker",
    "Watch",
    "nvcc_archs",
    "planned_units",
    "read_ninja_log",
    "running_units",
    "unwatched",
]

import contextlib
import os
import re
import shlex
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from ..backends.local import NINJA_STATUS  # the status lines read here: `[%f/%t] `
from ..files import open_regular
from .fingerprint import scan_sources

_STATUS = re.compile(r"^\[\s*(\d{1,9})/(\d{1,9})\] (.+)$")
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cu", ".hip")
_COMPILER = re.compile(
    r"^(?:[\w.+-]*-)?(?:gcc|g\+\+|c\+\+|cc|clang|clang\+\+|nvcc|hipcc|icx|icpx)(?:-[\d.]+)?$"
)
_LAUNCHERS = frozenset({"ccache", "sccache", "distcc", "buildcache"})
_MAX_LINE = 256 * 1024  # a longer line (a progress bar redrawn with \r) is skipped
_MAX_READ = 8 * 1024 * 1024  # per poll: a log that grows faster is caught up on later polls
_MAX_NINJA_LOG = 64 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class RunningUnit:
    """One unit compiling now: its source, for how long, and nvcc's progress through it."""

    name: str
    seconds: float
    archs: int = 0  # the -gencode targets of an nvcc command (0: not nvcc, or none named)
    step: str = ""  # what nvcc runs now: "arch 3/9 sm_90 ptxas", "host compile", ...

    def describe(self) -> str:
        """'csrc/x.cu 241 s, 9 archs, arch 3/9 sm_90 ptxas'."""
        parts = [f"{self.name} {self.seconds:.0f} s"]
        if self.archs:
            parts.append(f"{self.archs} arch" + ("s" if self.archs > 1 else ""))
        if self.step:
            parts.append(self.step)
        return ", ".join(parts)


@dataclass(frozen=True, kw_only=True)
class UnitProgress:
    """A compiling job's units: done, out of how many, and those running now."""

    done: int
    total: int | None  # None: not known (yet)
    bounded: bool = False  # `total` is an upper bound: the project's sources (serial build)
    running: tuple[RunningUnit, ...] | None = None  # None: not known (no ninja seen in /proc)
    elapsed: float = 0.0  # seconds since the compile started

    @property
    def seen(self) -> bool:
        """Whether the build showed any unit at all."""
        return self.done > 0 or self.total is not None or bool(self.running)

    def eta(self) -> float | None:
        """Seconds until the last unit is done at the rate units were done so far; None
        before the first one is done or while the total is unknown."""
        if self.total is None or self.done <= 0 or self.elapsed <= 0:
            return None
        return max(self.total - self.done, 0) * self.elapsed / self.done


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote: the words as they stand
        return command.split()


def _unit_paths(words: Sequence[str]) -> tuple[str | None, str | None]:
    """(source, output) of a compiler command: `-c SOURCE`, `-o OUTPUT`."""
    source = output = None
    for i, word in enumerate(words[:-1]):
        following = words[i + 1]
        if word == "-o" and output is None:
            output = following
        elif word == "-c" and following.endswith(SOURCE_SUFFIXES) and source is None:
            source = following
    if source is None:
        source = next((w for w in words if w.endswith(SOURCE_SUFFIXES)), None)
    return source, output


def _compiler_words(line: str) -> list[str] | None:
    """The words of `line` when it is a compiler command (behind a cache launcher), else None."""
    first = line.split(" ", 1)[0]
    name = PurePosixPath(first).name
    if not (_COMPILER.match(name) or name in _LAUNCHERS):
        return None
    words = _words(line)
    if name in _LAUNCHERS and (len(words) < 2 or not _COMPILER.match(PurePosixPath(words[1]).name)):
        return None
    return words


_GENCODE = re.compile(r"^(?:-gencode|--generate-code)(?:=(.*))?$")
_ARCH_VALUE = re.compile(r"arch=(?:compute|sm)_(\d+[a-z]?)")
_ARCH_FLAG = re.compile(r"^(?:-arch|--gpu-architecture)(?:=(.*))?$")
_TARGET = re.compile(r"(?:compute|sm)_(\d+[a-z]?)")


def _flag_value(words: Sequence[str], i: int, match: re.Match[str]) -> str:
    """The value of the flag at `words[i]`: after its `=`, else the next word."""
    if match[1] is not None:
        return match[1]
    return words[i + 1] if i + 1 < len(words) else ""


def nvcc_archs(words: Sequence[str]) -> tuple[str, ...]:
    """The archs an nvcc command compiles, in the order nvcc goes through them ('90', '100a'):
    one per -gencode target, else the one -arch names; () for a command that names none
    (a C++ compile). The command may be nvcc's behind a launcher or a wrapper."""
    gencodes: list[str] = []
    single: list[str] = []
    for i, word in enumerate(words):
        gencode, arch = _GENCODE.match(word), _ARCH_FLAG.match(word)
        if gencode:
            found = _ARCH_VALUE.search(_flag_value(words, i, gencode))
            gencodes += [found[1]] if found else []
        elif arch:
            found = _TARGET.search(_flag_value(words, i, arch))
            single += [found[1]] if found else []
    return tuple(gencodes) or tuple(single[:1])


class UnitTracker:
    """Units done and total from a job's log lines as they arrive (pure: fed lines and times).

    Ninja's status lines give both; a project of several extensions runs ninja once each,
    so a run's counts add to those before it (its total is known once it starts). Without
    ninja, a compiler command line starts a unit and ends the one before; the total is then
    at most the project's C/C++/CUDA sources (`sources`), or unknown when a unit compiles
    a file that is not one of them.
    """

    def __init__(
        self,
        *,
        started: float,
        project_dir: Path | None = None,
        sources: Callable[[], frozenset[str]] | None = None,
    ) -> None:
        self._started = started
        self._project = project_dir
        self._sources = sources
        self._known: frozenset[str] | None = None
        self._base_done = self._base_total = 0
        self._finished = self._total = 0
        self._ninja = False
        self._serial: list[str] = []
        self._serial_since: float | None = None  # when the running serial unit started
        self.outputs: dict[str, str] = {}  # output path → unit name, units finished this run

    def name(self, path: str) -> str:
        """A unit's name: its path in the project (a relative path is one), else the last
        two parts of its path."""
        pure = PurePosixPath(path)
        if not pure.is_absolute():
            return pure.as_posix()
        if self._project is not None:
            with contextlib.suppress(ValueError):
                return pure.relative_to(self._project.as_posix()).as_posix()
        return "/".join(pure.parts[1:][-2:]) or path

    def feed(self, line: str, now: float) -> None:
        """One line of the job's log, read at `now`."""
        status = _STATUS.match(line)
        if status:
            finished, total = int(status[1]), int(status[2])
            if self._ninja and (total != self._total or finished <= self._finished):
                self._base_done += self._finished  # the next extension's ninja run
                self._base_total += self._total
            self._ninja = True
            self._finished, self._total = finished, total
            source, output = _unit_paths(_words(status[3]))
            if output is not None:
                self.outputs[output] = self.name(source or output)
            return
        if self._ninja:
            return
        words = _compiler_words(line)
        if words is None:
            return
        source, _ = _unit_paths(words)
        if "-c" in words and source is not None:
            self._serial.append(self.name(source))
            self._serial_since = now
        else:  # the link: the unit before it is done
            self._serial_since = None

    def _serial_total(self) -> int | None:
        if self._sources is None:
            return None
        if self._known is None:
            self._known = self._sources()
        if not self._known or any(name not in self._known for name in self._serial):
            return None
        return len(self._known)

    def progress(
        self, now: float, running: tuple[RunningUnit, ...] | None, *, planned: int | None = None
    ) -> UnitProgress:
        """The counts at `now`; `running`: the units /proc shows (None: not known);
        `planned`: the units the running ninja's build.ninja declares, the total (at most)
        until its first status line says how many it runs."""
        elapsed = now - self._started
        if self._ninja or not self._serial:
            total = self._base_total + self._total if self._ninja else planned
            return UnitProgress(
                done=self._base_done + self._finished,
                total=total,
                bounded=not self._ninja and planned is not None,
                running=running,
                elapsed=elapsed,
            )
        busy = self._serial_since is not None
        current = (
            (RunningUnit(name=self._serial[-1], seconds=now - (self._serial_since or now)),)
            if busy
            else ()
        )
        total = self._serial_total()
        return UnitProgress(
            done=len(self._serial) - (1 if busy else 0),
            total=total,
            bounded=total is not None,
            running=current,
            elapsed=elapsed,
        )


def read_ninja_log(path: Path) -> dict[str, float]:
    """output → seconds of its last entry in ninja's `.ninja_log`; {} when it is absent,
    unreadable or not a ninja log. Malformed lines are skipped."""
    try:
        with open_regular(path) as fh:
            data = fh.read(_MAX_NINJA_LOG)
    except OSError:
        return {}
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines or not re.match(r"^# ninja log v\d+$", lines[0].strip()):
        return {}
    found: dict[str, float] = {}
    for line in lines[1:]:
        fields = line.split("\t")
        if len(fields) < 4 or not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        start, end = int(fields[0]), int(fields[1])
        if end >= start:
            found[fields[3]] = (end - start) / 1000
    return found


_EDGE = re.compile(r"^build (?:[^:$\n]|\$.)+: (\S+)")


def planned_units(build_ninja: Path) -> int | None:
    """The edges a `build.ninja` declares (its units: torch's has one per source), phony ones
    aside; None when it is absent, unreadable or declares none."""
    try:
        with open_regular(build_ninja) as fh:
            data = fh.read(_MAX_NINJA_LOG)
    except OSError:
        return None
    text = data.decode("utf-8", "replace")
    count = sum(1 for m in map(_EDGE.match, text.splitlines()) if m and m[1] != "phony")
    return count or None


# ------------------------------------------------------------------------------- /proc


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    comm: str
    start: float  # seconds after boot


def _processes(proc: Path, hz: int) -> dict[int, _Proc]:
    found: dict[int, _Proc] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            stat = (proc / entry.name / "stat").read_text(errors="replace")
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            rest = stat[stat.rindex(")") + 2 :].split()
            found[int(entry.name)] = _Proc(int(entry.name), int(rest[1]), comm, int(rest[19]) / hz)
        except (OSError, ValueError, IndexError):  # ended meanwhile, or not a stat line
            continue
    return found


def _cmdline(proc: Path, pid: int) -> list[str]:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()[:_MAX_LINE]
    except OSError:
        return []
    return [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]


_CUDA_ARCH_MACRO = re.compile(r"^-D__CUDA_ARCH__=(\d+)0$")


def _step_arch(words: Sequence[str]) -> str | None:
    """The arch one of nvcc's steps works on: cicc's and ptxas' `-arch`, or the
    `__CUDA_ARCH__` a device-side preprocessing defines ('90')."""
    for i, word in enumerate(words):
        arch = _ARCH_FLAG.match(word)
        macro = _CUDA_ARCH_MACRO.match(word)
        if arch:
            found = _TARGET.search(_flag_value(words, i, arch))
            if found:
                return found[1]
        elif macro and "-E" in words:
            return macro[1]
    return None


def _nvcc_step(proc: Path, tree: list[_Proc], archs: Sequence[str]) -> str:
    """What nvcc runs now under a unit, from its processes: 'arch 3/9 sm_90 ptxas', ..."""
    numbers = [re.sub(r"\D+$", "", a) for a in archs]  # '100a' is compiled as 100
    steps: list[str] = []
    for p in tree:
        if p.comm in ("cudafe++", "fatbinary", "nvlink"):
            steps.append(p.comm)
        if p.comm not in ("cicc", "ptxas", "cc1plus"):
            continue
        words = _cmdline(proc, p.pid)
        arch = _step_arch(words)
        if arch is not None and re.sub(r"\D+$", "", arch) in numbers:
            at = numbers.index(re.sub(r"\D+$", "", arch))
            steps.append(f"arch {at + 1}/{len(archs)} sm_{archs[at]} {p.comm}")
        elif p.comm == "cc1plus" and words:
            steps.append("host preprocessing" if "-E" in words else "host compile")
    return ", ".join(sorted(set(steps)))


def running_units(
    units_dir: Path,
    *,
    name: Callable[[str], str],
    proc: Path = Path("/proc"),
    hz: int | None = None,
) -> tuple[RunningUnit, ...] | None:
    """The units the ninja working in `units_dir` runs now, longest first; None when no such
    ninja runs (not yet, no longer, or a build without ninja) or /proc cannot be read.

    `name` names a unit by its source path; `proc` and `hz` (clock ticks a second) are
    /proc and its unit of time, given by tests.
    """
    try:
        now = float((proc / "uptime").read_text().split()[0])
        table = _processes(proc, hz or os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
    target = str(units_dir)
    ninjas = set()
    for p in table.values():
        if p.comm == "ninja":
            with contextlib.suppress(OSError):
                if str((proc / str(p.pid) / "cwd").readlink()) == target:
                    ninjas.add(p.pid)
    if not ninjas:
        return None
    children: dict[int, list[_Proc]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p)
    units = []
    for root in (c for n in ninjas for c in children.get(n, ()) if c.pid not in ninjas):
        words = _cmdline(proc, root.pid)
        if len(words) >= 3 and PurePosixPath(words[0]).name.endswith("sh") and words[1] == "-c":
            words = _words(words[2])
        if not words:
            continue
        source, output = _unit_paths(words)
        tree: list[_Proc] = []
        todo = list(children.get(root.pid, ()))
        while todo and len(tree) < 256:
            p = todo.pop()
            tree.append(p)
            todo.extend(children.get(p.pid, ()))
        # nvcc's own arguments when it runs below (a wrapper may have replaced the arch flags)
        nvcc = next((_cmdline(proc, p.pid) for p in tree if p.comm == "nvcc"), [])
        archs = nvcc_archs(nvcc) or nvcc_archs(words)
        units.append(
            RunningUnit(
                name=name(source or output or words[0]),
                seconds=max(now - root.start, 0.0),
                archs=len(archs),
                step=_nvcc_step(proc, tree, archs) if archs else "",
            )
        )
    return tuple(sorted(units, key=lambda u: -u.seconds))


# ------------------------------------------------------------------------------ watching


class CompileWatch:
    """Follows one job's compile: the new lines of its log, ninja's processes and log.

    `poll()` reads what arrived since the last one and returns the progress; `following()`
    polls from a thread every `period` seconds while the compile runs, handing each result
    to `report`, and polls once more at its end. Nothing it meets stops the build: an error
    ends the watching (kept in `error`).
    """

    def __init__(
        self,
        log_path: Path,
        *,
        clock: Callable[[], float],
        project_dir: Path | None = None,
        units_dir: Path | None = None,
        proc: Path = Path("/proc"),
    ) -> None:
        self._log_path = log_path
        self._clock = clock
        self._units_dir = units_dir
        self._proc = proc
        self._offset: int | None = None
        self._planned: tuple[tuple[int, int], int | None] | None = None  # build.ninja's stat
        self._pending = b""
        self._skipping = False
        project = project_dir
        self.tracker = UnitTracker(
            started=clock(),
            project_dir=project,
            sources=(lambda: _compilable(project)) if project is not None else None,
        )
        self.error: str | None = None

    def _lines(self) -> Iterator[str]:
        try:
            with open_regular(self._log_path) as fh:
                size = os.fstat(fh.fileno()).st_size
                if self._offset is None or size < self._offset:  # the first look, or rewritten
                    self._offset = size
                    self._pending = b""
                fh.seek(self._offset)
                data = fh.read(_MAX_READ)
        except OSError:
            return
        self._offset += len(data)
        chunks = (self._pending + data).split(b"\n")
        self._pending = chunks.pop()
        if len(self._pending) > _MAX_LINE:
            self._pending, self._skipping = b"", True
        for chunk in chunks:
            if self._skipping:  # the rest of a line too long to keep
                self._skipping = False
                continue
            if len(chunk) <= _MAX_LINE:
                yield chunk.decode("utf-8", "replace").rsplit("\r", 1)[-1]

    def poll(self) -> UnitProgress:
        """Read what arrived and return the progress now."""
        now = self._clock()
        for line in self._lines():
            self.tracker.feed(line, now)
        running = (
            running_units(self._units_dir, name=self.tracker.name, proc=self._proc)
            if self._units_dir is not None
            else None
        )
        planned = self._planned_units() if running is not None else None
        return self.tracker.progress(self._clock(), running, planned=planned)

    def _planned_units(self) -> int | None:
        """What the running ninja's build.ninja declares, read again only when it changed."""
        path = (self._units_dir or Path()) / "build.ninja"
        try:
            st = path.stat()
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        if self._planned is None or self._planned[0] != key:
            self._planned = (key, planned_units(path))
        return self._planned[1]

    def slowest(self, count: int = 10) -> list[tuple[str, float]]:
        """The `count` slowest units this compile ran, from `.ninja_log`: (name, seconds)."""
        if self._units_dir is None or not self.tracker.outputs:
            return []
        timed = read_ninja_log(self._units_dir / ".ninja_log")
        found = [(n, timed[out]) for out, n in self.tracker.outputs.items() if out in timed]
        return sorted(found, key=lambda item: (-item[1], item[0]))[:count]

    @contextlib.contextmanager
    def following(self, *, period: float, report: Callable[[UnitProgress], None]) -> Iterator[None]:
        """Poll every `period` seconds from a thread while the body runs."""
        stop = threading.Event()

        def step(tell: bool = True) -> None:
            try:
                progress = self.poll()
                if tell:
                    report(progress)
            except Exception as exc:  # progress must not end a build
                self.error = f"{type(exc).__name__}: {exc}"
                stop.set()

        step(tell=False)  # where the log stands now: only what comes after it is read
        thread = threading.Thread(target=lambda: _every(period, stop, step), daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            if self.error is None:
                with contextlib.suppress(Exception):
                    self.poll()  # the last status lines, for slowest()


def _every(period: float, stop: threading.Event, step: Callable[[], None]) -> None:
    while not stop.wait(period):
        step()


def _compilable(project_dir: Path) -> frozenset[str]:
    """The project's C/C++/CUDA sources by their path in it."""
    files = scan_sources(project_dir).files
    return frozenset(
        f.relative_to(project_dir).as_posix() for f in files if f.suffix in SOURCE_SUFFIXES
    )


class Watch(Protocol):
    """Follows one job's compile while a `with` body runs (`progress.Progress.watch`):
    `units_dir` is where the host's ninja works, None where the host cannot see it."""

    def __call__(
        self, job: str, log_path: Path, *, project_dir: Path | None, units_dir: Path | None
    ) -> contextlib.AbstractContextManager[CompileWatch | None]: ...


def unwatched(
    job: str, log_path: Path, *, project_dir: Path | None, units_dir: Path | None
) -> contextlib.AbstractContextManager[CompileWatch | None]:
    """A compile nothing follows (a build without a progress display)."""
    return contextlib.nullcontext(None)
