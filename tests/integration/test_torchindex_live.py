"""`buildtools knowledge --check-index` against the real package index (opt-in)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live_index


def test_check_index_against_the_live_index_passes_and_names_the_newest_releases(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "buildtools",
            "knowledge",
            "--check-index",
            "--max-age",
            "0",
            "--cache-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "  2.14.1: " in proc.stdout and "  2.15.0: " in proc.stdout
    assert "the data matches the index" in proc.stdout
    # the same run again is answered by the cache: the page and every METADATA
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "buildtools",
            "knowledge",
            "--check-index",
            "--cache-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0 and "(0 request(s) to the index" in again.stdout
