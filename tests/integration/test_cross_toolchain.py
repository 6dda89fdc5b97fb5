"""The cross compiler's two in-container decisions, run for real on this host.

The wrappers (CC/CXX of an emulated aarch64 build) run the image's compiler until
before-build accepts the cross g++; before-build refuses a cross g++ that does not run or
links an object of another machine than the container's. No Docker needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from buildtools.backends.docker import incontainer
from buildtools.backends.docker.cross import (
    CROSS_GXX,
    CROSS_OK_FILE,
    wrapper_scripts,
    write_wrappers,
)


def test_the_wrappers_run_the_images_compiler_until_before_build_accepts_the_cross_one(
    tmp_path: Path,
) -> None:
    assert not Path(CROSS_OK_FILE).exists()  # this host is no build container
    write_wrappers(tmp_path)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "c++").write_text('#!/bin/sh\necho "native c++ $*"\n')
    (fake / "c++").chmod(0o755)
    out = subprocess.run(
        [str(tmp_path / "cross" / "c++"), "-c", "x.cpp"],
        env={"PATH": f"{fake}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert out == "native c++ -c x.cpp\n"
    text = wrapper_scripts()["c++"]
    assert f"if [ -f {CROSS_OK_FILE} ]" in text
    assert f'exec /opt/buildtools/venv/bin/ccache {CROSS_GXX} --sysroot=/ "$@"' in text


def test_before_build_refuses_a_compiler_that_does_not_run() -> None:
    assert "does not run here" in (incontainer._cross_check("/nonexistent/g++") or "")


@pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-g++") is None or os.uname().machine != "x86_64",
    reason="needs Debian's aarch64 cross g++ on an x86_64 host",
)
def test_before_build_checks_the_objects_machine() -> None:
    """On this x86_64 host the cross g++ links an aarch64 object: not this machine's."""
    why = incontainer._cross_check(shutil.which("aarch64-linux-gnu-g++") or "")
    native = shutil.which("c++")
    if (
        native
        and subprocess.run(
            [native, "-dumpfullversion"], capture_output=True, text=True, check=False, timeout=60
        ).stdout.split(".")[0]
        != "12"
    ):
        assert why is not None and "not the same GCC" in why
    else:
        assert why == "a test object is EM_AARCH64, this container runs EM_X86_64"


def test_the_cross_wrapper_passes_library_path_as_l_options(tmp_path: Path) -> None:
    """A cross GCC ignores LIBRARY_PATH; CUDA cells link libcudart through it."""
    fake = tmp_path / "gxx"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "[$a]"; done\n')
    fake.chmod(0o755)
    ok = tmp_path / "ok"
    ok.touch()
    text = (
        wrapper_scripts()["c++"]
        .replace(CROSS_OK_FILE, str(ok))
        .replace(CROSS_GXX, str(fake))
        .replace("/opt/buildtools/venv/bin/ccache", str(tmp_path / "no-ccache"))
    )
    wrapper = tmp_path / "c++"
    wrapper.write_text(text)
    wrapper.chmod(0o755)
    out = subprocess.run(
        [str(wrapper), "-shared", "x.o", "-lcudart"],
        env={"PATH": "/usr/bin:/bin", "LIBRARY_PATH": "/tmp/bt/lib:/a b:"},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.splitlines()
    assert out == [
        "[--sysroot=/]",
        "[-shared]",
        "[x.o]",
        "[-lcudart]",
        "[-L/tmp/bt/lib]",
        "[-L/a b]",
    ]
