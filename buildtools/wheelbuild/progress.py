"""Live progress per job in a terminal; plain timestamped lines elsewhere (CI logs).

The ETA comes from how long each job took last time (`<cache>/timings.json`), or, for a
job never built here, from the rate its compile units are done at (`compileunits`), else
from the mean of the jobs finished in this run; the remaining work is divided by the
number of jobs that compile at once.

While a job compiles, the table shows its units done / total, the units running and an
ETA; in a CI log a line says the same at most every `interval` seconds (30), so a compile
of 17 minutes is no longer one silent `build` line, and a short one prints nothing more.
"""

from __future__ import annotations

__all__ = [
    "PLAIN_INTERVAL",
    "Progress",
    "describe_units",
    "estimate_remaining",
    "format_seconds",
    "make_progress",
]

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .compileunits import CompileWatch, UnitProgress

# a CI log gets a compiling job's units at most this often (seconds)
PLAIN_INTERVAL = 30.0


def format_seconds(seconds: float | None) -> str:
    """'?' for unknown, else '45 s', '3 min 20 s', '1 h 05 min'."""
    if seconds is None:
        return "?"
    s = round(max(seconds, 0.0))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def estimate_remaining(
    expected: Mapping[str, float | None],
    elapsed: Mapping[str, float],
    finished: Mapping[str, float],
    *,
    concurrent: int,
    hints: Mapping[str, float] | None = None,
) -> float | None:
    """Seconds until every job is done (pure): None while nothing tells how long a job takes,
    or once a job runs longer than it was expected to.

    `expected` holds every job still to finish (its known duration or None); `elapsed` the
    running ones' time so far; `finished` the durations of jobs done in this run; `hints`
    what is left of a compiling job by the rate of its units, for a job of no known
    duration or one that outran it.
    """
    fallback = sum(finished.values()) / len(finished) if finished else None
    work = 0.0
    for job, known in expected.items():
        hint = hints.get(job) if hints else None
        duration = known if known is not None else fallback
        spent = elapsed.get(job, 0.0)
        if hint is not None and (known is None or spent > known):
            work += hint
            continue
        if duration is None:
            return None
        if spent > duration:  # the estimate was wrong: say so rather than count down to 0
            return None
        work += max(duration - spent, duration * 0.05)
    return work / max(1, concurrent)


def describe_units(units: UnitProgress, eta: float | None, *, eta_bound: bool = False) -> str:
    """'7/12 units, 3 running (longest: csrc/x.cu 241 s, 9 archs), ETA 4 min 10 s' (pure);
    `eta_bound`: the ETA is an upper bound (the units' total is)."""
    if not units.seen:
        text = "no compile units seen yet"
    elif units.total is None:
        text = f"{units.done} units done, total unknown"
    elif units.bounded:
        text = f"{units.done} of at most {units.total} units"
    else:
        text = f"{units.done}/{units.total} units"
    if units.running:
        text += f", {len(units.running)} running (longest: {units.running[0].describe()})"
    if eta is None:
        return text + ", ETA unknown"
    return text + f", ETA {'at most ' if eta_bound else ''}{format_seconds(eta)}"


def _units_cell(units: UnitProgress | None) -> str:
    if units is None or not units.seen:
        return ""
    total = "?" if units.total is None else f"{'<=' if units.bounded else ''}{units.total}"
    return f"{units.done}/{total}"


def _running_cell(units: UnitProgress | None) -> str:
    if units is None or not units.running:
        return ""
    more = f" +{len(units.running) - 1}" if len(units.running) > 1 else ""
    return units.running[0].describe() + more


