"""Special files in a project tree: fingerprinting reads regular files only and names the rest
(a FIFO used to hang `buildtools build` forever; a dangling link gave a traceback)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildtools.build.fingerprint import scan_sources, source_fingerprint


@pytest.fixture
def deadline() -> Iterator[None]:
    """A hang becomes a failure after 10 s instead of blocking the suite."""

    def fail(signum: int, frame: object) -> None:
        raise TimeoutError("fingerprinting hung")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "setup.py").write_text("print('hi')\n")
    (root / "src" / "a.cpp").write_text("int a;\n")
    return root


def test_fifo_is_skipped_not_read(tmp_path: Path, deadline: None) -> None:
    root = _project(tmp_path)
    before = source_fingerprint(root)
    os.mkfifo(root / "src" / "pipe")
    scan = scan_sources(root)
    assert ("src/pipe", "a FIFO") in scan.skipped
    assert source_fingerprint(root) == before


def test_dangling_symlink_is_skipped(tmp_path: Path, deadline: None) -> None:
    root = _project(tmp_path)
    (root / "gone.h").symlink_to(root / "missing.h")
    assert ("gone.h", "a dangling symbolic link") in scan_sources(root).skipped
    source_fingerprint(root)  # no traceback


def test_symlinks_are_followed_only_inside_the_project(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (tmp_path / "secret").write_text("outside\n")
    (root / "out.h").symlink_to(tmp_path / "secret")
    (root / "in.h").symlink_to(root / "setup.py")
    scan = scan_sources(root)
    assert ("out.h", "a symbolic link out of the project") in scan.skipped
    assert root / "in.h" in scan.files
