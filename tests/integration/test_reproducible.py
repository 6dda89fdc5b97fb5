"""Reproducible wheels: the same job built in two directories gives the same bytes.

The example's CPU cell (torch 2.13.0 CPU, the host's Python) is built from two copies of
its sources at different paths, each with its own wheelhouse and with `--force` (so the
second is not skipped as unchanged) and without ccache (so no object is shared): the
wheels' sha256 must be equal. The torch environment is the cached one of the other tests.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

from fixtures.cli import REPO, buildtools


def _build(root: Path) -> Path:
    project = root / "src" / "scatter"
    shutil.copytree(REPO / "examples" / "scatter", project)
    matrix = root / "matrix.yaml"
    text = (REPO / "matrix.yaml").read_text(encoding="utf-8")
    matrix.write_text(text.replace("path: examples/scatter", "path: src/scatter"))
    wheelhouse = root / "wheelhouse"
    proc = buildtools(
        "build",
        "--matrix",
        str(matrix),
        "--wheelhouse",
        str(wheelhouse),
        "--force",
        "--no-ccache",
        "--no-live",
        cwd=root,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = wheelhouse.glob("bt_scatter-*.whl")
    return wheel


def test_two_builds_in_different_directories_give_the_same_bytes(tmp_path: Path) -> None:
    first = _build(tmp_path / "one")
    second = _build(tmp_path / "elsewhere" / "two")
    assert first.name == second.name

    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    if digest(first) != digest(second):
        with zipfile.ZipFile(first) as a, zipfile.ZipFile(second) as b:
            differ = [
                i.filename
                for i in a.infolist()
                if a.read(i.filename) != b.read(i.filename)
                or i.date_time != b.getinfo(i.filename).date_time
            ]
        raise AssertionError(f"the wheels differ in {differ}")
    with zipfile.ZipFile(first) as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        record = json.loads(
            zf.read(next(n for n in zf.namelist() if n.endswith("/buildtools.json")))
        )
    # nothing of the build machine's clock or paths in the record
    text = json.dumps(record)
    assert str(tmp_path) not in text
    assert not {k for k in record if "time" in k or "date" in k}
