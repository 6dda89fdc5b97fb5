"""A hanging `import torch` does not hang `buildtools doctor`: the import runs in a child with a
deadline, is killed at it, and the report says so (before, doctor waited forever)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from fixtures.cli import buildtools

pytestmark = pytest.mark.integration


def test_hanging_import_is_reported_not_waited_for(tmp_path: Path) -> None:
    torch = tmp_path / "site" / "torch"
    torch.mkdir(parents=True)
    (torch / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\nhip = None\n")
    (torch / "__init__.py").write_text(
        "import time\nprint('importing torch', flush=True)\ntime.sleep(3600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = buildtools(
        *("doctor", "--python", sys.executable, "--timeout", "3"),
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 13, done.stdout + done.stderr
    assert "`import torch` did not finish within 3 s and was killed" in done.stdout
    assert "importing torch" in done.stdout
