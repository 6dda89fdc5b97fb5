"""Live progress per job in a terminal; plain timestamped lines elsewhere (CI logs).

The ETA comes from how long each job took last time (`<cache>/timings.json`), or, for a
job never built here, from the mean of the jobs finished in this run; the remaining work
is divided by the number of jobs that compile at once.
"""

from __future__ import annotations

__all__ = ["Progress", "estimate_remaining", "format_seconds", "make_progress"]

import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text


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
) -> float | None:
    """Seconds until every job is done (pure): None while nothing tells how long a job takes,
    or once a job runs longer than it was expected to.

    `expected` holds every job still to finish (its known duration or None); `elapsed` the
    running ones' time so far; `finished` the durations of jobs done in this run.
    """
    fallback = sum(finished.values()) / len(finished) if finished else None
    work = 0.0
    for job, known in expected.items():
        duration = known if known is not None else fallback
        if duration is None:
            return None
        spent = elapsed.get(job, 0.0)
        if spent > duration:  # the estimate was wrong: say so rather than count down to 0
            return None
        work += max(duration - spent, duration * 0.05)
    return work / max(1, concurrent)


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
    ) -> None:
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
            return estimate_remaining(
                {j: self._expected.get(j) for j in pending},
                {j: now - t for j, t in self._started_at.items() if j not in self._done},
                self._finished,
                concurrent=self._concurrent,
            )

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
            now = self._clock()
            for job, (stage, since) in self._rows.items():
                elapsed = f"{now - since:.0f} s" if since and job not in self._done else ""
                known = self._expected.get(job)
                cells = (job, stage, elapsed, format_seconds(known) if known else "")
                table.add_row(*map(Text, cells))  # text, not markup: a status holds a path
            table.caption = self._caption()
            return table

    def stage(self, job: str, stage: str) -> None:
        """Job `job` entered `stage` (env, build, repair, check, ...)."""
        with self._lock:
            now = self._clock()
            self._rows[job] = (stage, now)
            self._started_at.setdefault(job, now)
            if self._live is not None:
                self._live.update(self._render())
            else:
                self._console.print(f"[{now - self._started:6.1f}s] {job}: {stage}", markup=False)

    def finish(self, job: str, status: str, *, counted: bool = True) -> None:
        """Job `job` ended with `status`; `counted`: its duration informs the ETA."""
        with self._lock:
            now = self._clock()
            if counted and job in self._started_at:
                self._finished[job] = now - self._started_at[job]
            self._done.add(job)
            self._rows[job] = (status, now)
            if self._live is not None:
                self._live.update(self._render())
            else:
                eta = ""
                if len(self._done) < len(self._rows):
                    eta = f" ({len(self._done)}/{len(self._rows)} done, ETA {format_seconds(self.eta())})"
                self._console.print(
                    f"[{now - self._started:6.1f}s] {job}: {status}{eta}", markup=False
                )


def make_progress(
    job_ids: list[str],
    *,
    out: TextIO,
    live: bool = True,
    expected: Mapping[str, float] | None = None,
    concurrent: int = 1,
) -> Progress:
    return Progress(job_ids, out=out, live=live, expected=expected, concurrent=concurrent)
