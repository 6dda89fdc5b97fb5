"""The one chokepoint through which buildtools starts processes.

Executors receive a `ProcessRunner`; tests pass a recording fake and assert on the exact argv
and environment instead of monkeypatching `subprocess`.

Every process has a deadline: the caller's `timeout`, else the runner's default
(`DEFAULT_TIMEOUT`, or $BUILDTOOLS_TIMEOUT seconds). Each child starts in a process group of
its own, so a timeout, Ctrl-C or SIGTERM (which the command line turns into the same
interrupt, `errors.Terminated`) ends the compilers and nvcc it started too, not only the
direct child; the result then says `timed_out` and the log says after how long, and an
interrupt records which group it ended (`errors.note_cleanup`).
"""

from __future__ import annotations

__all__ = ["CommandResult", "ProcessRunner", "SubprocessRunner", "echo", "which"]

import math
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from .errors import ConfigError, ToolMissingError, note_cleanup


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    """What a finished command returned; `output` is stdout+stderr when captured."""

    argv: tuple[str, ...]
    returncode: int
    output: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class ProcessRunner(Protocol):
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


DEFAULT_TIMEOUT = 6 * 3600.0  # a cold CUDA build of a large extension stays well inside
TIMEOUT_EXIT = 124  # what timeout(1) returns; CommandResult.timed_out says it for sure


def _seconds(text: str, what: str) -> float:
    """A deadline in seconds: finite, above 0, at most a week; ConfigError otherwise (NaN or
    a negative number would disable the deadline or kill at once)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or value > 7 * 24 * 3600:
        raise ConfigError(f"{what}: {text!r} is not a number of seconds above 0 and at most a week")
    return value


def _has_fileno(stream: IO[str]) -> bool:
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        return False
    return True


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def echo(args: Sequence[str]) -> str:
    """The command line as the log shows it: a program passed with `-c` that runs over
    several lines (the environment probe's ~200) is named by its size, not printed."""
    shown = list(args)
    for i in range(1, len(shown)):
        if shown[i - 1] == "-c" and shown[i].count("\n") > 1:
            shown[i] = f"<a program of {shown[i].count(chr(10)) + 1} lines>"
    return shlex.join(shown)


class SubprocessRunner:
    """The real runner: echoes the command into the log, never uses a shell, always has a
    deadline (`timeout`, else `default_timeout`, else $BUILDTOOLS_TIMEOUT, else 6 hours)."""

    def __init__(self, *, default_timeout: float | None = None) -> None:
        env_value = os.environ.get("BUILDTOOLS_TIMEOUT", "")
        from_env = _seconds(env_value, "$BUILDTOOLS_TIMEOUT") if env_value else None
        if default_timeout is not None:
            _seconds(str(default_timeout), "the default timeout")
        self.default_timeout = default_timeout or from_env or DEFAULT_TIMEOUT

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
        limit = timeout if timeout is not None else self.default_timeout
        if not (math.isfinite(limit) and limit > 0):  # a caller's NaN would mean no deadline
            raise ValueError(f"timeout {limit!r}: a deadline is a number of seconds above 0")
        if log is not None:
            log.write(f"$ {echo(args)}\n")
            log.flush()
        piped = capture or log is None or not _has_fileno(log)
        try:
            proc = subprocess.Popen(
                args,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if piped else log,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,  # its own process group: a timeout ends it all
            )
        except FileNotFoundError as exc:
            raise ToolMissingError(f"{args[0]}: cannot run ({exc.strerror})") from exc
        except PermissionError as exc:
            raise ToolMissingError(f"{args[0]}: cannot run ({exc.strerror})") from exc
        with proc:
            try:
                out, _ = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                partial, _ = proc.communicate()
                message = f"timed out after {limit:g} s"
                if log is not None:
                    if piped and partial:
                        log.write(partial)
                    log.write(f"\n[buildtools] {message}\n")
                    log.flush()
                return CommandResult(
                    argv=tuple(args),
                    returncode=TIMEOUT_EXIT,
                    output=(partial or "") + f"\n{message}" if piped else message,
                    timed_out=True,
                )
            except BaseException as exc:  # Ctrl-C, SIGTERM, an error: leave no compiler running
                _kill_group(proc)
                if isinstance(exc, KeyboardInterrupt):
                    name = Path(args[0]).name
                    note_cleanup(exc, f"ended the process group of {name} (pid {proc.pid})")
                raise
        text = out or "" if piped else ""
        if piped and log is not None:
            log.write(text)
            log.flush()
        return CommandResult(argv=tuple(args), returncode=proc.returncode, output=text)
