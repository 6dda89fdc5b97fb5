"""Real file-system faults, on small tmpfs mounts: a full disk and a read-only site. Each ends
in one clear line and a documented exit code, and the published site is left as it was.
Needs root (mount); skipped with the reason elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.cli import buildtools
from fixtures.crafted import make_wheel

pytestmark = pytest.mark.integration


def _mount(target: Path, options: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for path in reversed(made):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30, check=False)


def _wheel(directory: Path, version: str, payload: int) -> Path:
    record = {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
    return make_wheel(
        directory,
        name="bt_scatter",
        version=version,
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": b"", "bt_scatter/data.bin": os.urandom(payload)},
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": json.dumps(record).encode()},
    )


def _index(*args: str) -> subprocess.CompletedProcess[str]:
    return buildtools("index", "--no-matrix", *args, timeout=120)


def _snapshot(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in site.rglob("*") if p.is_file()}


def test_full_disk_during_publish_keeps_the_old_site(tmp_path: Path, mounts: list[Path]) -> None:
    disk = tmp_path / "disk"
    _mount(disk, "size=512k")
    mounts.append(disk)
    site = disk / "site"
    assert (
        _index(str(_wheel(tmp_path / "a", "0.1.0+pt213cpu", 1000)), "--site", str(site)).returncode
        == 0
    )
    before = _snapshot(site)
    big = _wheel(tmp_path / "b", "0.2.0+pt213cpu", 600_000)  # random bytes: no compression
    done = _index(str(big), "--site", str(site))
    assert done.returncode in (10, 16), done
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "No space left on device" in done.stderr
    assert done.stderr.startswith(f"error: {disk}/"), done.stderr  # names the file refused
    assert _snapshot(site) == before
    leftovers = [p.name for p in disk.iterdir() if p.name not in ("site", ".site.lock")]
    assert leftovers == []


def test_read_only_site_is_one_line(tmp_path: Path, mounts: list[Path]) -> None:
    disk = tmp_path / "ro"
    _mount(disk, "size=64k,ro")
    mounts.append(disk)
    done = _index(str(_wheel(tmp_path / "a", "0.1.0+pt213cpu", 100)), "--site", str(disk / "site"))
    assert done.returncode in (10, 16), done
    assert done.stderr.count("\n") == 1 and "Read-only file system" in done.stderr, done.stderr
