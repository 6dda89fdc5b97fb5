"""Live progress per job in a terminal; plain timestamped lines elsewhere (CI logs)."""

from __future__ import annotations

__all__ = ["Progress", "make_progress"]

import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table


class Progress:
    """Tracks each job's current stage; renders live when `live` is set."""

    def __init__(self, job_ids: list[str], *, out: TextIO, live: bool) -> None:
        self._console = Console(file=out, highlight=False)
        self._live_enabled = live and self._console.is_terminal
        self._rows: dict[str, tuple[str, float]] = dict.fromkeys(job_ids, ("waiting", 0.0))
        self._started = time.monotonic()
        self._done = 0
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if self._live_enabled:
            self._live = Live(self._render(), console=self._console, refresh_per_second=4)
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

    def _render(self) -> Table:
        table = Table(show_header=True, header_style="bold")
        table.add_column("job")
        table.add_column("stage")
        table.add_column("elapsed", justify="right")
        now = time.monotonic()
        for job, (stage, since) in self._rows.items():
            elapsed = f"{now - since:.0f} s" if since else ""
            table.add_row(job, stage, elapsed)
        table.caption = f"{self._done}/{len(self._rows)} done, {now - self._started:.0f} s"
        return table

    def stage(self, job: str, stage: str) -> None:
        """Job `job` entered `stage` (env, build, repair, check, ...)."""
        self._rows[job] = (stage, time.monotonic())
        if self._live is not None:
            self._live.update(self._render())
        else:
            self._console.print(f"[{time.monotonic() - self._started:6.1f}s] {job}: {stage}")

    def finish(self, job: str, status: str) -> None:
        self._done += 1
        self.stage(job, status)


def make_progress(job_ids: list[str], *, out: TextIO, live: bool = True) -> Progress:
    return Progress(job_ids, out=out, live=live)
