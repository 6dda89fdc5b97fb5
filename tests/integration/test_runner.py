"""Every child process has a deadline, and reaching it ends the whole process group (a
compiler started by a build, a hanging `import torch` started by doctor), reported as such."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import pytest

from buildtools.process import TIMEOUT_EXIT, SubprocessRunner

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_timeout_kills_grandchildren_and_says_so(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"sleep 300 & echo $! > {pidfile}; echo started; wait"
    log = io.StringIO()
    result = SubprocessRunner().run(["sh", "-c", script], log=log, timeout=2)
    assert result.timed_out and result.returncode == TIMEOUT_EXIT
    assert "[buildtools] timed out after 2 s" in log.getvalue()
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild), "the background sleep outlived the timeout"


def test_default_deadline_applies_when_the_caller_gives_none() -> None:
    runner = SubprocessRunner(default_timeout=1)
    hang = [sys.executable, "-c", "import time; print('partial', flush=True); time.sleep(60)"]
    result = runner.run(hang, capture=True)
    assert result.timed_out
    assert "partial" in result.output and "timed out after 1 s" in result.output
