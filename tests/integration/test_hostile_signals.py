"""SIGTERM (what `timeout` and a cancelled CI job send) is handled like Ctrl-C by every verb:
the child's process group is ended, a staging directory is removed, and the run ends in one
line saying what it cleaned up, exit 143. Real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.crafted import make_wheel

pytestmark = pytest.mark.integration

RECORD = json.dumps({"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True})


def _wheel(directory: Path, version: str) -> Path:
    return make_wheel(
        directory,
        name="bt_scatter",
        version=version,
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": b"", "bt_scatter/data.bin": os.urandom(4096)},
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": RECORD.encode()},
    )


def _cli(args: list[str], *, prelude: str = "") -> subprocess.Popen[str]:
    """`buildtools ARGS` in a child, `prelude` run first (in that process, before the CLI)."""
    code = f"import sys\n{prelude}\nfrom buildtools.cli.main import main\nsys.exit(main())"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _snapshot(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in site.rglob("*") if p.is_file()}


def test_sigterm_while_publishing_removes_the_staged_site(tmp_path: Path) -> None:
    """SIGTERM arrives (from outside: a real signal) once the new site is staged and its
    wheels copied in: the staging directory goes, the site stays as it was, one line."""
    site = tmp_path / "site"
    done = _cli(["index", str(_wheel(tmp_path / "a", "0.1.0+pt213cpu")), "--site", str(site),
                 "--no-matrix"])  # fmt: skip
    assert done.wait(120) == 0, done.communicate()
    before = _snapshot(site)
    # the publisher signals itself when the stage is reached, as a CI cancel would
    prelude = (
        "import os, signal\n"
        "from buildtools.index import transaction\n"
        "transaction._no_fault = lambda stage: (os.kill(os.getpid(), signal.SIGTERM) "
        "if stage == 'wheels-copied' else None)"
    )
    proc = _cli(
        ["index", str(_wheel(tmp_path / "b", "0.2.0+pt213cpu")), "--site", str(site),
         "--no-matrix", "--copy", "--verify"],
        prelude=prelude,
    )  # fmt: skip
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("interrupted by SIGTERM: removed ") and "is as it was" in err, err
    assert not list(tmp_path.glob(".site.staging-*"))
    assert _snapshot(site) == before


def test_sigterm_ends_the_childs_process_group(tmp_path: Path) -> None:
    """A child (here the interpreter doctor probes) that started a background process of its
    own: both are gone after SIGTERM, and the line says which group was ended."""
    marker = str(4_000_000 + os.getpid() % 1000)  # a sleep only this test starts
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nsleep {marker} &\nsleep {marker}\n")
    fake.chmod(0o755)
    proc = _cli(["doctor", "--python", str(fake), "--no-import", "--timeout", "600"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_sleeps(marker)) < 2:
        time.sleep(0.1)
    assert len(_sleeps(marker)) == 2, "the child and its background process never started"
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert (
        err.strip()
        == f"interrupted by SIGTERM: ended the process group of python (pid {_pid(err)})"
    )
    time.sleep(0.2)
    assert _sleeps(marker) == []  # nothing left running, not even the background one


def test_sigterm_with_nothing_running_says_so() -> None:
    code = (
        "import os, signal, sys\nfrom buildtools.cli import main as m\n"
        "m.cmd_schema = lambda args, out: os.kill(os.getpid(), signal.SIGTERM) or 0\n"
        "sys.exit(m.main(['schema']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 143, done.stderr
    assert done.stderr == "interrupted by SIGTERM: no child process was running\n"


def _sleeps(marker: str) -> list[str]:
    found = subprocess.run(
        ["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True, check=False, timeout=30
    )
    return found.stdout.split()


def _pid(line: str) -> str:
    return line.rsplit("(pid ", 1)[-1].split(")", maxsplit=1)[0]
