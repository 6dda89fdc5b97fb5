"""Two `buildtools build` runs of the same job into one wheelhouse at once: the second waits for
the first (per-job lock on the wheelhouse, per-tree lock on the build tree), both succeed, and
the wheelhouse holds one good wheel, no temporary file and a whole log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.envs import cache_dir

pytestmark = pytest.mark.integration


def test_two_concurrent_builds_of_one_job(tmp_path: Path) -> None:
    project = tmp_path / "scatter"
    shutil.copytree(REPO / "examples" / "scatter", project, ignore=shutil.ignore_patterns("build"))
    wheelhouse = tmp_path / "wheelhouse"
    env = {**os.environ, "BUILDTOOLS_CACHE_DIR": str(cache_dir())}
    argv = [
        sys.executable, "-m", "buildtools", "build", "--matrix", str(REPO / "matrix.yaml"),
        "--project", str(project), "--wheelhouse", str(wheelhouse), "--no-live", "--force",
    ]  # fmt: skip
    procs = [
        subprocess.Popen(argv, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
        for _ in range(2)
    ]  # fmt: skip
    outputs = [p.communicate(timeout=1800) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out + err
    assert any("waiting for it to finish" in err for _, err in outputs), outputs
    wheels = sorted(wheelhouse.glob("*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as zf:
        assert zf.testzip() is None
    assert not [p for p in wheelhouse.iterdir() if p.name.endswith(".tmp")]
    report = json.loads((wheelhouse / "report.json").read_text())
    assert [c["status"] for c in report["cells"] if c["status"] != "excluded-by-compat"] == [
        "built"
    ]
    log = next((wheelhouse / "logs").glob("torch*.log")).read_text()
    assert log.count("# torch-buildtools ") == 1  # one run's log, not two interleaved