class Progress:
    """Tracks each job's current stage; renders live when `live` is set. Thread-safe."""

    def __init__(
        self,
        job_ids: list[str],
        *,
        out: TextIO,
        live: bool,
        expected: Mapping[str, float] | None = None,
        concurrent: int = 1,
        clock: Callable[[], float] = time.monotonic,
        interval: float = PLAIN_INTERVAL,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"progress interval {interval!r}: a number of seconds above 0")
        self._console = Console(file=out, highlight=False)
        self._live_enabled = live and self._console.is_terminal
        self._clock = clock
        self._rows: dict[str, tuple[str, float]] = dict.fromkeys(job_ids, ("waiting", 0.0))
        self._expected = dict(expected or {})
        self._concurrent = concurrent
        self._started_at: dict[str, float] = {}
        self._finished: dict[str, float] = {}  # durations of jobs built in this run
        self._done: set[str] = set()
        self._started = clock()
        self._lock = threading.RLock()
        self._live: Live | None = None
        self._interval = interval
        self._poll = min(2.0, interval / 3)  # how often a compile's log and ninja are read
        self._units: dict[str, UnitProgress] = {}  # the jobs compiling now
        self._spoke: dict[str, float] = {}  # when a plain line last named each job

    def __enter__(self) -> Progress:
        if self._live_enabled:
            self._live = Live(
                get_renderable=self._render, console=self._console, refresh_per_second=2
            )
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def eta(self) -> float | None:
        """Seconds until every job is done, or None when unknown."""
        with self._lock:
            now = self._clock()
            pending = [j for j in self._rows if j not in self._done]
            hints = {j: u.eta() for j, u in self._units.items() if j not in self._done}
            return estimate_remaining(
                {j: self._expected.get(j) for j in pending},
                {j: now - t for j, t in self._started_at.items() if j not in self._done},
                self._finished,
                concurrent=self._concurrent,
                hints={j: h for j, h in hints.items() if h is not None},
            )

    def job_eta(self, job: str) -> tuple[float | None, bool]:
        """Seconds until `job` is done, and whether that is an upper bound: from its
        recorded duration while it has not run longer, else from its compile units."""
        with self._lock:
            known = self._expected.get(job)
            if known is not None and job in self._started_at:
                left = known - (self._clock() - self._started_at[job])
                if left >= 0:
                    return left, False
            units = self._units.get(job)
            if units is None:
                return None, False
            return units.eta(), units.bounded

    def _caption(self) -> str:
        now = self._clock()
        running = sum(1 for j in self._started_at if j not in self._done)
        text = (
            f"{len(self._done)}/{len(self._rows)} done, {running} running, "
            f"{format_seconds(now - self._started)} elapsed"
        )
        if len(self._done) < len(self._rows):
            text += f", ETA {format_seconds(self.eta())}"
        return text

    def _render(self) -> Table:
        with self._lock:
            table = Table(show_header=True, header_style="bold")
            table.add_column("job")
            table.add_column("stage")
            table.add_column("elapsed", justify="right")
            table.add_column("expected", justify="right")
            table.add_column("units", justify="right")
            table.add_column("compiling now")
            table.add_column("ETA", justify="right")
            now = self._clock()
            for job, (stage, since) in self._rows.items():
                elapsed = f"{now - since:.0f} s" if since and job not in self._done else ""
                known = self._expected.get(job)
                units = self._units.get(job)
                eta, bound = self.job_eta(job) if job in self._units else (None, False)
                cells = (
                    job,
                    stage,
                    elapsed,
                    format_seconds(known) if known else "",
                    _units_cell(units),
                    _running_cell(units),
                    ("<= " if bound else "") + format_seconds(eta) if units is not None else "",
                )
                table.add_row(*map(Text, cells))  # text, not markup: a status holds a path
            table.caption = self._caption()
            return table

    def stage(self, job: str, stage: str) -> None:
        """Job `job` entered `stage` (env, build, repair, check, ...)."""
        with self._lock:
            now = self._clock()
            self._rows[job] = (stage, now)
            self._started_at.setdefault(job, now)
            self._units.pop(job, None)
            if self._live is not None:
                self._live.update(self._render())
            else:
                self._spoke[job] = now
                self._console.print(
                    f"[{now - self._started:6.1f}s] {job}: {stage}", markup=False, soft_wrap=True
                )

    def units(self, job: str, units: UnitProgress) -> None:
        """What job `job`'s compile shows now: the table's, or a plain line when none has
        named the job for `interval` seconds."""
        with self._lock:
            if job in self._done:
                return
            self._units[job] = units
            now = self._clock()
            if self._live is not None:
                self._live.update(self._render())
                return
            if now - self._spoke.get(job, now) < self._interval:
                return
            self._spoke[job] = now
            eta, bound = self.job_eta(job)
            line = f"{self._rows[job][0]} {describe_units(units, eta, eta_bound=bound)}"
            self._console.print(
                f"[{now - self._started:6.1f}s] {job}: {line}", markup=False, soft_wrap=True
            )

    def watch(
        self,
        job: str,
        log_path: Path,
        *,
        project_dir: Path | None = None,
        units_dir: Path | None = None,
    ) -> contextlib.AbstractContextManager[CompileWatch]:
        """Follow `job`'s compile while the body runs: its log (`log_path`), and the ninja
        working in `units_dir` (None: a compile this host cannot see, in a container)."""
        watch = CompileWatch(
            log_path, clock=self._clock, project_dir=project_dir, units_dir=units_dir
        )
        return self._following(job, watch)

    @contextlib.contextmanager
    def _following(self, job: str, watch: CompileWatch) -> Iterator[CompileWatch]:
        try:
            with watch.following(period=self._poll, report=lambda u: self.units(job, u)):
                yield watch
        finally:
            with self._lock:
                self._units.pop(job, None)

    def finish(self, job: str, status: str, *, counted: bool = True) -> None:
        """Job `job` ended with `status`; `counted`: its duration informs the ETA."""
        with self._lock:
            now = self._clock()
            if counted and job in self._started_at:
                self._finished[job] = now - self._started_at[job]
            self._done.add(job)
            self._units.pop(job, None)
            self._rows[job] = (status, now)
            if self._live is not None:
                self._live.update(self._render())
            else:
                eta = ""
                if len(self._done) < len(self._rows):
                    eta = f" ({len(self._done)}/{len(self._rows)} done, ETA {format_seconds(self.eta())})"
                self._console.print(
                    f"[{now - self._started:6.1f}s] {job}: {status}{eta}",
                    markup=False,
                    soft_wrap=True,
                )


def make_progress(
    job_ids: list[str],
    *,
    out: TextIO,
    live: bool = True,
    expected: Mapping[str, float] | None = None,
    concurrent: int = 1,
    interval: float = PLAIN_INTERVAL,
) -> Progress:
    """The progress of a run's jobs (`interval`: the least seconds between two plain lines
    on one compiling job)."""
    return Progress(
        job_ids, out=out, live=live, expected=expected, concurrent=concurrent, interval=interval
    )
