"""Interpreter discovery: pyenv, uv and PATH layouts built in a temporary directory."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from buildtools.errors import ToolMissingError
from buildtools.toolchain.findpython import find_python, install_hint, python_candidates

MACHINE = platform.machine()


def exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_pyenv_newest_patch_wins(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for v in ("3.12.1", "3.12.10", "3.12.9", "3.11.7"):
        exe(home / ".pyenv" / "versions" / v / "bin" / f"python{v.rsplit('.', 1)[0]}")
    found = find_python("3.12", env={}, home=home)
    assert found == home / ".pyenv/versions/3.12.10/bin/python3.12"


def test_exact_version_request(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for v in ("3.12.1", "3.12.10"):
        exe(home / ".pyenv" / "versions" / v / "bin" / "python3.12")
    assert (
        find_python("3.12.1", env={}, home=home) == home / ".pyenv/versions/3.12.1/bin/python3.12"
    )
    # "3.1" is not a prefix of "3.12": versions compare by component.
    with pytest.raises(ToolMissingError):
        find_python("3.1", env={}, home=home)


def test_pyenv_root_from_env_and_variants_skipped(tmp_path: Path) -> None:
    root = tmp_path / "pyenv"
    exe(root / "versions" / "3.13.0t" / "bin" / "python3.13")  # free-threaded: other ABI
    exe(root / "versions" / "3.13-dev" / "bin" / "python3.13")
    exe(root / "versions" / "pypy3.13-7.3" / "bin" / "python3.13")
    with pytest.raises(ToolMissingError):
        find_python("3.13", env={"PYENV_ROOT": str(root)}, home=tmp_path)
    exe(root / "versions" / "3.13.0" / "bin" / "python3.13")
    assert find_python("3.13", env={"PYENV_ROOT": str(root)}, home=tmp_path).parts[-3] == "3.13.0"


def test_uv_managed_python(tmp_path: Path) -> None:
    home = tmp_path / "home"
    uv = home / ".local" / "share" / "uv" / "python"
    exe(uv / f"cpython-3.10.16-linux-{MACHINE}-gnu" / "bin" / "python3")
    exe(uv / f"cpython-3.10.17+freethreaded-linux-{MACHINE}-gnu" / "bin" / "python3")
    exe(uv / "cpython-3.10.18-linux-someotherarch-gnu" / "bin" / "python3")
    found = find_python("3.10", env={}, home=home)
    assert found == uv / f"cpython-3.10.16-linux-{MACHINE}-gnu" / "bin" / "python3"
    # UV_PYTHON_INSTALL_DIR moves the whole store.
    other = tmp_path / "uvstore"
    exe(other / f"cpython-3.10.2-linux-{MACHINE}-gnu" / "bin" / "python3.10")
    found = find_python("3.10", env={"UV_PYTHON_INSTALL_DIR": str(other)}, home=tmp_path)
    assert found.name == "python3.10"


def test_pyenv_before_uv_before_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bindir = tmp_path / "bin"
    shims = tmp_path / ".pyenv" / "shims"
    exe(bindir / "python3.12")
    exe(shims / "python3.12")
    env = {"PATH": f"{shims}:{bindir}"}
    candidates = python_candidates("3.12", env=env, home=home)
    assert candidates == [(None, bindir / "python3.12")]  # shims never
    exe(home / ".local/share/uv/python" / f"cpython-3.12.4-linux-{MACHINE}-gnu" / "bin" / "python3")
    exe(home / ".pyenv" / "versions" / "3.12.1" / "bin" / "python3.12")
    versions = [v for v, _ in python_candidates("3.12", env=env, home=home)]
    assert versions == ["3.12.1", "3.12.4", None]
    # A full-version request cannot be answered from PATH without running the interpreter.
    assert [v for v, _ in python_candidates("3.12.4", env=env, home=home)] == ["3.12.4"]


def test_non_executable_is_ignored(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = home / ".pyenv" / "versions" / "3.11.7" / "bin" / "python3.11"
    path.parent.mkdir(parents=True)
    path.write_text("")
    with pytest.raises(ToolMissingError):
        find_python("3.11", env={}, home=home)


def test_missing_names_the_install_command(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(ToolMissingError) as err:
        find_python("3.9", env={"PATH": ""}, home=home)
    assert "uv python install 3.9" in str(err.value)
    assert "pyenv install 3.9" in str(err.value)
    (home / ".pyenv").mkdir(parents=True)
    assert install_hint("3.9", env={}, home=home).startswith("pyenv install 3.9")


def test_bad_version_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a Python version"):
        find_python("python3", env={}, home=tmp_path)


def test_free_threaded_requests_find_only_free_threaded_builds(tmp_path: Path) -> None:
    home = tmp_path / "home"
    exe(home / ".pyenv/versions/3.14.0/bin/python3.14")
    exe(home / ".pyenv/versions/3.14.0t/bin/python3.14t")
    uv = home / ".local/share/uv/python"
    exe(uv / f"cpython-3.14.1+freethreaded-linux-{MACHINE}-gnu/bin/python3.14t")
    assert find_python("3.14", env={}, home=home) == home / ".pyenv/versions/3.14.0/bin/python3.14"
    found = [p for _, p in python_candidates("3.14t", env={}, home=home)]
    assert found == [
        home / ".pyenv/versions/3.14.0t/bin/python3.14t",
        uv / f"cpython-3.14.1+freethreaded-linux-{MACHINE}-gnu/bin/python3.14t",
    ]
    with pytest.raises(
        ToolMissingError, match=r"3\.13t \(free-threaded CPython.*uv python install 3\.13t"
    ):
        find_python("3.13t", env={}, home=home)
