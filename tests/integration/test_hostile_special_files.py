"""Special files and closed streams: a FIFO, a device or a link to /dev/zero given where a file
is read is refused by its type before it is opened (no hang, no memory filled), and a
command started with its standard output closed ends in one line. The command lines of every
verb are in tests/corpus/args.tsv; these are what that table cannot express."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.crafted import make_site_packages

from buildtools.cli.main import main
from buildtools.files import NotRegularFileError, open_regular, read_regular

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("verb", [["plan", "--matrix", "matrix.yaml"], ["schema"], ["knowledge"]])
def test_a_closed_standard_output_is_one_line(verb: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "buildtools", *verb],
        cwd=REPO,
        capture_output=False,
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert done.returncode == 16, done.stderr
    assert done.stderr.startswith("error: standard output is closed"), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_check_refuses_special_files_by_their_type(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo-1.0-py3-none-any.whl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero-1.0-py3-none-any.whl"
    zero.symlink_to("/dev/zero")
    out = io.StringIO()
    code = main(
        ["check", str(fifo), str(zero), "--torch", str(make_site_packages(tmp_path / "t"))], out=out
    )
    assert code == 9
    text = out.getvalue()
    assert "a FIFO (named pipe), not a regular file" in text
    assert "a character device, not a regular file" in text


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dev-null", "directory", "socket"])
def test_inputs_are_refused_by_type_before_they_are_opened(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "input"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would block until a writer comes
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")  # reading it never ends
    elif kind == "dev-null":
        path.symlink_to("/dev/null")
    elif kind == "directory":
        path.mkdir()
    else:
        import socket

        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
    with pytest.raises(NotRegularFileError) as err:
        read_regular(path, max_bytes=1 << 20)
    assert err.value.filename == str(path) and "not a regular file" in err.value.strerror
    with pytest.raises(NotRegularFileError):
        open_regular(path)


def test_a_regular_input_larger_than_allowed_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 2048)
    with pytest.raises(OSError, match="larger than 1,024 bytes"):
        read_regular(path, max_bytes=1024)
    assert read_regular(path, max_bytes=4096) == b"x" * 2048
