"""The execution context of one command: where its processes go, their log and environment.

Made once per command (`RunContext.of`) and handed down as one argument instead of
threading `runner, log, env` through every call, the way pypa/build binds its environment
into the runner it hands to `ProjectBuilder`. It is frozen: a step that needs another log
(a job's log file) or another environment (a toolchain's) derives a new context with
`logging_to` / `with_env`, and the caller's stays as it was.
"""

from __future__ import annotations

__all__ = ["RunContext"]

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import IO

from .process import CommandResult, ProcessRunner, SubprocessRunner


class _Discard(io.StringIO):
    """A log that keeps nothing (a context made without one)."""

    def write(self, text: str) -> int:
        return len(text)


_DISCARD = _Discard()


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """Processes (`processes`), the environment they start from (`env`) and their log."""

    processes: ProcessRunner
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    log: IO[str] | None = None

    @classmethod
    def of(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        processes: ProcessRunner | None = None,
        log: IO[str] | None = None,
    ) -> RunContext:
        """The context of a command: this process's environment and the real runner."""
        return cls(
            processes=processes or SubprocessRunner(),
            env=MappingProxyType(dict(os.environ if env is None else env)),
            log=log,
        )

    @property
    def stream(self) -> IO[str]:
        """Where a step writes its notes: the log, or a sink where the context has none."""
        return self.log if self.log is not None else _DISCARD

    def logging_to(self, log: IO[str] | None) -> RunContext:
        """The same context writing its commands and their output to `log`."""
        return replace(self, log=log)

    def with_env(self, env: Mapping[str, str]) -> RunContext:
        """The same context whose processes start from `env`."""
        return replace(self, env=MappingProxyType(dict(env)))

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        capture: bool = False,
        timeout: float | None = None,
        log: IO[str] | None = None,
    ) -> CommandResult:
        """Run `argv` with this context's environment (or `env`) and log (or `log`)."""
        return self.processes.run(
            argv,
            cwd=cwd,
            env=self.env if env is None else env,
            log=self.log if log is None else log,
            capture=capture,
            timeout=timeout,
        )
