"""`dist down` stops only the processes `dist up` started (issue 44, class 7), with a real
daemon started the way `up` starts sccache-dist (`cluster._spawn`: its own session, its start
time and executable recorded): a record whose pid was reused by another process (another
start time) or names another executable is not signalled; the real one is stopped."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest

from buildtools.distcompile.cluster import ClusterProcess, ClusterState, _is_ours, _spawn, _stop

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sys.platform != "linux", reason="/proc/<pid>/stat and exe are Linux's"),
]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_down_signals_only_the_process_up_started(tmp_path: Path) -> None:
    config = tmp_path / "server.conf"  # what `up` passes: the config on the command line
    config.write_text("")
    pid, started, exe = _spawn(
        [sys.executable, "-c", "import time; time.sleep(600)", str(config)],
        env={"PATH": "/usr/bin:/bin"},
        log=tmp_path / "server.log",
        cpus=(),
        tied=True,
    )
    assert started > 0 and exe == os.path.realpath(sys.executable)
    real = ClusterProcess(
        role="server", pid=pid, config=config, log=tmp_path / "server.log", addr="127.0.0.1:1",
        started=started, exe=exe,
    )  # fmt: skip
    try:
        assert _is_ours(real)
        # the same pid and command line, but recorded for another start (a reused pid) or
        # another program: never ours, never signalled
        for forged in (
            dataclasses.replace(real, started=started + 1),
            dataclasses.replace(real, exe="/usr/bin/sccache-dist"),
        ):
            state = ClusterState(
                state_dir=tmp_path, scheduler_url="http://127.0.0.1:1", client_token="t",
                processes=(forged,),
            )  # fmt: skip
            assert _stop(state) == []
            time.sleep(0.2)
            assert _alive(pid)
        state = ClusterState(
            state_dir=tmp_path, scheduler_url="http://127.0.0.1:1", client_token="t",
            processes=(real,),
        )  # fmt: skip
        assert _stop(state) == [f"server 127.0.0.1:1 (pid {pid})"]
        # an exiting process loses /proc/<pid>/exe (no longer ours) a moment before it is
        # gone: under load that moment was seen, so allow it a few seconds
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.killpg(pid, 9)
