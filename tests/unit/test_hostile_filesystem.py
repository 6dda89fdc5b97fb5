"""A full disk or an unwritable path: one clear line and exit code 16, and nothing half-written
left behind (the old file stays whole)."""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel

from buildtools.cli.main import main
from buildtools.errors import ExitCode
from buildtools.files import copy_atomic, describe_os_error, write_atomic


def _disk_full(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_write_atomic_on_a_full_disk_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "report.json"
    path.write_text("old\n")
    monkeypatch.setattr(os, "fsync", _disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_copy_atomic_on_a_full_disk_leaves_no_partial_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "a-1.0-py3-none-any.whl"
    src.write_bytes(b"x" * 4096)
    house = tmp_path / "wheelhouse"
    house.mkdir()
    monkeypatch.setattr("shutil.copyfileobj", _disk_full)
    with pytest.raises(OSError):
        copy_atomic(src, house / src.name)
    assert list(house.iterdir()) == []


@pytest.mark.parametrize(
    ("code", "remedy"),
    [
        (errno.ENOSPC, "free some disk space"),
        (errno.EROFS, "read-only; choose a writable directory"),
        (errno.EACCES, "permission denied"),
        (errno.ENOTDIR, "not a directory"),
    ],
)
def test_os_errors_are_described_with_a_remedy(code: int, remedy: str) -> None:
    text = describe_os_error(OSError(code, os.strerror(code), "/srv/site"))
    assert text.startswith("/srv/site: ") and remedy in text


def test_index_into_a_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
    wheel = make_wheel(
        tmp_path / "w",
        name="bt_scatter",
        version="0.1.0+pt213cpu",
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": b""},
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": json.dumps(record).encode()},
    )
    site = tmp_path / "site"
    site.write_text("I am a file\n")
    argv = ["index", str(wheel), "--no-matrix", "--site", str(site)]
    code = main(argv, out=io.StringIO())
    err = capsys.readouterr().err
    assert code == ExitCode.PUBLISH
    assert "exists and is not a directory; --site must be a directory" in err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert site.read_text() == "I am a file\n"
