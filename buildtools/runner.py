"""The one chokepoint through which buildtools starts processes.

Executors receive a `Runner`; tests pass a recording fake and assert on the exact argv
and environment instead of monkeypatching `subprocess`.
"""

from __future__ import annotations

__all__ = ["CommandResult", "Runner", "SubprocessRunner", "which"]

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from .errors import ToolMissingError


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    """What a finished command returned; `output` is stdout+stderr when captured."""

    argv: tuple[str, ...]
    returncode: int
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Runner(Protocol):
    """Runs one command. `log` receives the combined output when given."""

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        log: IO[str] | None = None,
        capture: bool = False,
        timeout: float | None = None,
    ) -> CommandResult: ...


def which(program: str, *, install_hint: str, path: str | None = None) -> str:
    """Resolve `program` on PATH or raise ToolMissingError naming how to install it."""
    found = shutil.which(program, path=path)
    if found is None:
        raise ToolMissingError(f"{program}: not found on PATH; install it with: {install_hint}")
    return found


class SubprocessRunner:
    """The real runner: echoes the command into the log, never uses a shell."""

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        log: IO[str] | None = None,
        capture: bool = False,
        timeout: float | None = None,
    ) -> CommandResult:
        args = [os.fspath(a) for a in argv]
        if log is not None:
            log.write(f"$ {shlex.join(args)}\n")
            log.flush()
        try:
            if capture or log is None:
                proc = subprocess.run(
                    args,
                    cwd=cwd,
                    env=dict(env) if env is not None else None,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    timeout=timeout,
                    check=False,
                )
                out = proc.stdout or ""
                if log is not None:
                    log.write(out)
                    log.flush()
                return CommandResult(argv=tuple(args), returncode=proc.returncode, output=out)
            streamed = subprocess.run(
                args,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
            return CommandResult(argv=tuple(args), returncode=streamed.returncode)
        except FileNotFoundError as exc:
            raise ToolMissingError(f"{args[0]}: cannot run ({exc.strerror})") from exc
        except subprocess.TimeoutExpired:
            if log is not None:
                log.write(f"\n[buildtools] timed out after {timeout} s\n")
            return CommandResult(argv=tuple(args), returncode=124, output="timed out")
